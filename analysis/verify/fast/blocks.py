"""Block-by-block forms of the textbook's ``n x k`` computations (:mod:`circuits.reference`), each the same numbers
bit for bit (tests/unit/test_verify_fast.py holds each to the textbook): a row of points is decided on its own, so
blocks of rows small enough to stay in cache give what the whole matrix gives, a few times faster at a million
points."""

from __future__ import annotations

import numpy as np

from circuits import reference


#: Elements of the differences :func:`contiguous_sq_distances` holds at once (1 MiB: they stay in cache).
_DIFF_ELEMENTS = 2**17


def sq_distances(X: np.ndarray, C: np.ndarray) -> np.ndarray:
    """:func:`circuits.reference.sq_distances`, bit for bit: :func:`contiguous_sq_distances` for C-contiguous
    float64 operands, :func:`transposed_sq_distances` for a Fortran-ordered ``C`` (a block's decoded input), the
    textbook's own loop otherwise (another layout of ``C`` lays its differences out, and so sums them, in another
    order)."""
    X, C = np.asarray(X, dtype=np.float64), np.asarray(C, dtype=np.float64)
    if not (X.flags.c_contiguous and C.size and (C.flags.c_contiguous or C.flags.f_contiguous)):
        return reference.sq_distances(X, C)
    out = np.empty((X.shape[0], C.shape[0]))
    (contiguous_sq_distances if C.flags.c_contiguous else transposed_sq_distances)(X, C, out, reference.CHUNK)
    return out


def own_sq_distances(X: np.ndarray, C: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """``sq_distances(X, C)[i, labels[i]]`` for every point (labels in ``0..k-1``), chunk by chunk, with no ``n x k``
    matrix: for a C-contiguous ``C``, the same differences summed by the same ``einsum`` over a centroid axis of
    length 1, at ``1/k`` of the work; for a Fortran-ordered one, :func:`_transposed_own_sq_distances`; otherwise
    each chunk of the distances is made as the textbook makes it, and picked. The same numbers bit for bit each
    way."""
    X, C = np.asarray(X, dtype=np.float64), np.asarray(C, dtype=np.float64)
    if X.flags.c_contiguous and C.flags.f_contiguous and not C.flags.c_contiguous:
        return _transposed_own_sq_distances(X, C, labels)
    out = np.empty(X.shape[0])
    rows = np.arange(min(reference.CHUNK, X.shape[0]))
    for start in range(0, X.shape[0], reference.CHUNK):
        chunk = labels[start : start + reference.CHUNK]
        if C.flags.c_contiguous:
            diff = X[start : start + reference.CHUNK, None, :] - C[chunk][:, None, :]
            out[start : start + reference.CHUNK] = np.einsum("pcd,pcd->pc", diff, diff)[:, 0]
        else:
            diff = X[start : start + reference.CHUNK, None, :] - C[None, :, :]
            out[start : start + reference.CHUNK] = np.einsum("pcd,pcd->pc", diff, diff)[rows[: len(chunk)], chunk]
    return out


def objective(X: np.ndarray, C: np.ndarray, labels: np.ndarray) -> float:
    """:func:`circuits.reference.objective` of given labels, from each point's own distance (no ``n x k``
    matrix): the same numbers summed in the same order."""
    labels = np.asarray(labels)
    inside = np.flatnonzero(labels >= 0)
    if len(inside) == 0:
        return 0.0
    X = np.asarray(X, dtype=np.float64)
    # Every point inside: X itself (the same values as its copy X[inside], so the same distances).
    return float(own_sq_distances(X if len(inside) == len(X) else X[inside], C, labels[inside]).sum())


def contiguous_sq_distances(X: np.ndarray, C: np.ndarray, out: np.ndarray, max_rows: int) -> None:
    """:func:`circuits.reference.sq_distances` of C-contiguous ``X`` and ``C`` into ``out``: the same differences,
    laid out as the broadcast ``X[:, None, :] - C[None, :, :]`` lays them out (C order, the coordinate innermost),
    summed by the same ``einsum``, so the same numbers bit for bit. What differs
    is how the differences are made: each point's row repeated ``k`` times (a copy of whole rows) minus the centroids
    tiled once per call, one subtraction over contiguous memory, where the broadcast loops over rows of ``d``
    elements; and blocks small enough to stay in cache (at most ``max_rows`` points), summed straight into ``out``."""
    k, d = C.shape
    rows = max(1, min(max_rows, _DIFF_ELEMENTS // (k * d)))
    tiled = np.tile(C.reshape(-1), min(rows, X.shape[0])).reshape(-1, k, d)
    for start in range(0, X.shape[0], rows):
        block = X[start : start + rows]
        diff = np.repeat(block, k, axis=0).reshape(len(block), k, d)
        diff -= tiled[: len(block)]
        np.einsum("pcd,pcd->pc", diff, diff, out=out[start : start + len(block)])


def transposed_sq_distances(X: np.ndarray, C: np.ndarray, out: np.ndarray, max_rows: int) -> None:
    """:func:`circuits.reference.sq_distances` of a C-contiguous ``X`` and a Fortran-ordered ``C`` into ``out``. The
    textbook's broadcast then lays each point's differences out coordinate by coordinate, the centroids innermost
    (it follows ``C``'s strides), and its ``einsum`` adds the squares one coordinate after another. Here the same
    layout is made on purpose, ``X[:, :, None] - C.T`` (``C.T`` is C-contiguous), and handed to the same ``einsum``
    as the same ``(point, centroid, coordinate)`` view: the same strides and values, so the same sums, in blocks
    small enough to stay in cache (at most ``max_rows`` points)."""
    k, d = C.shape
    rows = max(1, min(max_rows, _DIFF_ELEMENTS // (k * d)))
    by_coordinate = C.T[None, :, :]
    for start in range(0, X.shape[0], rows):
        diff = X[start : start + rows, :, None] - by_coordinate
        view = diff.transpose(0, 2, 1)
        np.einsum("pcd,pcd->pc", view, view, out=out[start : start + len(diff)])


def _transposed_own_sq_distances(X: np.ndarray, C: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """:func:`own_sq_distances` for a Fortran-ordered ``C``: what :func:`transposed_sq_distances` gives at each
    point's own centroid. The textbook's ``einsum`` there runs its inner loop over the centroids, so each sum is the
    squares added one coordinate after another; here the same squares, added in the same order, a block of points
    at a time (tests/unit/test_verify_fast.py holds both to the textbook)."""
    out = np.empty(X.shape[0])
    rows = max(1, _DIFF_ELEMENTS // max(1, X.shape[1]))
    for start in range(0, X.shape[0], rows):
        block, own = X[start : start + rows], C[labels[start : start + rows]]
        squares = np.subtract(block.T, own.T)  # a row of differences per coordinate
        squares *= squares
        total = out[start : start + len(block)]
        total[:] = squares[0]
        for row in squares[1:]:
            total += row
    return out


#: Entries of an ``n x k`` matrix that a pass of :func:`assign_within_biased` holds per temporary (512 KiB: in cache).
_WITHIN_ENTRIES = 2**16


def assign_within_biased(V: np.ndarray, bias: np.ndarray | None, E: np.ndarray) -> np.ndarray:
    """The lowest column among those whose cost ``D = V + bias`` (``bias`` ``None``: ``D = V``) is within ``E_ij +
    E_imin`` of the smallest (what a step-wise check expects of a block's decoded input, analysis.verify.checks),
    block by block of points: the decision of a point reads its own row alone, so each block decides as the whole
    matrix would, with the same numbers (``V + bias`` is added per block, as the whole sum would be), and its
    temporaries stay in cache."""
    n, k = V.shape
    chosen = np.empty(n, dtype=np.intp)
    rows = max(1, _WITHIN_ENTRIES // max(1, k))
    index = np.arange(min(rows, n))
    for start in range(0, n, rows):
        D = V[start : start + rows] if bias is None else V[start : start + rows] + bias
        here, Eb = index[: len(D)], E[start : start + rows]
        best = np.argmin(D, axis=1)
        candidate = D - D[here, best][:, None] <= Eb + Eb[here, best][:, None]
        chosen[start : start + len(D)] = np.argmax(candidate, axis=1)  # the first True: the lowest tied index
    return chosen


def labels_of(R: np.ndarray) -> np.ndarray:
    """:func:`circuits.reference.labels_of`, bit for bit: :func:`one_hot_labels` where it applies."""
    R = np.asarray(R, dtype=np.float64)
    if R.ndim != 2 or not R.flags.c_contiguous or R.shape[1] == 0 or R.shape[1] >= 2**24:
        return reference.labels_of(R)
    return one_hot_labels(R, reference.ASSIGNED_MASS)


def one_hot_labels(R: np.ndarray, mass: float) -> np.ndarray:
    """``np.where(R.sum(axis=1) > mass, R.argmax(axis=1), -1)`` of a C-contiguous float64 ``R`` (what
    :func:`circuits.reference.labels_of` computes, ``mass`` its :data:`~circuits.reference.ASSIGNED_MASS` below 1).
    Block by block, without a reduction per row where a row is one-hot or zero: its sum is 1 or 0 in any order, and
    its argmax is where its 1 is. Any other row gets that sum and argmax, of its own (contiguous) row, which reduce a
    row alike wherever it lies: the same labels."""
    if not 0.0 <= mass < 1.0:  # a one-hot row would not count as assigned, or a zero row would
        return np.where(R.sum(axis=1) > mass, R.argmax(axis=1), -1)
    out = np.empty(len(R), dtype=np.intp)
    rows = max(1, _WITHIN_ENTRIES // R.shape[1])
    for start in range(0, len(R), rows):
        block = R[start : start + rows]
        is_one = block == 1.0
        ones, zeros = row_counts(is_one), row_counts(block == 0.0)
        out[start : start + len(block)] = np.where(ones == 1, is_one.argmax(axis=1), -1)
        other = np.flatnonzero((ones > 1) | (ones + zeros != block.shape[1]))
        if other.size:
            rest = block[other]
            out[start + other] = np.where(rest.sum(axis=1) > mass, rest.argmax(axis=1), -1)
    return out


def row_counts(B: np.ndarray) -> np.ndarray:
    """``B.sum(axis=1)`` of a 2-d boolean array of fewer than 2**24 columns (as float32, exact there), by one
    matrix-vector product where numpy's sum would reduce each row on its own."""
    if B.shape[1] >= 2**24:
        return B.sum(axis=1)
    return B.view(np.uint8).astype(np.float32) @ np.ones(B.shape[1], dtype=np.float32)
