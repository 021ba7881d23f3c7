"""The memo that :mod:`circuits.reference` keeps while one is active: a verification evaluates the same squared
distances and cluster means several times (the reference run, its tie windows, the trajectory check, the
estimator's stop guess); within :func:`memoised_distances` each is computed once. Results are functions of the
values alone, so a memoised run gives the very numbers an unmemoised one does."""

from __future__ import annotations

import itertools
from contextlib import contextmanager
from contextvars import ContextVar
from collections.abc import Callable, Iterator
from typing import TypeVar

import numpy as np

T = TypeVar("T")


#: The memo of :func:`memoised_distances` while one is active: ``points`` ((shape, bytes) of the float64 point sets
#: seen), ``entries`` ((index of the points, C's shape, C's bytes) -> the distances), ``bytes`` held.
_DISTANCE_MEMO: ContextVar[dict | None] = ContextVar("sq_distance_memo", default=None)
#: Each memo's number, never reused (a key of :func:`memoised_array_key` names its memo).
_MEMO_SERIALS = itertools.count()
#: A memo holds at most this many bytes (distances and copies of the points); beyond, results are not kept.
MEMO_BYTES = 64 * 2**20


@contextmanager
def memoised_distances() -> Iterator[None]:
    """Within the block, :func:`sq_distances` of points and centroids equal to ones already evaluated returns the
    array computed then (read-only) instead of computing it again. A result is a function of the values alone,
    so it is the same array of numbers either way: a verification evaluates the distances to the same centroids
    several times (the reference run, its tie windows, the trajectory check, the estimator's stop guess). Points
    match by value (``np.array_equal`` against a private copy, so a caller editing its array in place cannot
    make a stale match; a ``-0.0`` and a ``0.0`` coordinate give the same squared differences), centroids by
    their exact bytes, both C-contiguous (others are computed as without the memo). At most :data:`MEMO_BYTES`
    are kept. Nested blocks share the outermost memo."""
    if _DISTANCE_MEMO.get() is not None:
        yield
        return
    token = _DISTANCE_MEMO.set({"serial": next(_MEMO_SERIALS), "points": [], "entries": {}, "ids": set(), "bytes": 0})
    try:
        yield
    finally:
        _DISTANCE_MEMO.reset(token)


def memoised_array_key(D: np.ndarray) -> tuple | None:
    """A key that stands for the values of ``D``: the active memo's number, ``D``'s memory, shape and strides, if
    ``D`` is (a view of) a result the memo of :func:`memoised_distances` holds (read-only, kept alive, so those
    values cannot change); ``None`` otherwise."""
    memo = _DISTANCE_MEMO.get()
    if memo is None or D.flags.writeable:
        return None
    root = D
    while isinstance(root.base, np.ndarray):
        root = root.base
    if id(root) not in memo["ids"]:
        return None
    return (memo["serial"], D.__array_interface__["data"][0], D.shape, D.strides, D.dtype.str)


def _memo_points(memo: dict, X: np.ndarray, add: bool) -> int | None:
    """Index of the memo's copy of ``X`` (equal values), adding one if ``add`` and it fits; ``None`` if none.

    The copies are kept as bytes: a copy with ``X``'s exact bytes is looked for first (one ``memcmp`` each, where
    ``np.array_equal`` allocates and compares elementwise; equal bytes are the same input, so the same distances,
    NaN included). Only then by value (``-0.0 == 0.0``), as before: a set is added only when no earlier one
    equals it by value, so the first match by bytes is the first match by value."""
    raw = X.tobytes()
    shape = X.shape
    for i, (P_shape, P) in enumerate(memo["points"]):
        if P_shape == shape and P == raw:
            return i
    for i, (P_shape, P) in enumerate(memo["points"]):
        if P_shape == shape and np.array_equal(np.frombuffer(P, dtype=np.float64).reshape(shape), X):
            return i
    if not add or memo["bytes"] + X.nbytes > MEMO_BYTES:
        return None
    memo["points"].append((shape, raw))
    memo["bytes"] += X.nbytes
    return len(memo["points"]) - 1


def memoised(X: np.ndarray, key: tuple, compute: Callable[[], T], size: Callable[[T], int] = lambda _: 0) -> T:
    """``compute()``, a function of the values of the points ``X`` and of what ``key`` stands for, kept in the memo
    of :func:`memoised_distances` while one is active (``X`` matched by value as for the distances, a float64
    C-contiguous array; ``key``: hashables that stand for the other operands' values, led by a name of what is
    computed). ``size(result)``: the bytes the result holds, kept only within :data:`MEMO_BYTES`. The same object is
    returned each time: a caller whose result is mutable hands out copies. Outside a memo, computed every call."""
    memo = _DISTANCE_MEMO.get()
    if memo is None or not (isinstance(X, np.ndarray) and X.dtype == np.float64 and X.flags.c_contiguous):
        return compute()
    i = _memo_points(memo, X, add=True)
    if i is None:
        return compute()
    full = (key[0], i, *key[1:])
    if full in memo["entries"]:
        return memo["entries"][full]
    result = compute()
    nbytes = size(result)
    if memo["bytes"] + nbytes <= MEMO_BYTES:
        memo["entries"][full] = result
        memo["bytes"] += nbytes
    return result
