"""The nearest centroid of user points at their precision, certified against float64 rounding (rational arithmetic
where float64 is unsure): what ``CircuitKMeans.predict`` holds each circuit label to. The centroids are the
model's, fixed; a point stands for every real that rounds to it, so two centroids it cannot tell apart tie, and
the lower index wins, as in the reference runs (:mod:`circuits.precision`)."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
from jaxtyping import Float, Int

from circuits import precision
from circuits.sharpness import UNIT_ROUNDOFF

#: Points certified per chunk by :func:`misassigned` (its temporaries are ``chunk x k x d``).
_CERTIFY_CHUNK = 4096


def misassigned(X: Float[np.ndarray, "n d"], C: Float[np.ndarray, "k d"],
                labels: Int[np.ndarray, " n"]) -> Int[np.ndarray, " m"]:
    """Rows of ``X`` whose label is not the exact nearest centroid at the point's precision
    (:func:`exact_nearest`): the centroids are the model's, fixed; a point stands for every real within half an
    ulp of each coordinate, so two centroids it cannot tell apart from there tie, to the lower index.

    Each label is compared with every other centroid ``j`` by ``|x - c_l|^2 - |x - c_j|^2 = (c_l - c_j) . (c_l
    + c_j - 2x)``, which has no cancellation between the magnitudes of ``x`` and ``c`` (the expanded or the direct
    form loses a far point's direction, or a near-bisector point's gap, to rounding). Computed in float64 it is
    within ``(d + 8) u sum_m |c_l - c_j|_m (|c_l| + |c_j| + 2|x|)_m`` of the exact value (``u`` = 2**-53: one
    rounding per difference and sum, ``d`` for the dot product), and the point's precision moves it by at most
    ``sum_m 2 |c_l - c_j|_m h(x_m) + sum_m h(x_m)^2``; a point whose label is not nearer than every other centroid
    by more than both is decided in rational arithmetic (:mod:`circuits.precision`) instead.
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
        half = np.maximum(np.spacing(np.abs(x)) / 2, 5e-324)
        # The point's own precision (the centroids are fixed), rounded up by a factor that covers its evaluation.
        bound += (2.0 * np.einsum("njm,nm->nj", np.abs(U), half) + (half**2).sum(axis=1)[:, None]) * (1 + 2.0**-20)
        other = index[None, :] != own[:, None]
        sure = (~other | (gap < -bound)).all(axis=1)  # nearer than every other centroid, beyond any tie
        for i in np.flatnonzero(~sure).tolist():
            if exact_nearest(x[i], C) != own[i]:
                wrong.append(start + i)
    return np.asarray(wrong, dtype=np.int64)


def exact_nearest(x: Float[np.ndarray, " d"], C: Float[np.ndarray, "k d"]) -> int:
    """The nearest centroid of one point at its precision, in rational arithmetic: the lowest index among the
    centroids tied with the exact nearest (:func:`circuits.precision.assign_point`, the centroids fixed)."""
    columns = precision.Columns.lloyd(len(C))
    xe, h = precision.exact(x[None])[0], precision.half_ulps(x[None])[0]
    Ce = precision.exact(C)
    fixed = np.full(C.shape, Fraction(0), dtype=object)
    costs = dict(enumerate(precision.costs_of(xe, columns, Ce)))
    _, tied, _ = precision.assign_point(xe, h, costs, columns, Ce, fixed, fixed[:, 0])
    return tied[0]
