"""The run-time type checker the test run applies to ``circuits`` and ``analysis`` (pyproject's
``--jaxtyping-packages``): beartype on every annotated function and dataclass, jaxtyping shapes included.

Two readings of the annotations, because that is what they mean in numerical code: PEP 484's numeric tower (an
``int`` is a valid ``float``), and a numpy integer (``np.int64`` from an argmax) is a valid ``int``.
"""

import numpy as np
from beartype import BeartypeConf, FrozenDict, beartype

checked = beartype(conf=BeartypeConf(is_pep484_tower=True, hint_overrides=FrozenDict({int: int | np.integer})))
