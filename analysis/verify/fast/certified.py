"""The reference run a hard distance circuit is certified against, fast: :mod:`circuits.precision`'s definition
(exact arithmetic at the data's precision) for a million points.

Most points are decided by float64 alone. For each point and cost column, a rigorous float64 bound ``E`` holds how
far the computed cost may be from the exact one (the rounding of the distance, of the centroid's float64 value
and of the bias), and ``W^`` bounds the column's share of any tie bound ``W = L + R`` it takes part in (``L <= 2
|x - c| (|h| + |H|)`` by Cauchy-Schwarz, ``R <= 2 (|h| + |H|)^2`` for each column). A column whose lower end,
less ``W^``, lies above every column's upper end plus the largest ``W^`` of the row can be neither the exact
nearest nor tied with it. A point left with one column goes there, tie-free; a point left with several is decided by
:func:`circuits.precision.assign_point` itself on those columns, in exact arithmetic. So the labels and ties are
the definition's, bit for bit (tests/unit/test_certified.py holds them to it, with the filter and without).

The means of Lloyd's update (and of any reference whose :attr:`~circuits.reference.Reference.mean_update` is
true) are exact (:mod:`analysis.verify.fast.exact_sums`), their float64 values correctly rounded; how far each may
move is its members' mean half ulp, exactly, and a point's weight in its own cluster's mean is known, as the
definition has it. A reference with another update (damped, sparse, Gumbel) moves its centroids in float64 as its
numpy form does: those values are taken as exact, and how far they may move is bounded through the update's weights
(every weight's absolute value, the point's own included: an upper bound on ``W``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

from analysis.verify.fast.exact_sums import Split, cluster_sums
from circuits import precision
from analysis.verify.fast import blocks
from analysis.verify.fast.blocks import own_sq_distances, row_counts
from circuits.onehot import OneHotStack, one_hot, stack_rows
from circuits.reference import Costs, Reference, Trace

#: float64's unit roundoff.
UNIT = 2.0**-53
#: A relative slack that covers every rounding of the bounds' own float64 evaluation (a few ``UNIT`` each) and the
#: factor ``1 / (1 - gamma_(d + 2))`` of the distance's rounding for any ``d`` below ``2^30``.
SLACK = 1.0 + 2.0**-20
#: Points filtered at once (their ``n x m`` temporaries stay in cache).
BLOCK = 2**13


@dataclass
class Centroids:
    """The centroids at one iterate as the certified run holds them: float64 ``values`` (the exact ones rounded),
    the ``exact`` ones and how far each may ``move`` per coordinate (object arrays of Fractions, ``k x d``), upper
    bounds on ``|values_j - exact_j|`` (``rounding``) and on ``|moves_j|`` (``move_norms``), and for a mean the
    iterate whose assignment made it (``made_at``, -1 for none) and its member count."""

    values: np.ndarray
    exact: np.ndarray
    moves: np.ndarray
    rounding: np.ndarray
    move_norms: np.ndarray
    made_at: np.ndarray
    members: np.ndarray

    @classmethod
    def initial(cls, C0: np.ndarray) -> Centroids:
        k = len(C0)
        moves = precision.half_ulps(C0)
        return cls(np.array(C0, dtype=np.float64), precision.exact(C0), moves, np.zeros(k), _norms_above(moves),
                   np.full(k, -1), np.zeros(k, dtype=np.int64))

    def weights(self, i: int, assignments) -> np.ndarray:
        """Point ``i``'s weight ``w_j`` in every centroid ``j``: ``1/m_j`` where it is one of the members that made
        a mean, else 0. ``assignments[t]``: the labels of the assignment at ``t``."""
        w = np.full(len(self.values), Fraction(0), dtype=object)
        for j, t in enumerate(self.made_at.tolist()):
            if t >= 0 and assignments[t][i] == j:
                w[j] = Fraction(1, int(self.members[j]))
        return w


def _norms_above(A: np.ndarray) -> np.ndarray:
    """An upper bound on the Euclidean norm of each row of an object array of non-negative Fractions."""
    squares = np.array([[float(v) for v in row] for row in A], dtype=np.float64).reshape(A.shape)
    # float() rounds to nearest: each value within a relative UNIT (or the smallest subnormal) of the exact one.
    return np.sqrt(((squares * SLACK + 5e-324) ** 2).sum(axis=1)) * SLACK


def _rounding_of(values: np.ndarray) -> np.ndarray:
    """An upper bound on ``|values_j - exact_j|`` for correctly rounded ``values``: half their spacing each."""
    half = np.maximum(np.spacing(np.abs(values)) / 2, 5e-324)
    return np.sqrt((half**2).sum(axis=1)) * SLACK


@dataclass
class LabelTrace(Trace):
    """A hard run's :class:`~circuits.reference.Trace` held as its labels: ``responsibilities`` is a
    :class:`~circuits.onehot.OneHotStack` (an iterate's one-hot rows are made when read), and the assignments are
    the labels themselves (``labels_of(one_hot(l))`` is ``l``): 88 MB at a million points and T = 10, not 880."""

    responsibilities: OneHotStack

    @property
    def assignments(self) -> np.ndarray:
        return self.responsibilities.labels

    @property
    def labels(self) -> np.ndarray:
        return self.responsibilities.labels[-1]


@dataclass
class CertifiedRun:
    """A run of ``ref`` (a hard reference whose centroid costs are squared distances) from ``C0`` at the data's
    precision. ``trace`` is the run as :meth:`Reference.run` records one (float64 centroids, labels, float64
    objectives); ``ties[t]`` the ties of the assignment at ``t``; ``decided[t]`` every point decided in exact
    arithmetic there, as ``point -> (nearest column, tie set)``; ``states[t]`` the centroids at ``t``."""

    ref: Reference
    columns: precision.Columns
    X: np.ndarray = field(repr=False)
    trace: LabelTrace | None = None
    ties: list[list[precision.Tie]] = field(default_factory=list)
    decided: list[dict[int, tuple[int, list[int]]]] = field(default_factory=list)
    states: list[Centroids] = field(default_factory=list)

    @property
    def assignments(self) -> np.ndarray:
        return self.trace.assignments

    def costs(self, X: np.ndarray, C: np.ndarray) -> Costs:
        """``ref.costs(X, C, t)`` from the fast distances (:func:`analysis.verify.fast.blocks.sq_distances`) and the
        columns: the same numbers bit for bit (a threshold column is its constant, its bias added by the caller
        as the reference's is)."""
        labels = np.array(self.columns.labels)
        D = blocks.sq_distances(X, C)
        if (labels >= 0).all():
            values = D
        else:
            values = np.full((len(X), len(labels)), float(self.columns.threshold))
            values[:, labels >= 0] = D[:, labels[labels >= 0]]
        return Costs(values, labels, np.array([float(b) for b in self.columns.bias]))

    def point(self, i: int, t: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Point ``i`` exactly, its half ulps, and its weights in the centroids at ``t``."""
        x = self.X[i : i + 1]
        return precision.exact(x)[0], precision.half_ulps(x)[0], self.states[t].weights(i, self.assignments)

    def explain(self, t: int, i: int, got: int) -> Explanation:
        """Why label ``got`` of point ``i`` at ``t`` is or is not the reference's, in exact arithmetic: the exact
        nearest centroid, the tie set, and ``got``'s gap above the nearest with the bound it would have to be
        within to tie."""
        nearest, tied = self.decided[t].get(i, (None, None))
        column_of = {label: c for c, label in enumerate(self.columns.labels)}
        if nearest is None:
            nearest = column_of[int(self.assignments[t][i])]
            tied = [nearest]
        tied_labels = [self.columns.labels[c] for c in tied]
        if got not in column_of:
            return Explanation(self.columns.labels[nearest], tied_labels, None, None)
        state = self.states[t]
        x, h, w = self.point(i, t)
        cols = sorted({column_of[got], nearest})
        costs = dict(zip(cols, [precision.costs_of(x, self.columns, state.exact)[c] for c in cols]))
        g = column_of[got]
        bound = (Fraction(0) if g == nearest else
                 precision.pair_bound(x, h, g, nearest, self.columns, state.exact, state.moves, w))
        return Explanation(self.columns.labels[nearest], tied_labels, costs[g] - costs[nearest], bound)


@dataclass(frozen=True)
class Explanation:
    """:meth:`CertifiedRun.explain`: the exact nearest label, the tie set's labels, and the chosen label's exact
    gap above the nearest and the bound a tie must lie within (``None``: the label is no column)."""

    nearest: int
    tied: list[int]
    gap: Fraction | None
    bound: Fraction | None


def certified_run(ref: Reference, X: np.ndarray, C0: np.ndarray, iterations: int,
                  filtered: bool = True) -> CertifiedRun:
    """Run ``ref`` from ``C0`` for ``iterations`` at the data's precision (module docstring). ``filtered=False``
    decides every point in exact arithmetic (what the filter must agree with, for the tests)."""
    X = np.ascontiguousarray(X, dtype=np.float64)
    split = Split.of(X) if ref.mean_update else None
    point_norms = _half_ulp_norms(X)
    state = Centroids.initial(np.asarray(C0, dtype=np.float64))
    k = len(state.values)
    run = CertifiedRun(ref, _columns(ref, X, state.values), X)
    labels_by_t, centroids, objectives = [], [], []
    for t in range(iterations + 1):
        labels, decided, ties, objective = _assign(run, state, t, point_norms, labels_by_t, filtered)
        labels_by_t.append(labels)
        run.states.append(state)
        run.decided.append(decided)
        run.ties.append(ties)
        centroids.append(state.values.copy())
        objectives.append(objective)
        if t < iterations:
            state = _update(ref, X, split, state, labels, t, k)
    run.trace = LabelTrace(np.stack(centroids), OneHotStack(stack_rows(labels_by_t), k), np.array(objectives))
    return run


def _half_ulp_norms(X: np.ndarray) -> np.ndarray:
    """:func:`_norms_above` of :func:`circuits.precision.half_ulps` of every point, in float64 (a half ulp is a
    power of two: exact there unless it underflows, which the smallest subnormal covers)."""
    half = np.maximum(np.spacing(np.abs(X)) / 2, 5e-324)
    return np.sqrt((half**2).sum(axis=1)) * SLACK


def _columns(ref: Reference, X: np.ndarray, C: np.ndarray) -> precision.Columns:
    """The reference's cost columns in :mod:`circuits.precision`'s terms (labels, exact biases, the threshold)."""
    cost = ref.costs(X[:1], C, 0)
    labels = tuple(int(v) for v in cost.labels)
    threshold = [float(cost.values[0, c]) for c, label in enumerate(labels) if label < 0]
    return precision.Columns(labels, tuple(Fraction(float(b)) for b in cost.bias),
                             Fraction(threshold[0]) if threshold else Fraction(0))


def _assign(run: CertifiedRun, state: Centroids, t: int, point_norms: np.ndarray, labels_by_t: list,
            filtered: bool) -> tuple[np.ndarray, dict, list[precision.Tie], float]:
    """The assignment at ``t``: the float64 filter block by block, then the exact decision of every point it
    leaves with more than one column; and the objective of the assignment (:func:`circuits.reference.objective`,
    from the block's own distances: the same numbers). The block's costs are :meth:`CertifiedRun.costs`, the
    reference's own bit for bit."""
    X, columns = run.X, run.columns
    col_labels = np.array(columns.labels)
    centroid_cols = np.flatnonzero(col_labels >= 0)
    labels = np.empty(len(X), dtype=np.intp)
    own = np.zeros(len(X))  # each point's squared distance to the centroid it goes to
    several: list[tuple[int, np.ndarray]] = []
    rho = state.rounding[col_labels[centroid_cols]]
    reach_c = rho + state.move_norms[col_labels[centroid_cols]]
    rounding = (X.shape[1] + 3) * UNIT
    for start in range(0, len(X), BLOCK):
        block = X[start : start + BLOCK]
        cost = run.costs(block, state.values)
        values = cost.values + cost.bias if cost.bias.any() else cost.values
        F = _bound(cost.values[:, centroid_cols], point_norms[start : start + len(block)], reach_c, rho, rounding)
        if len(centroid_cols) < values.shape[1]:  # a threshold column: exact, so only its bias's rounding
            F = _full(values, centroid_cols, F)
        F += 2 * UNIT * np.abs(values)
        upper = (values + F).min(axis=1) + F.max(axis=1)
        candidate = values - F <= upper[:, None]
        first = np.argmin(values, axis=1)
        labels[start : start + len(block)] = col_labels[first]
        here = np.arange(len(block))
        own[start : start + len(block)] = np.where(col_labels[first] >= 0, cost.values[here, first], 0.0)
        rows = np.flatnonzero(row_counts(candidate) > 1) if filtered else here
        several.extend((start + int(i), np.flatnonzero(candidate[i])) for i in rows)
    decided, ties = {}, []
    for i, cols in several:
        x, h, w = _point(run, state, i, labels_by_t)
        every = precision.costs_of(x, columns, state.exact)
        costs = {int(c): every[c] for c in cols}
        nearest, tied, bounds = precision.assign_point(x, h, costs, columns, state.exact, state.moves, w)
        labels[i] = columns.labels[tied[0]]
        decided[i] = (nearest, tied)
        if len(tied) > 1:
            ties.append(precision.tie_of(i, t, nearest, tied, bounds, costs, columns))
    changed = [i for i, _ in several]
    if changed:  # the few points decided exactly: their own distance, as the objective computes it
        own[changed] = _own_distances(X[changed], state.values, labels[changed])
    inside = labels >= 0
    return labels, decided, ties, float(own.sum() if inside.all() else own[inside].sum())


def _bound(D: np.ndarray, eta: np.ndarray, reach: np.ndarray, rho: np.ndarray, rounding: float) -> np.ndarray:
    """``F >= E + W^`` of every centroid column (module docstring), from the squared distances ``D`` of a block,
    its points' half-ulp norms ``eta``, and per centroid ``reach = rho + theta`` (rounding and move norms): with
    ``q = eta + reach`` and ``s = sqrt(D)``, ``F = SLACK^2 ((d + 3) u D + 2 q (s + q) + 4 rho^2)`` bounds the
    distance's rounding ``(d + 3) u D + 2 s rho + 4 rho^2`` (each slack factor kept) plus the tie share ``2 (s +
    rho) r + 2 r^2`` with ``r = eta + theta``, in one pass per term."""
    q = eta[:, None] + reach[None, :]
    F = np.sqrt(D)
    F += q
    F *= q
    F *= 2.0
    F += rounding * D
    F += 4 * rho**2
    F *= SLACK * SLACK
    return F


def _full(values: np.ndarray, columns: np.ndarray, F: np.ndarray) -> np.ndarray:
    out = np.zeros_like(values)
    out[:, columns] = F
    return out


def _own_distances(X: np.ndarray, C: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Each point's squared distance to its own centroid, as :func:`circuits.reference.objective` computes it."""
    inside = labels >= 0
    out = np.zeros(len(X))
    if inside.any():
        out[inside] = own_sq_distances(X[inside], C, labels[inside])
    return out


def _point(run: CertifiedRun, state: Centroids, i: int, labels_by_t: list) -> tuple:
    """Point ``i`` exactly, its half ulps and its weights in ``state``'s centroids, during the run."""
    x = run.X[i : i + 1]
    return precision.exact(x)[0], precision.half_ulps(x)[0], state.weights(i, labels_by_t)


def _update(ref: Reference, X: np.ndarray, split: Split | None, state: Centroids, labels: np.ndarray, t: int,
            k: int) -> Centroids:
    """The centroids after the update of the assignment at ``t``."""
    values, exact, moves = state.values.copy(), state.exact.copy(), state.moves.copy()
    rounding, norms = state.rounding.copy(), state.move_norms.copy()
    made_at, members = state.made_at.copy(), state.members.copy()
    if split is not None:
        sums = cluster_sums(split, labels, k)
        filled = np.flatnonzero(sums.counts)
        values[filled] = sums.rounded_means()[filled]
        for j in filled.tolist():
            exact[j], moves[j] = sums.mean(j), sums.mean_half_ulp(j)
        rounding[filled] = _rounding_of(values[filled])
        norms[filled] = _norms_above(moves[filled])
        made_at[filled], members[filled] = t, sums.counts[filled]
        return Centroids(values, exact, moves, rounding, norms, made_at, members)
    R = one_hot(labels, k)
    values = np.asarray(ref.update(X, R, state.values, t + 1), dtype=np.float64)
    weights = np.abs(ref.update_weights(X, R, state.values, t + 1))
    n = len(X)
    half = np.maximum(np.spacing(np.abs(X)) / 2, 5e-324)
    old = np.array([[float(v) for v in row] for row in state.moves], dtype=np.float64).reshape(state.moves.shape)
    # An upper bound: every product and sum of the matrix product rounds by at most a relative (n + 2) UNIT.
    above = (weights[:, :n] @ half + weights[:, n:] * old * SLACK) * (1 + (n + 4) * UNIT) + 5e-324
    moved = precision.exact(above)
    return Centroids(values, precision.exact(values), moved, np.zeros(k), _norms_above(moved), np.full(k, -1),
                     np.zeros(k, dtype=np.int64))
