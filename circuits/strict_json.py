"""Strict JSON out (RFC 8259): the one writer of every JSON document the project prints or writes.

Python's ``json.dumps`` writes ``NaN``, ``Infinity`` and ``-Infinity``, which JSON does not have: ``JSON.parse``,
``jq`` and most other parsers refuse the whole document. :func:`dumps` refuses them instead (``allow_nan=False``)
with a :class:`NonFiniteError` naming the first such value by its path (``tasks.per_step[3].ratio_mean``), so a
non-finite number never reaches a reader as a literal. A producer whose number can be undefined writes ``null``
and says why beside it; :func:`nulled` does that for records in which a non-finite number has one meaning (a
diverged training validation).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator


class NonFiniteError(ValueError):
    """A document holds a number that JSON cannot: ``where`` is its path, ``value`` the number."""

    def __init__(self, where: str, value: float):
        self.where, self.value = where, value
        super().__init__(f"{where or 'the document'} is {value}, which JSON cannot hold")


def _nonfinite(obj, path: str) -> Iterator[tuple[str, float]]:
    if isinstance(obj, float):
        if not math.isfinite(obj):
            yield path, obj
    elif isinstance(obj, dict):
        for key, value in obj.items():
            yield from _nonfinite(value, f"{path}.{key}" if path else str(key))
    elif isinstance(obj, (list, tuple)):
        for i, value in enumerate(obj):
            yield from _nonfinite(value, f"{path}[{i}]")


def first_nonfinite(obj) -> tuple[str, float] | None:
    """``(path, value)`` of the first NaN or infinite float in ``obj`` (dicts, lists and tuples), or ``None``."""
    return next(_nonfinite(obj, ""), None)


def dumps(obj, **kwargs) -> str:
    """``json.dumps(obj, **kwargs)``, strict: a NaN or infinite number raises :class:`NonFiniteError`."""
    try:
        return json.dumps(obj, allow_nan=False, **kwargs)
    except ValueError:
        found = first_nonfinite(obj)
        if found is None:  # a float subclass or a default= hook made it: not a path this scan sees
            raise
        raise NonFiniteError(*found) from None


def nulled(obj):
    """``obj`` with every NaN or infinite float replaced by ``None`` (JSON ``null``)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {key: nulled(value) for key, value in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [nulled(value) for value in obj]
    return obj
