"""The verification's per-entry windows (how far float64, or the circuit, can place a squared distance) and the
row-wise questions asked of ``n x k`` matrices (which columns lie within a window of the expected one, the nearest
two), made block by block of points where a million points would otherwise pass through memory several times per
matrix: each row is made by the same operations as the whole-matrix form it replaced, so the same numbers bit for
bit (tests/unit/test_verify_fast.py holds each to that form). :mod:`analysis.verify.checks` uses them."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from analysis.verify.fast.blocks import row_counts
from circuits.sharpness import UNIT_ROUNDOFF


def distance_uncertainty(X: np.ndarray, C: np.ndarray, D: np.ndarray, offset: np.ndarray,
                         u: float = UNIT_ROUNDOFF, x_norms: np.ndarray | None = None) -> np.ndarray:
    """``E_ij``: how far float64 in the user's units can place ``D_ij`` from the exact squared distance.

    The representation of points and centroids in the user's units (a decoded centroid ``s c + mu`` is rounded
    relative to its magnitude and the offset ``mu``): ``8 u sqrt(d D_ij) (|x_i| + |c_j| + 2|mu|)``, plus the
    rounding of ``D_ij`` itself, ``(d + 2) u D_ij``. Two distances closer than ``E_ij1 + E_ij2`` cannot be ordered
    by anyone computing in float64 in these units: the window in which exact arithmetic decides. ``u`` is the unit
    roundoff of the circuit's dtype.
    ``x_norms``: ``np.linalg.norm(X, axis=1)`` if the caller holds it (a window evaluates many ``C`` for one ``X``).
    """
    d = X.shape[1]
    mu = float(np.linalg.norm(offset))
    if x_norms is None:
        x_norms = np.linalg.norm(X, axis=1)
    c_norms = np.linalg.norm(C, axis=1)
    if D.dtype == x_norms.dtype == c_norms.dtype == np.float64 and D.ndim == 2:
        return _distance_uncertainty_rows(D, x_norms, c_norms, d, mu, u)
    represent = 8 * u * np.sqrt(d * D) * (x_norms[:, None] + c_norms[None, :] + 2 * mu)
    return represent + (d + 2) * UNIT_ROUNDOFF * D


#: Entries of an ``n x k`` matrix a fused pass (:func:`_distance_uncertainty_rows`) holds per temporary (512 KiB).
_FUSED_ENTRIES = 2**16


def _distance_uncertainty_rows(D: np.ndarray, x_norms: np.ndarray, c_norms: np.ndarray, d: int, mu: float,
                               u: float) -> np.ndarray:
    """:func:`distance_uncertainty`'s formula for float64 operands, block by block of rows in place: each entry is
    made by the same operations on the same operands in the same order (``((8 u) sqrt(d D)) ((|x| + |c|) + 2 |mu|)
    + ((d + 2) u64) D``), so the same numbers bit for bit, with temporaries that stay in cache instead of five
    ``n x k`` passes through memory (tests/unit/test_verify_fast.py holds it to the formula)."""
    out = np.empty(D.shape)
    scale, rounding, two_mu = 8 * u, (d + 2) * UNIT_ROUNDOFF, 2 * mu
    rows = max(1, _FUSED_ENTRIES // max(1, D.shape[1]))
    for start in range(0, D.shape[0], rows):
        block, o = D[start : start + rows], out[start : start + rows]
        np.multiply(d, block, out=o)
        np.sqrt(o, out=o)
        o *= scale
        norms = x_norms[start : start + rows, None] + c_norms[None, :]
        norms += two_mu
        o *= norms
        np.multiply(rounding, block, out=norms)
        o += norms
    return out


def circuit_uncertainty(X: np.ndarray, C: np.ndarray, offset: np.ndarray, scale: float, gamma: float,
                        tie_break: float, ux: np.ndarray | None = None) -> np.ndarray:
    """How far the circuit's own score may be from the exact one, in squared user units: ``gamma m_ij s^2`` with
    ``m_ij = 2|x_i||c_j| + |c_j|^2 + t j`` in the encoder's unit coordinates (:mod:`circuits.sharpness`). Beyond
    :func:`distance_uncertainty`, this is what the circuit's encoding cannot resolve: an error inside it is named
    as a resolution failure of the circuit, never called a tie. ``ux``: the points' unit norms
    (``np.linalg.norm((X - offset) / scale, axis=1)``) if the caller holds them."""
    if ux is None:
        ux = np.linalg.norm((X - offset) / scale, axis=1)
    uc = np.linalg.norm((C - offset) / scale, axis=1)
    if not (ux.dtype == uc.dtype == np.float64 and ux.ndim == 1):
        m = 2 * ux[:, None] * uc[None, :] + uc[None, :] ** 2 + tie_break * np.arange(C.shape[0])[None, :]
        return gamma * scale**2 * m
    # The same operations in the same order, block by block of points in place (temporaries in cache): the same
    # numbers bit for bit (tests/unit/test_verify_fast.py holds it to the formula above).
    twice, squares, ramp, factor = 2 * ux, uc**2, tie_break * np.arange(C.shape[0]), gamma * scale**2
    out = np.empty((len(ux), len(uc)))
    rows = max(1, _FUSED_ENTRIES // max(1, len(uc)))
    for start in range(0, len(ux), rows):
        o = out[start : start + rows]
        np.multiply(twice[start : start + rows, None], uc[None, :], out=o)
        o += squares
        o += ramp
        o *= factor
    return out


class RowsOnDemand:
    """Entries ``[i, j]`` of a window matrix made one point's row at a time, when first read: for a check that reads
    the entries of a few points (its mismatches) where the whole ``n x k`` matrix would be made for nothing."""

    def __init__(self, rows: Callable[[np.ndarray], np.ndarray]):
        self._rows = rows
        self._made: dict[int, np.ndarray] = {}

    def __getitem__(self, index: tuple[int, int] | int):
        """Entry ``[i, j]``, or with one index the row ``[i]``."""
        i, j = index if isinstance(index, tuple) else (index, slice(None))
        row = self._made.get(int(i))
        if row is None:
            row = self._made[int(i)] = self._rows(np.array([int(i)]))[0]
        return row[j]


def circuit_rows(window: Callable[[np.ndarray], np.ndarray], C: np.ndarray) -> np.ndarray | RowsOnDemand:
    """``window(C)`` (:func:`circuit_window`), or where the window makes rows on their own, the same entries as they
    are read (:class:`RowsOnDemand`): each row is made by the same operations, so the same numbers bit for bit."""
    rows = getattr(window, "rows", None)
    return window(C) if rows is None else RowsOnDemand(lambda points: rows(C, points))


def distance_ties(V: np.ndarray, E: np.ndarray, exp_col: np.ndarray):
    """:func:`analysis.verify.checks.check_costs`' windows for distance costs without its ``n x k`` matrices: the
    window of point ``i`` and column ``j`` is ``E_ij + E_i,exp`` and near is ``|V_ij - V_i,exp| <= window``. Made
    block by block of points (each row reads its own alone: the same numbers as the whole matrices, in cache);
    kept are the rows where more than one column is near, as ``{point: near row}`` in point order, and
    ``row_of(i) -> (window, near)`` of one point, made again by the same operations for the few points a caller
    asks about."""
    n, k = V.shape
    rows = max(1, _FUSED_ENTRIES // max(1, k))
    index = np.arange(min(rows, n))
    several: dict[int, np.ndarray] = {}  # copies: a view would keep its whole block alive
    for start in range(0, n, rows):
        Vb, Eb, e = V[start : start + rows], E[start : start + rows], exp_col[start : start + rows]
        here = index[: len(Vb)]
        near = np.abs(Vb - Vb[here, e][:, None]) <= Eb + Eb[here, e][:, None]
        several.update((start + int(i), near[i].copy()) for i in np.flatnonzero(row_counts(near) > 1))

    def row_of(i: int) -> tuple[np.ndarray, np.ndarray]:
        window = E[i] + E[i, exp_col[i]]
        return window, np.abs(V[i] - V[i, exp_col[i]]) <= window

    return several, row_of
