"""JSON from files someone may have edited (checkpoints), parsed with limits so every bad file is one line.

:func:`json.loads` trusts its input in ways a checkpoint reader cannot: a value nested a few thousand levels deep
raises ``RecursionError``; an integer of more than 4,300 digits raises Python's integer-conversion ``ValueError``,
and one of 400 digits parses fine and then overflows ``float()`` wherever it is used; ``1e400`` becomes ``inf``;
``NaN`` and ``Infinity`` are accepted. :func:`loads` refuses all of these with a :class:`UntrustedJSONError`
naming the field (``training.seed``, ``alphas[0]``), checked before any value reaches a validator:

* nesting deeper than ``max_depth`` is found by a scan of the text's brackets before parsing;
* integers of more than :data:`MAX_INT_DIGITS` digits and number literals longer than :data:`MAX_NUMBER_CHARS`
  characters are never converted (the ``parse_int``/``parse_float`` hooks see the literal first);
* a float literal outside float64's range, and ``NaN``/``Infinity`` unless ``nonfinite=True``, are refused.

The types of the values (a bool is not an integer) are the caller's schema to check; this module only guarantees
that what it returns is plain, shallow and finite.
"""

from __future__ import annotations

import itertools
import json
import math
import re

#: Containers inside containers; no checkpoint of this project nests more than 4 levels.
MAX_DEPTH = 32
#: Digits of an integer literal. Below 10**100 every integer converts to a finite float64, so a schema can compare
#: and convert it and say in its own words which range the field allows; longer ones never reach it.
MAX_INT_DIGITS = 100
#: Characters of a non-integer literal: ``repr`` of a float64 takes at most 24.
MAX_NUMBER_CHARS = 100

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}:,]', re.DOTALL)
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class UntrustedJSONError(ValueError):
    """Text that is not JSON within the limits; ``field`` is the path of the offending value ("" for the text)."""

    def __init__(self, where: str, field: str, detail: str):
        self.where, self.field, self.detail = where, field, detail
        super().__init__(f"{where}: {field}: {detail}" if field else f"{where}: {detail}")


class _Refused:
    """A number the limits refuse, left in the parsed tree so that the error can name its field."""

    __slots__ = ("detail",)

    def __init__(self, detail: str):
        self.detail = detail


def _component(key) -> str:
    if isinstance(key, int):
        return f"[{key}]"
    text = key if _NAME.fullmatch(key) else json.dumps(key)
    return "." + (text if len(text) <= 40 else text[:37] + "...")


def field_name(path: list) -> str:
    """``["training", "x", 0]`` -> ``training.x[0]``."""
    return "".join(_component(key) for key in path).lstrip(".")


def _depth_path(text: str, max_depth: int) -> list | None:
    """The path of the first container nested deeper than ``max_depth``, or ``None`` if there is none."""
    brackets = re.sub(r"[^\[\]{}]", "", _STRING.sub("", text))
    if max(itertools.accumulate(1 if c in "[{" else -1 for c in brackets), default=0) <= max_depth:
        return None
    # Over the limit: walk the tokens again, keeping the keys and indices, to name where.
    stack: list[list] = []  # one [kind, key or index] per open container
    last = None
    for match in _TOKEN.finditer(text):
        token = match.group()
        if token in "[{":
            if len(stack) == max_depth:
                return [frame[1] for frame in stack]
            stack.append([token, 0 if token == "[" else None])
        elif token in "]}":
            if stack:
                stack.pop()
        elif token == ",":
            if stack and stack[-1][0] == "[":
                stack[-1][1] += 1
        elif token == ":":
            if stack and stack[-1][0] == "{":
                try:
                    stack[-1][1] = json.loads(last)
                except (TypeError, ValueError):
                    stack[-1][1] = "?"
        else:
            last = token
    return []


def _first_refused(value, path: list):
    if isinstance(value, _Refused):
        return path, value
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        found = _first_refused(item, path + [key])
        if found is not None:
            return found
    return None


def loads(text: str, where: str, *, max_depth: int = MAX_DEPTH, nonfinite: bool = False):
    """The JSON value in ``text``, or :class:`UntrustedJSONError` naming ``where`` and the field at fault.

    ``nonfinite``: accept ``NaN``, ``Infinity`` and ``-Infinity`` (a training log records a diverged loss as NaN).
    """
    path = _depth_path(text, max_depth)
    if path is not None:
        shown = field_name(path[:6]) + ("..." if len(path) > 6 else "")
        raise UntrustedJSONError(where, shown, f"JSON nested too deeply (more than {max_depth} levels)")

    def parse_int(literal: str):
        digits = len(literal.lstrip("-"))
        if digits > MAX_INT_DIGITS:
            return _Refused(f"an integer of {digits} digits is out of range (at most {MAX_INT_DIGITS} digits)")
        return int(literal)

    def parse_float(literal: str):
        if len(literal) > MAX_NUMBER_CHARS:
            return _Refused(f"a number written with {len(literal)} characters is out of range"
                            f" (at most {MAX_NUMBER_CHARS})")
        number = float(literal)
        if not math.isfinite(number):
            return _Refused(f"{literal} is out of range (beyond float64's largest number)")
        return number

    def parse_constant(name: str):
        return float(name) if nonfinite else _Refused(f"{name} is not a finite number")

    try:
        value = json.loads(text, parse_int=parse_int, parse_float=parse_float, parse_constant=parse_constant)
    except RecursionError:  # a limit below max_depth (a small interpreter stack): still bad input
        raise UntrustedJSONError(where, "", "JSON nested too deeply") from None
    except ValueError as exc:  # JSONDecodeError, and anything the hooks let through
        raise UntrustedJSONError(where, "", f"not valid JSON ({exc})") from None
    found = _first_refused(value, [])
    if found is not None:
        raise UntrustedJSONError(where, field_name(found[0]) or "the document", found[1].detail)
    return value
