"""The exact nearest centroid of user points, certified against float64 rounding (rational arithmetic where float64
is unsure): what ``CircuitKMeans.predict`` holds each circuit label to, and what decides the verifier's near ties
(:func:`exact_costs`: two squared distances within float64's tie window are compared exactly)."""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction

import numpy as np
from jaxtyping import Float, Int

from circuits.sharpness import UNIT_ROUNDOFF

#: Points certified per chunk by :func:`misassigned` (its temporaries are ``chunk x k x d``).
_CERTIFY_CHUNK = 4096


def _exact_gap(x: np.ndarray, a: np.ndarray, b: np.ndarray) -> Fraction:
    """``|x - a|^2 - |x - b|^2`` in rational arithmetic on the float64 values (exact)."""
    return sum((Fraction(p) - Fraction(q)) * (Fraction(p) + Fraction(q) - 2 * Fraction(r))
               for p, q, r in zip(a.tolist(), b.tolist(), x.tolist()))


def exact_costs(X: Float[np.ndarray, "n d"], C: Float[np.ndarray, "k d"], cost) -> Callable[[int, np.ndarray], list]:
    """``exact(i, columns)``: point ``i``'s costs for those columns of ``cost`` (:class:`circuits.reference.Costs`)
    in rational arithmetic on the float64 values, bias included: a centroid column (label ``j >= 0``) costs the
    exact ``|x_i - c_j|^2``, any other column (a trimming threshold) its float64 value, which is exact. What
    :func:`circuits.reference.assign_within` decides a near tie with: only exactly equal costs tie."""
    X, C = np.asarray(X, dtype=np.float64), np.asarray(C, dtype=np.float64)
    labels, values, bias = np.asarray(cost.labels), cost.values, cost.bias

    def exact(i: int, columns: np.ndarray) -> list[Fraction]:
        x = X[i].tolist()
        out = []
        for c in columns:
            j = int(labels[c])
            base = (sum((Fraction(p) - Fraction(q)) ** 2 for p, q in zip(x, C[j].tolist())) if j >= 0
                    else Fraction(float(values[i, c])))
            out.append(base + Fraction(float(bias[c])))
        return out

    return exact


def misassigned(X: Float[np.ndarray, "n d"], C: Float[np.ndarray, "k d"],
                labels: Int[np.ndarray, " n"]) -> Int[np.ndarray, " m"]:
    """Rows of ``X`` whose label is not the exact nearest centroid: the lowest index among the centroids whose
    squared distance, computed exactly from the float64 values, is the smallest.

    Each label is compared with every other centroid ``j`` by ``|x - c_l|^2 - |x - c_j|^2 = (c_l - c_j) . (c_l
    + c_j - 2x)``, which has no cancellation between the magnitudes of ``x`` and ``c`` (the expanded or the direct
    form loses a far point's direction, or a near-bisector point's gap, to rounding). Computed in float64 it is
    within ``(d + 8) u sum_m |c_l - c_j|_m (|c_l| + |c_j| + 2|x|)_m`` of the exact value (``u`` = 2**-53: one
    rounding per difference and sum, ``d`` for the dot product); where the computed value is within twice that
    of 0, the sign is taken from rational arithmetic (:class:`fractions.Fraction`) instead.
    """
    X, C = np.asarray(X, dtype=np.float64), np.asarray(C, dtype=np.float64)
    labels = np.asarray(labels, dtype=np.int64)
    d, k, wrong = X.shape[1], C.shape[0], []
    index = np.arange(k)
    for start in range(0, len(X), _CERTIFY_CHUNK):
        x, own = X[start:start + _CERTIFY_CHUNK], labels[start:start + _CERTIFY_CHUNK]
        c_own = C[own]
        U = c_own[:, None, :] - C[None, :, :]
        V = c_own[:, None, :] + C[None, :, :] - 2.0 * x[:, None, :]
        gap = np.einsum("njm,njm->nj", U, V)
        W = np.abs(c_own)[:, None, :] + np.abs(C)[None, :, :] + 2.0 * np.abs(x)[:, None, :]
        bound = 2.0 * (d + 8) * UNIT_ROUNDOFF * np.einsum("njm,njm->nj", np.abs(U), W)
        other = index[None, :] != own[:, None]
        bad = other & (gap > bound)  # the label's centroid is certainly farther than another
        unsure = other & ~bad & ~(gap < -bound)
        for i, j in zip(*np.nonzero(unsure)):
            exact = _exact_gap(x[i], C[own[i]], C[j])
            bad[i, j] = exact > 0 or (exact == 0 and j < own[i])
        wrong.extend(start + np.flatnonzero(bad.any(axis=1)))
    return np.asarray(wrong, dtype=np.int64)


def exact_nearest(x: Float[np.ndarray, " d"], C: Float[np.ndarray, "k d"]) -> int:
    """The exact nearest centroid of one point (lowest index on exact ties), in rational arithmetic."""
    best = 0
    for j in range(1, len(C)):
        if _exact_gap(x, C[j], C[best]) < 0:
            best = j
    return best
