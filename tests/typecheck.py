"""The run-time type checker the test run applies to ``circuits`` and ``analysis`` (pyproject's
``--jaxtyping-packages``): beartype on every annotated function and dataclass, jaxtyping shapes included.

PEP 484's numeric tower is on, because that is what the annotations mean: an ``int`` is a valid ``float``.
"""

from beartype import BeartypeConf, beartype

checked = beartype(conf=BeartypeConf(is_pep484_tower=True))
