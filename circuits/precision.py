"""Lloyd's algorithm in exact arithmetic at the data's precision: the reference a circuit's labels are held to.

A float64 input stands for every real input that rounds to it. So a comparison the data cannot decide is a tie,
and goes to the lower index as Lloyd's tie rule sends an exact tie; every comparison the data does decide is
decided as exact arithmetic decides it. This module is that definition, written as plainly as numpy allows, on
arrays of :class:`fractions.Fraction` (numpy's object arrays: the same ``+ - * /`` and ``sum`` as float arrays,
exact). It is slow and meant to be read: :mod:`analysis.verify.fast.certified` computes the same run fast, and the
tests hold the two to the same labels, centroids and ties.

**The data's precision.** Each input coordinate ``v`` (of a point, or of an initial centroid) may be any real
within ``h(v) = spacing(|v|) / 2`` of its float64 value: half an ulp, the rounding that made the float64 value.
A centroid after ``t >= 1`` is the exact mean of its members, so it moves as the mean of its moved members; an
empty cluster keeps its centroid, and how far it may move.

**When a comparison is a tie.** Point ``x`` compares two cost columns ``a`` and ``b``: a centroid column costs
``|x - c_j|^2 + bias_j``, a threshold column (trimmed k-means) a constant. Their gap ``g = cost_a - cost_b`` is a
quadratic function of every input it reads, so under a move ``delta`` of the inputs it becomes exactly
``g + dg(delta) + Q(delta)``, where ``dg`` is linear: ``d cost_a = 2 (x - c_a) . (dx - dc_a)`` and ``dc_a = w_a dx
+ sum_p W_ap dx_p`` over the other members ``p`` (``w_a = 1/m_a`` if ``x`` is one of the ``m_a`` members that
made ``c_a``, else 0). The largest ``|dg|`` over the box of moves is therefore, exactly,

    L = sum_m |2 (x - c_a)_m (1 - w_a) - 2 (x - c_b)_m (1 - w_b)| h(x_m)
        + 2 sum_m |x - c_a|_m (H_a,m - w_a h(x_m)) + 2 sum_m |x - c_b|_m (H_b,m - w_b h(x_m)),

with ``H_j,m`` how far centroid ``j`` may move in coordinate ``m`` (its members' mean ``h``, or an initial
centroid's own ``h``). The rest is ``Q = |dx - dc_a|^2 - |dx - dc_b|^2 = (dc_b - dc_a) . (2 dx - dc_a - dc_b)``,
at most ``R`` in size (:func:`pair_terms`: of the order of the squared ulp, and 0 where the centroids cannot
move). The comparison is a **tie at the data's precision** when ``|g| <= L + R``: some real input within the box
(up to ``R``) ties it or turns it the other way. A threshold column moves with nothing (its ``c``, ``w`` and ``H``
terms are absent).

**The assignment.** ``j*`` is the exact argmin of the costs (the lowest column among exactly equal ones). The
columns tied with it, ``cost_j - cost_j* <= W(j, j*)`` with ``W = L + R``, and ``j*`` itself form the point's tie
set; the point goes to the lowest column of its tie set (Lloyd's rule: ties to the lower index). A point whose
tie set has more than one column is a :class:`Tie`, recorded with its exact gaps and bounds.

This is the standard backward-error notion: the result is what exact arithmetic gives for *some* real input
that rounds to the given floats, and the only freedom used is the one the data leaves (docs/exactness.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np


def exact(A: np.ndarray) -> np.ndarray:
    """The float64 values of ``A`` as exact rationals (an object array of :class:`Fraction`)."""
    A = np.asarray(A, dtype=np.float64)
    return np.array([Fraction(v) for v in A.ravel().tolist()] or [], dtype=object).reshape(A.shape)


def half_ulps(A: np.ndarray) -> np.ndarray:
    """``h(v) = spacing(|v|) / 2`` of every value of ``A``, exactly: how far a real input may lie from the float64
    value it rounds to (``spacing`` is the gap to the next float64 away from zero, the larger of the two gaps at a
    power of two; at 0 it is the smallest subnormal)."""
    A = np.asarray(A, dtype=np.float64)
    spacing = np.spacing(np.abs(A))
    return np.array([Fraction(v) / 2 for v in spacing.ravel().tolist()] or [], dtype=object).reshape(A.shape)


@dataclass(frozen=True)
class Columns:
    """The cost columns of an assignment: column ``c`` is centroid ``labels[c]`` (``-1``: a threshold, costing
    ``threshold``), plus ``bias[c]`` (exact)."""

    labels: tuple[int, ...]
    bias: tuple[Fraction, ...]
    threshold: Fraction = Fraction(0)

    @classmethod
    def lloyd(cls, k: int) -> Columns:
        return cls(tuple(range(k)), (Fraction(0),) * k)

    @classmethod
    def trimmed(cls, k: int, threshold: float, threshold_bias: float) -> Columns:
        """Trimmed k-means: ``k`` centroid columns, then the threshold (its own bias breaks its ties last)."""
        return cls((*range(k), -1), (Fraction(0),) * k + (Fraction(threshold_bias),), Fraction(threshold))


@dataclass(frozen=True)
class Tie:
    """A point whose tie set holds more than one column at iteration ``iteration``: ``candidates`` (labels, in
    column order), the one it went to (``chosen``, the first), the exact nearest (``nearest``), and for each
    candidate its exact gap above the nearest's cost and the bound ``W`` that gap is within."""

    point: int
    iteration: int
    candidates: tuple[int, ...]
    chosen: int
    nearest: int
    gaps: tuple[Fraction, ...]
    bounds: tuple[Fraction, ...]

    @property
    def comparisons(self) -> int:
        """Comparisons the data could not decide: each candidate but the nearest against the nearest."""
        return len(self.candidates) - 1


def pair_bound(x, h, a: int, b: int, columns: Columns, C, H, w) -> Fraction:
    """``W = L + R`` of point ``x`` (coordinates ``x``, half ulps ``h``) between columns ``a`` and ``b`` (module
    docstring): ``C``, ``H`` the centroids and how far each may move (``k x d``), ``w`` the point's weight in each
    centroid (``k``). Everything exact."""
    L, R = pair_terms(x, h, a, b, columns, C, H, w)
    return L + R


def pair_terms(x, h, a: int, b: int, columns: Columns, C, H, w) -> tuple[Fraction, Fraction]:
    """:func:`pair_bound`'s two terms: ``L``, the largest first-order move, and ``R``, the bound on the rest.

    With ``A = dx - dc_a`` and ``B = dx - dc_b`` (each coordinate a sum of input moves: ``(1 - w_a)`` times the
    point's own, less the other members' share), the rest is ``Q = |A|^2 - |B|^2 = (A - B) . (A + B)``, so ``|Q|
    <= sum_m max|A - B|_m max|A + B|_m``: each factor at most ``|own_a -+ own_b| h_m + O_a,m + O_b,m``, with
    ``own_j = 1 - w_j`` and ``O_j = H_j - w_j h`` the other members' move (a threshold column: ``B = 0``)."""
    (coef_a, members_a, own_a, others_a), (coef_b, members_b, own_b, others_b) = (
        _column_terms(x, h, columns.labels[c], C, H, w) for c in (a, b))
    L = np.abs(coef_a - coef_b) @ h + members_a + members_b
    both = others_a + others_b
    R = ((abs(own_a - own_b) * h + both) * ((own_a + own_b) * h + both)).sum()
    return L, R


def _column_terms(x, h, label: int, C, H, w):
    """A column's part of :func:`pair_terms`: its coefficient on the point's own move ``2 (x - c)(1 - w)``, its
    other members' move term ``2 sum |x - c| (H - w h)``, the point's own weight ``1 - w`` in ``dx - dc`` and the
    other members' move ``H - w h`` (all zero for a threshold column, which moves with nothing)."""
    if label < 0:
        zeros = np.zeros(len(x), dtype=object) * Fraction(0)
        return zeros, Fraction(0), Fraction(0), zeros
    away = x - C[label]
    others = H[label] - w[label] * h
    return 2 * away * (1 - w[label]), 2 * np.abs(away) @ others, 1 - w[label], others


def costs_of(x, columns: Columns, C) -> list[Fraction]:
    """Point ``x``'s exact cost in every column."""
    return [(((x - C[j]) ** 2).sum() if j >= 0 else columns.threshold) + bias
            for j, bias in zip(columns.labels, columns.bias)]


def assign_point(x, h, costs: dict[int, Fraction], columns: Columns, C, H, w
                 ) -> tuple[int, list[int], dict[int, Fraction]]:
    """Where point ``x`` goes: its exact nearest column ``j*`` (the lowest among exactly equal costs), its tie set
    (the columns whose gap above ``j*`` is within their bound ``W``, ``j*`` included, in column order; the point
    goes to the first) and each tied column's bound. ``costs``: the exact costs of the columns considered, by
    column; a column left out must be farther above ``j*`` than any bound (:mod:`analysis.verify.fast.certified`
    leaves out only such columns)."""
    nearest = min(costs, key=lambda c: (costs[c], c))
    bounds = {c: (Fraction(0) if c == nearest else pair_bound(x, h, c, nearest, columns, C, H, w)) for c in costs}
    tied = sorted(c for c in costs if costs[c] - costs[nearest] <= bounds[c])
    return nearest, tied, {c: bounds[c] for c in tied}


def tie_of(point: int, iteration: int, nearest: int, tied: list[int], bounds: dict[int, Fraction],
           costs: dict[int, Fraction], columns: Columns) -> Tie:
    """The :class:`Tie` record of a point whose tie set has more than one column."""
    return Tie(point, iteration, tuple(columns.labels[c] for c in tied), columns.labels[tied[0]],
               columns.labels[nearest], tuple(costs[c] - costs[nearest] for c in tied),
               tuple(bounds[c] for c in tied))


@dataclass
class ExactRun:
    """Every iterate of :func:`lloyd_at_data_precision`: ``centroids[t]`` (exact, ``k x d``) after ``t`` updates,
    ``labels[t]`` the assignment to them (-1: a trimmed outlier), ``ties[t]`` its ties, ``objectives[t]`` the exact
    objective of that assignment (outliers count nowhere)."""

    centroids: list[np.ndarray]
    labels: list[list[int]]
    ties: list[list[Tie]]
    objectives: list[Fraction]

    def float_centroids(self) -> np.ndarray:
        """The centroids rounded to float64 (correctly: ``float(Fraction)`` rounds to nearest), ``(T + 1, k, d)``."""
        return np.array([[[float(v) for v in row] for row in C] for C in self.centroids], dtype=np.float64)


def lloyd_at_data_precision(X: np.ndarray, C0: np.ndarray, iterations: int,
                            columns: Columns | None = None) -> ExactRun:
    """Lloyd's algorithm from ``C0`` in exact arithmetic at the data's precision (module docstring): assign each
    point to the first column of its tie set; move each centroid to the exact mean of its members, which it moves
    with; an empty cluster keeps its centroid. ``columns``: Lloyd's (the default) or :meth:`Columns.trimmed`."""
    x, h = exact(X), half_ulps(X)
    C, H = exact(C0), half_ulps(C0)
    n, k = x.shape[0], C.shape[0]
    columns = columns if columns is not None else Columns.lloyd(k)
    w = np.full((n, k), Fraction(0), dtype=object)  # w[i, j]: point i's weight in centroid j (0: not a member)
    run = ExactRun([], [], [], [])
    for t in range(iterations + 1):
        labels, ties, objective = [], [], Fraction(0)
        for i in range(n):
            costs = dict(enumerate(costs_of(x[i], columns, C)))
            nearest, tied, bounds = assign_point(x[i], h[i], costs, columns, C, H, w[i])
            labels.append(columns.labels[tied[0]])
            if len(tied) > 1:
                ties.append(tie_of(i, t, nearest, tied, bounds, costs, columns))
            if labels[-1] >= 0:
                objective += ((x[i] - C[labels[-1]]) ** 2).sum()
        run.centroids.append(C.copy())
        run.labels.append(labels)
        run.ties.append(ties)
        run.objectives.append(objective)
        if t < iterations:
            for j in range(k):
                members = [i for i in range(n) if labels[i] == j]
                if members:
                    C[j] = x[members].sum(axis=0) / len(members)
                    H[j] = h[members].sum(axis=0) / len(members)
                    w[:, j] = Fraction(0)
                    w[members, j] = Fraction(1, len(members))
    return run
