"""The memo that :mod:`circuits.reference` keeps while one is active: a verification evaluates the same squared
distances and cluster means several times (the reference run, its tie windows, the trajectory check, the
estimator's stop guess); within :func:`memoised_distances` each is computed once. Results are functions of the
values alone, so a memoised run gives the very numbers an unmemoised one does."""

from __future__ import annotations

import itertools
import threading
from contextlib import contextmanager
from contextvars import ContextVar
from collections.abc import Callable, Iterator
from typing import TypeVar

import numpy as np

T = TypeVar("T")


#: The memo of :func:`memoised_distances` while one is active: ``points`` ((shape, read-only copy) of the float64
#: point sets seen), ``entries`` ((index of the points, C's shape, C's bytes) -> the distances), ``bytes`` held.
_DISTANCE_MEMO: ContextVar[dict | None] = ContextVar("sq_distance_memo", default=None)
#: Held while a memo's dicts are read and changed: the memo is shared by threads (the prefetched reference run, the
#: step checks two at a time), and an eviction's "oldest key" must still be there when it is popped. Computations
#: run outside it.
_LOCK = threading.RLock()
#: Each memo's number, never reused (a key of :func:`memoised_array_key` names its memo).
_MEMO_SERIALS = itertools.count()
#: Each kept distance matrix's number, never reused (part of its :func:`memoised_array_key`).
_ENTRY_SERIALS = itertools.count()
#: A memo holds at most this many bytes (distances and copies of the points); beyond, the least recently used
#: distances are dropped to make room (see :data:`DISTANCES_KEPT`), and other results are not kept.
MEMO_BYTES = 64 * 2**20
#: However large one distance matrix is, the memo makes room for this many of them (beside its copies of the
#: points): at a million points one ``n x k`` matrix alone exceeds :data:`MEMO_BYTES`, and a verification asks for
#: the distances to each centroid set several times in a row (reference step, tie window, objective, checks).
#: Two suffice for that: at n = 10^6, k = 10, T = 10 (``cluster --json``, docs/performance.md) two against four gave
#: the same output in as much CPU time (34.6-35.9 s against 36.8-38.9 s) and a peak 0.3 GB lower.
DISTANCES_KEPT = 2


@contextmanager
def memoised_distances() -> Iterator[None]:
    """Within the block, :func:`sq_distances` of points and centroids equal to ones already evaluated returns the
    array computed then (read-only) instead of computing it again. A result is a function of the values alone,
    so it is the same array of numbers either way: a verification evaluates the distances to the same centroids
    several times (the reference run, its tie windows, the trajectory check, the estimator's stop guess). Points
    match by value (``np.array_equal`` against a private copy, so a caller editing its array in place cannot
    make a stale match; a ``-0.0`` and a ``0.0`` coordinate give the same squared differences), centroids by
    their exact bytes, both C-contiguous (others are computed as without the memo). At most :data:`MEMO_BYTES`
    are kept, or room for :data:`DISTANCES_KEPT` distance matrices where that is more (:func:`distances_budget`).
    Nested blocks share the outermost memo."""
    if _DISTANCE_MEMO.get() is not None:
        yield
        return
    token = _DISTANCE_MEMO.set({"serial": next(_MEMO_SERIALS), "points": [], "entries": {}, "ids": {}, "bytes": 0,
                                "distances": {}})
    try:
        yield
    finally:
        _DISTANCE_MEMO.reset(token)


def memoised_array_key(D: np.ndarray) -> tuple | None:
    """A key that stands for the values of ``D``: the active memo's number, the entry's own number, ``D``'s memory,
    shape and strides, if ``D`` is (a view of) a result the memo of :func:`memoised_distances` holds (read-only,
    kept alive, so those values cannot change); ``None`` otherwise. The entry's number is never reused, so a result
    dropped from the memo and a later one at the same address have different keys."""
    memo = _DISTANCE_MEMO.get()
    if memo is None or D.flags.writeable:
        return None
    root = D
    while isinstance(root.base, np.ndarray):
        root = root.base
    entry = memo["ids"].get(id(root))
    if entry is None or entry[1] is not root:
        return None
    return (memo["serial"], entry[0], D.__array_interface__["data"][0], D.shape, D.strides, D.dtype.str)


def lookup_distances(memo: dict, key: tuple) -> np.ndarray | None:
    """The kept distances of ``key`` (marked most recently used), or ``None``."""
    with _LOCK:
        found = memo["distances"].pop(key, None)
        if found is not None:
            memo["distances"][key] = found
        return found


def distances_budget(X: np.ndarray, k: int) -> int:
    """The memo's budget while it keeps distances of the points ``X`` to ``k`` centroids: :data:`MEMO_BYTES`, or
    room for a copy of ``X`` and :data:`DISTANCES_KEPT` such matrices, whichever is larger."""
    return max(MEMO_BYTES, X.nbytes + DISTANCES_KEPT * 8 * X.shape[0] * k)


def keep_distances(memo: dict, key: tuple, D: np.ndarray, budget: int) -> None:
    """Keep ``D`` (made read-only) under ``key``, dropping the least recently used distances while the memo would
    exceed ``budget`` bytes (:func:`distances_budget`)."""
    with _LOCK:
        if key in memo["distances"]:  # another thread kept the same values meanwhile
            return
        while memo["distances"] and memo["bytes"] + D.nbytes > budget:
            old = memo["distances"].pop(next(iter(memo["distances"])))
            del memo["ids"][id(old)]
            memo["bytes"] -= old.nbytes
        if memo["bytes"] + D.nbytes > budget:
            return
        D.flags.writeable = False
        memo["distances"][key] = D
        # The array itself is kept with its number: its id is only looked up while it is alive.
        memo["ids"][id(D)] = (next(_ENTRY_SERIALS), D)
        memo["bytes"] += D.nbytes


def _memo_points(memo: dict, X: np.ndarray, add: bool, budget: int = MEMO_BYTES) -> int | None:
    """Index of the memo's copy of ``X`` (equal values), adding one if ``add`` and it fits within ``budget``
    bytes (:data:`MEMO_BYTES` unless distances of ``X`` are to be kept); ``None`` if none.

    The copies are kept as read-only float64 arrays: a copy with ``X``'s exact bytes is looked for first (equal
    bytes are the same input, so the same distances, NaN included; compared block by block, :func:`_same_bytes`,
    without copying ``X``). Only then by value (``-0.0 == 0.0``), as before: a set is added only when no earlier one
    equals it by value, so the first match by bytes is the first match by value."""
    with _LOCK:
        return _memo_points_locked(memo, X, add, budget)


def _memo_points_locked(memo: dict, X: np.ndarray, add: bool, budget: int) -> int | None:
    shape = X.shape
    for i, (P_shape, P) in enumerate(memo["points"]):
        if P_shape == shape and _same_bytes(P, X):
            return i
    for i, (P_shape, P) in enumerate(memo["points"]):
        if P_shape == shape and np.array_equal(P, X):
            return i
    if not add or memo["bytes"] + X.nbytes > budget:
        return None
    P = np.array(X, dtype=np.float64, order="C", copy=True)
    P.flags.writeable = False
    memo["points"].append((shape, P))
    memo["bytes"] += P.nbytes
    return len(memo["points"]) - 1


#: Elements compared at once by :func:`_same_bytes` (512 KiB of each operand: in cache, and an early exit).
_COMPARE_ELEMENTS = 2**16


def _same_bytes(P: np.ndarray, X: np.ndarray) -> bool:
    """Whether ``X`` holds exactly the bytes of the memo's copy ``P`` (what ``X.tobytes() == P.tobytes()`` says):
    for a C-contiguous ``X`` of ``P``'s dtype, compared as 8-byte integers block by block, without a copy of ``X``."""
    if X.dtype != P.dtype or X.shape != P.shape:
        return X.tobytes() == P.tobytes()
    if not X.flags.c_contiguous or X.dtype.itemsize != 8:
        return X.tobytes() == P.tobytes()
    a, b = P.reshape(-1).view(np.int64), X.reshape(-1).view(np.int64)
    return all((a[start : start + _COMPARE_ELEMENTS] == b[start : start + _COMPARE_ELEMENTS]).all()
               for start in range(0, len(a), _COMPARE_ELEMENTS))


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
    with _LOCK:
        if full in memo["entries"]:
            return memo["entries"][full]
    result = compute()
    nbytes = size(result)
    with _LOCK:
        if full in memo["entries"]:  # computed by another thread meanwhile: the same values
            return memo["entries"][full]
        # Within MEMO_BYTES beside the points and distance matrices (which have their own room, distances_budget): at
        # a million points those would otherwise crowd out every cluster mean, each then computed twice.
        held = sum(D.nbytes for D in memo["distances"].values()) + sum(P.nbytes for _, P in memo["points"])
        if memo["bytes"] - held + nbytes <= MEMO_BYTES:
            memo["entries"][full] = result
            memo["bytes"] += nbytes
    return result
