"""A plain numpy Lloyd's algorithm: the reference every circuit is checked against, and the base of the family.

:class:`Reference` is Lloyd's iteration written as an assignment (a responsibility matrix, one-hot rows) and an
update (weights over the members, or the old centroid when there are none); the variants' references (each in
its variant's module, :mod:`circuits.variants`) subclass it and change one of the two. :func:`lloyd`,
:func:`assign` and :func:`update` are Lloyd's own entry points on top of it, so Lloyd's algorithm is written once.

Rules, stated because every comparison depends on them:

* Distances are ``|x - c|^2`` computed directly from the difference (not via ``|x|^2 - 2 x.c + |c|^2``).
* Ties: a point goes to the centroid minimising ``|x - c_j|^2 + tie_break * j``. With ``tie_break = 0`` (the
  default) this is ``np.argmin``: ties (equal float64 distances) to the lower index. The circuit's verifier holds
  Lloyd's circuit to this algorithm in exact arithmetic at the data's precision instead (:mod:`circuits.precision`,
  computed fast by :mod:`analysis.verify.fast.certified`), where a comparison the data cannot decide is a tie.
* Empty clusters: a centroid with no points keeps its previous position. (scikit-learn instead relocates it, so
  oracle tests against scikit-learn use problems without empty clusters.)
* Every iterate is recorded: ``centroids[t]`` after ``t`` iterations (``centroids[0]`` is the initialisation) and
  ``assignments[t]``, the assignment of every point to ``centroids[t]``. Iteration ``t`` maps
  ``(centroids[t-1], assignments[t-1])`` to ``centroids[t]``; ``assignments[T]`` is the final labelling.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
from jaxtyping import Float, Int

from circuits.blockwise import contiguous_sq_distances, one_hot_labels, small_keys
from circuits.onehot import OneHotStack, one_hot, stack_rows  # noqa: F401 (part of this module's interface)

from circuits.memo import (  # noqa: F401 (the memo lives in circuits.memo; its entry points are this module's too)
    _DISTANCE_MEMO, _memo_points, distances_budget, keep_distances, lookup_distances, memoised, memoised_array_key,
    memoised_distances)

#: Rows of points processed at once, to bound memory at n * k * d.
_CHUNK = 8192


def sq_distances(X: Float[np.ndarray, "n d"], C: Float[np.ndarray, "k d"]) -> Float[np.ndarray, "n k"]:
    X, C = np.asarray(X, dtype=np.float64), np.asarray(C, dtype=np.float64)
    memo = _DISTANCE_MEMO.get()
    key = None
    # C-contiguous points; centroids keyed by their values and strides: the memory order of the differences (and so
    # einsum's loop) follows C's layout, so equal values laid out alike give the same distances bit for bit.
    if memo is not None and X.flags.c_contiguous:
        i = _memo_points(memo, X, add=True, budget=distances_budget(X, C.shape[0]))
        if i is not None:
            key = _distances_key(i, C)
            kept = lookup_distances(memo, key)
            if kept is not None:
                return kept
    out = np.empty((X.shape[0], C.shape[0]))
    if X.flags.c_contiguous and C.flags.c_contiguous and C.size:
        contiguous_sq_distances(X, C, out, _CHUNK)
    else:
        for start in range(0, X.shape[0], _CHUNK):
            diff = X[start : start + _CHUNK, None, :] - C[None, :, :]
            # np.einsum directly: the call einops' ``einsum(diff, diff, "point centroid dim, ... -> point centroid")``
            # makes, without its pattern parsing (called once per (X, C) pair checked).
            out[start : start + _CHUNK] = np.einsum("pcd,pcd->pc", diff, diff)
    if key is not None:
        keep_distances(memo, key, out, distances_budget(X, C.shape[0]))
    return out


def cluster_means(X: Float[np.ndarray, "n d"], labels: Int[np.ndarray, " n"],
                  C: Float[np.ndarray, "k d"]) -> Float[np.ndarray, "k d"]:
    """Lloyd's update of ``C`` by ``labels`` (-1: counted nowhere): each cluster's members summed in index order
    over their count; an empty cluster keeps its centroid. The members are gathered once, sorted stably by label,
    so each cluster's rows are one contiguous block holding the rows ``X[labels == j]`` holds, in the same order:
    the same sum, bit for bit, without a mask per cluster.

    Within :func:`memoised_distances` the means of the non-empty clusters are kept per (points, labels): they do
    not depend on ``C`` (the estimator's stop guess, the reference run and the step-wise check of an update block
    ask for the same ones, the last with the block's own ``C``)."""
    new = np.array(C, dtype=np.float64, copy=True)
    if isinstance(labels, np.ndarray) and labels.dtype.kind in "iu":
        key = ("means", labels.dtype.str, labels.shape, labels.tobytes())
        filled, means = memoised(X, key, lambda: _filled_means(X, labels), lambda r: r[1].nbytes + labels.nbytes)
    else:
        filled, means = _filled_means(X, labels)
    new[filled] = means
    return new


def _filled_means(X: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The labels of the non-empty clusters and their members' means (:func:`cluster_means`)."""
    inside = np.flatnonzero(labels >= 0)
    order = inside[np.argsort(small_keys(labels[inside]), kind="stable")]
    # np.take: the rows X[order] holds (a copy either way), several times faster than indexing for a 2-d array.
    members, sorted_labels = np.take(X, order, axis=0), labels[order]
    starts = np.flatnonzero(np.diff(sorted_labels)) + 1
    filled, means = [], []
    for lo, hi in zip([0, *starts.tolist()], [*starts.tolist(), len(order)]):
        if hi > lo:
            filled.append(sorted_labels[lo])
            means.append(members[lo:hi].sum(axis=0) / (hi - lo))
    return np.array(filled, dtype=np.intp), (np.array(means) if means else np.zeros((0, *X.shape[1:]), dtype=X.dtype))


def data_scale(X: Float[np.ndarray, "n d"], C0: Float[np.ndarray, "k d"] | None = None) -> float:
    """Largest distance of a point (or initial centroid) from the mean of the points; 1 if all coincide."""
    X = np.asarray(X, dtype=np.float64)
    # Coinciding points: their own value, not a mean an ulp away (as circuits.encoding.fit_unit_scaling).
    mu = X[0] if (X == X[:1]).all() else X.mean(axis=0)
    r = np.sqrt(((X - mu) ** 2).sum(axis=1)).max()
    if C0 is not None:
        r = max(r, np.sqrt(((np.asarray(C0, dtype=np.float64) - mu) ** 2).sum(axis=1)).max())
    return float(r) if r > 0 else 1.0


def objective(X: Float[np.ndarray, "n d"], C: Float[np.ndarray, "k d"], labels: Int[np.ndarray, " n"] | None = None) -> float:
    """k-means objective: sum of squared distances to the assigned (default: nearest) centroid; points labelled -1
    (left out, e.g. trimmed k-means outliers) count nowhere."""
    if labels is None:
        return float(sq_distances(X, C).min(axis=1).sum()) if len(X) else 0.0
    labels = np.asarray(labels)
    inside = np.flatnonzero(labels >= 0)
    if len(inside) == 0:
        return 0.0
    X = np.asarray(X)
    # Every point inside: X itself (the same values as its copy X[inside], so the same distances).
    return float(own_sq_distances(X if len(inside) == len(X) else X[inside], C, labels[inside]).sum())


def _distances_key(points: int, C: np.ndarray) -> tuple:
    return (points, C.shape, C.strides, C.tobytes())


def _kept_distances(X: np.ndarray, C: np.ndarray) -> np.ndarray | None:
    """The memo's :func:`sq_distances` of ``X`` and ``C`` if it holds them (nothing computed or added), else ``None``."""
    memo = _DISTANCE_MEMO.get()
    if memo is None or not X.flags.c_contiguous:
        return None
    i = _memo_points(memo, X, add=False)
    return None if i is None else lookup_distances(memo, _distances_key(i, C))


def own_sq_distances(X: Float[np.ndarray, "n d"], C: Float[np.ndarray, "k d"],
                     labels: Int[np.ndarray, " n"]) -> Float[np.ndarray, " n"]:
    """``sq_distances(X, C)[i, labels[i]]`` for every point, chunk by chunk (no ``n x k`` matrix kept).

    For a C-contiguous ``C``: the same differences summed by the same ``einsum`` over a centroid axis of length 1,
    at ``1/k`` of the work; the same numbers bit for bit (tests/unit/test_lean_verify.py checks it). Otherwise
    (e.g. decoded centroids, a transposed view) the differences ``X - C`` take ``C``'s memory order, and with it
    the order of ``einsum``'s sum: each chunk of :func:`sq_distances` is computed as it is there, and picked. A
    matrix the memo of :func:`memoised_distances` holds is picked from as it is."""
    X, C = np.asarray(X, dtype=np.float64), np.asarray(C, dtype=np.float64)
    kept = _kept_distances(X, C)
    if kept is not None:  # the very matrix this would pick from, chunk by chunk
        return kept[np.arange(X.shape[0]), labels]
    out = np.empty(X.shape[0])
    rows = np.arange(min(_CHUNK, X.shape[0]))
    for start in range(0, X.shape[0], _CHUNK):
        chunk = labels[start : start + _CHUNK]
        if C.flags.c_contiguous:
            diff = X[start : start + _CHUNK, None, :] - C[chunk][:, None, :]
            out[start : start + _CHUNK] = np.einsum("pcd,pcd->pc", diff, diff)[:, 0]
        else:
            diff = X[start : start + _CHUNK, None, :] - C[None, :, :]
            out[start : start + _CHUNK] = np.einsum("pcd,pcd->pc", diff, diff)[rows[: len(chunk)], chunk]
    return out


def objective_ratio(objective: float, baseline: float) -> float:
    """``objective / baseline`` (e.g. a model's objective over Lloyd's), where two zero objectives (all points on
    their centroids, e.g. all points equal) are equally good: ratio 1, not 0/0."""
    if objective == baseline == 0.0:
        return 1.0
    return objective / max(baseline, 1e-300)


def gaps(D: Float[np.ndarray, "n k"]) -> Float[np.ndarray, " n"]:
    """Second-smallest minus smallest squared distance per point (inf when k == 1)."""
    if D.shape[1] < 2:
        return np.full(D.shape[0], np.inf)
    part = np.partition(D, 1, axis=1)
    return part[:, 1] - part[:, 0]


def iterations_run(assignments, centroids) -> int:
    """Iterations until nothing changes any more, counted like scikit-learn's ``n_iter_``.

    ``assignments[t]`` is the labelling w.r.t. ``centroids[t]``. scikit-learn stops after iteration ``t`` when the
    assignment it just made equals the previous one, or when the centroids did not move; with ``tol=0`` later
    iterations would repeat the same state.
    """
    T = len(centroids) - 1
    for t in range(1, T + 1):
        same_labels = t >= 2 and np.array_equal(assignments[t - 1], assignments[t - 2])
        if same_labels or np.array_equal(centroids[t], centroids[t - 1]):
            return t
    return T


def converged(assignments, centroids) -> bool:
    """Whether two consecutive iterates are equal (the run reached a fixed point within its iterations)."""
    T = len(centroids) - 1
    return any((t >= 2 and np.array_equal(assignments[t - 1], assignments[t - 2]))
               or np.array_equal(centroids[t], centroids[t - 1]) for t in range(1, T + 1))


#: A row of the responsibilities counts as assigned when it sums to more than this.
ASSIGNED_MASS = 0.5


def labels_of(R: Float[np.ndarray, "n k"]) -> Int[np.ndarray, " n"]:
    """Argmax of each row, or -1 for a row that is (essentially) empty: an outlier or an unassigned point."""
    R = np.asarray(R, dtype=np.float64)
    if R.ndim != 2 or not R.flags.c_contiguous or R.shape[1] == 0 or R.shape[1] >= 2**24:
        return np.where(R.sum(axis=1) > ASSIGNED_MASS, R.argmax(axis=1), -1)
    return one_hot_labels(R, ASSIGNED_MASS)


def unit_rows(A: Float[np.ndarray, "m d"], what: str = "rows") -> Float[np.ndarray, "m d"]:
    A = np.asarray(A, dtype=np.float64)
    norms = np.linalg.norm(A, axis=1, keepdims=True)
    if (norms == 0).any():
        raise ValueError(f"spherical k-means needs non-zero {what}: {int((norms == 0).sum())} have norm 0")
    return A / norms


@dataclass
class Trace:
    """Every iterate of a reference run (indexing as in the module docstring). A hard run's responsibilities are
    a :class:`OneHotStack` (its labels), a soft run's the array."""

    centroids: Float[np.ndarray, "T_plus_1 k d"]
    responsibilities: Float[np.ndarray, "T_plus_1 n k"] | OneHotStack
    objectives: Float[np.ndarray, " T_plus_1"]

    @property
    def iterations(self) -> int:
        return len(self.centroids) - 1

    @property
    def assignments(self) -> Int[np.ndarray, "T_plus_1 n"]:
        """The labels of every iterate (read-only: computed once per ``responsibilities`` array, then reused)."""
        cached = self.__dict__.get("_assignments")
        if cached is None or cached[0] is not self.responsibilities:
            if isinstance(self.responsibilities, OneHotStack):
                # labels_of(one_hot(l)) is l: the stack was made of labels_of(R) where R == one_hot(labels_of(R)).
                labels = self.responsibilities.labels
            else:
                labels = np.stack([labels_of(R) for R in self.responsibilities])
                labels.flags.writeable = False
            cached = self.__dict__["_assignments"] = (self.responsibilities, labels)
        return cached[1]

    @property
    def labels(self) -> Int[np.ndarray, " n"]:
        return labels_of(self.responsibilities[-1])

    @property
    def final_centroids(self) -> Float[np.ndarray, "k d"]:
        return self.centroids[-1]

    @property
    def n_iter(self) -> int:
        return iterations_run(self.assignments, self.centroids)


@dataclass
class Costs:
    """What a hard assignment minimises: column ``c`` of ``values`` is label ``labels[c]`` (-1: left out)."""

    values: Float[np.ndarray, "n m"]
    labels: Int[np.ndarray, " m"]
    #: Added to column ``c`` before the argmin (``tie_break * j`` for centroid ``j``); ties go to the smaller sum.
    bias: Float[np.ndarray, " m"]


@dataclass
class Reference:
    """Lloyd's iteration: hard nearest-centroid assignment, mean update. Subclasses change one of the two."""

    tie_break: float = 0.0
    name: str = "lloyd"
    #: Hard algorithms assign every point to one centroid (or leave it out); soft ones spread it.
    hard: bool = field(default=True, init=False)
    #: Whether :meth:`update` moves each centroid to its members' plain mean (Lloyd's rule; an empty cluster keeps
    #: its centroid): the certified run then computes those means exactly (:mod:`analysis.verify.fast.certified`).
    mean_update: ClassVar[bool] = True

    # -- assignment ---------------------------------------------------------------------------------------
    def costs(self, X: Float[np.ndarray, "n d"], C: Float[np.ndarray, "k d"], t: int) -> Costs:
        k = C.shape[0]
        return Costs(sq_distances(X, C), np.arange(k), self.tie_break * np.arange(k, dtype=np.float64))

    def assign(self, X: Float[np.ndarray, "n d"], C: Float[np.ndarray, "k d"], t: int) -> Float[np.ndarray, "n k"]:
        return one_hot(self._chosen_labels(X, C, t), C.shape[0])

    def _chosen_labels(self, X: Float[np.ndarray, "n d"], C: Float[np.ndarray, "k d"], t: int) -> Int[np.ndarray, " n"]:
        """The label of the cost column each point chooses (what :meth:`assign` makes one-hot rows of)."""
        cost = self.costs(X, C, t)
        return cost.labels[np.argmin(cost.values + cost.bias, axis=1)]

    def _assigned_labels(self, X: Float[np.ndarray, "n d"], C: Float[np.ndarray, "k d"], t: int) -> np.ndarray | None:
        """``labels_of(self.assign(X, C, t))`` without the ``n x k`` matrix, where :meth:`assign` is this class's
        (one-hot rows of :meth:`_chosen_labels`, whose ``labels_of`` are those labels, ``-1`` for any below 0);
        ``None`` where a subclass assigns otherwise, or a label lies beyond the ``k`` columns."""
        if type(self).assign is not Reference.assign:
            return None
        chosen = np.asarray(self._chosen_labels(X, C, t))
        if chosen.dtype.kind not in "iu" or (chosen.size and int(chosen.max()) >= C.shape[0]):
            return None
        return np.where(chosen >= 0, chosen, -1).astype(np.intp, copy=False)

    # -- update -------------------------------------------------------------------------------------------
    def update(self, X: Float[np.ndarray, "n d"], R: Float[np.ndarray, "n k"], C: Float[np.ndarray, "k d"],
               u: int) -> Float[np.ndarray, "k d"]:
        """Lloyd's update: each cluster's mean as a sum over a count (as scikit-learn), which is exact for
        coinciding members where summing ``1/m``-weighted points is not; an empty cluster keeps its centroid.
        :meth:`update_weights` gives the same means as weights (what the verifier compares attention with)."""
        return cluster_means(X, labels_of(R), C)

    def weighted_update(self, X: Float[np.ndarray, "n d"], R: Float[np.ndarray, "n k"],
                        C: Float[np.ndarray, "k d"], u: int) -> Float[np.ndarray, "k d"]:
        """The update as :meth:`update_weights` defines it: the ``update`` of a subclass whose weights are not
        plain means (``update = Reference.weighted_update``)."""
        W = self.update_weights(X, R, C, u)
        return W[:, :-1] @ X + W[:, -1:] * C

    def update_weights(self, X: Float[np.ndarray, "n d"], R: Float[np.ndarray, "n k"], C: Float[np.ndarray, "k d"],
                       u: int) -> Float[np.ndarray, "k n_plus_1"]:
        """Row ``j``: the weight of each point in the new centroid ``j``, and last the weight of the old ``c_j``."""
        return self.member_weights(X, R, C, lambda members, j: np.full(len(members), 1.0 / len(members)))

    def member_weights(self, X, R, C, weigh) -> Float[np.ndarray, "k n_plus_1"]:
        """Update weights of a hard assignment: ``weigh(member indices, j)`` spreads centroid ``j`` over its
        members; a centroid without members keeps itself (weight 1 on the last column)."""
        labels = labels_of(R)
        k, n = C.shape[0], X.shape[0]
        W = np.zeros((k, n + 1))
        for j in range(k):
            members = np.flatnonzero(labels == j)
            if len(members):
                W[j, members] = weigh(members, j)
            else:
                W[j, n] = 1.0
        return W

    def objective(self, X, C, R) -> float:
        return objective(X, C, labels_of(R))

    # -- the iteration ------------------------------------------------------------------------------------
    def run(self, X: Float[np.ndarray, "n d"], C0: Float[np.ndarray, "k d"], iterations: int) -> Trace:
        """The iterates from ``C0``."""
        X, C = np.asarray(X, dtype=np.float64), np.asarray(C0, dtype=np.float64).copy()
        cents, resps, objs = [C.copy()], [], []
        for t in range(iterations + 1):
            labels = self._assigned_labels(X, C, t) if self.hard else None
            if labels is not None:
                # This class's one-hot assignment, held as its labels: the matrix is made only for an objective or
                # update a subclass defines on it (Lloyd's own read its labels_of, which are these labels).
                R = None
                resps.append(labels)
            else:
                R = self.assign(X, C, t)
                # A hard assignment that is exactly one-hot is kept as its labels (checked, not assumed).
                labels = labels_of(R) if self.hard else None
                resps.append(labels if labels is not None and np.array_equal(one_hot(labels, C.shape[0]), R) else R)
            if R is None and type(self).objective is Reference.objective:
                objs.append(objective(X, C, labels))
            else:
                R = one_hot(labels, C.shape[0]) if R is None else R
                objs.append(self.objective(X, C, R))
            if t < iterations:
                if R is None and type(self).update is Reference.update:
                    C = cluster_means(X, labels, C)
                else:
                    C = self.update(X, one_hot(labels, C.shape[0]) if R is None else R, C, t + 1)
                cents.append(C.copy())
            del R
        k = C.shape[0]
        if all(r.ndim == 1 for r in resps):
            responsibilities = OneHotStack(stack_rows(resps), k)
        else:
            responsibilities = np.stack([one_hot(r, k) if r.ndim == 1 else r for r in resps])
        return Trace(np.stack(cents), responsibilities, np.array(objs))


def assign(X: Float[np.ndarray, "n d"], C: Float[np.ndarray, "k d"], tie_break: float = 0.0) -> Int[np.ndarray, " n"]:
    """Nearest centroid of each point; ties (within ``tie_break``, absolute) go to the lower index."""
    if tie_break == 0.0:
        # Reference.assign's argmin with a zero bias (adding 0.0 to a distance changes nothing), as labels directly.
        return np.argmin(sq_distances(X, C), axis=1)
    return labels_of(Reference(tie_break=tie_break).assign(X, C, 0))


def update(X: Float[np.ndarray, "n d"], labels: Int[np.ndarray, " n"], C: Float[np.ndarray, "k d"]) -> Float[np.ndarray, "k d"]:
    """Mean of each cluster's points; an empty cluster keeps its centroid. Label -1 (unassigned) counts nowhere."""
    return cluster_means(np.asarray(X, dtype=np.float64), np.asarray(labels), np.asarray(C, dtype=np.float64))


def lloyd(X: Float[np.ndarray, "n d"], C0: Float[np.ndarray, "k d"], iterations: int,
          tie_break: float = 0.0) -> Trace:
    """Run ``iterations`` Lloyd steps from ``C0`` and record every iterate (:class:`Reference`). ``tie_break`` is
    absolute (squared user units)."""
    return Reference(tie_break=tie_break).run(X, C0, iterations)
