"""Lloyd's algorithm in plain numpy: the textbook form of every reference a circuit is compared with, and the base
of the family.

:class:`Reference` is Lloyd's iteration (Lloyd 1982; the paper's Algorithm 1) written as an assignment (a
responsibility matrix, one-hot rows) and an update (each centroid the mean of its members, or itself when it has
none); the variants' references (each in its variant's module, :mod:`circuits.variants`) subclass it and change one
of the two. :func:`lloyd`, :func:`assign` and :func:`update` are Lloyd's own entry points on top of it.

Rules, stated because every comparison depends on them:

* Distances are ``|x - c|^2`` computed directly from the difference (not via ``|x|^2 - 2 x.c + |c|^2``).
* Ties: a point goes to the centroid minimising ``|x - c_j|^2 + tie_break * j``; with ``tie_break = 0`` (the
  default) this is ``np.argmin``, equal float64 distances to the lower index.
* Empty clusters: a centroid with no points keeps its previous position. (scikit-learn instead relocates it, so
  oracle tests against scikit-learn use problems without empty clusters.)
* Every iterate is recorded: ``centroids[t]`` after ``t`` iterations (``centroids[0]`` is the initialisation) and
  ``assignments[t]``, the assignment of every point to ``centroids[t]``. Iteration ``t`` maps
  ``(centroids[t-1], assignments[t-1])`` to ``centroids[t]``; ``assignments[T]`` is the final labelling.

The circuit's verifier holds a hard circuit whose costs are distances to this algorithm in exact arithmetic at the
data's precision (:mod:`circuits.precision`), computed fast by :mod:`analysis.verify.fast`; every fast form there is
tested against the functions here, bit for bit.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
from jaxtyping import Float, Int

from circuits.onehot import one_hot

#: Points whose differences to the centroids are held at once (``chunk x k x d``), to bound memory.
CHUNK = 8192


def sq_distances(X: Float[np.ndarray, "n d"], C: Float[np.ndarray, "k d"]) -> Float[np.ndarray, "n k"]:
    """``|x_i - c_j|^2`` for every point and centroid, from the differences, a chunk of points at a time."""
    X, C = np.asarray(X, dtype=np.float64), np.asarray(C, dtype=np.float64)
    out = np.empty((X.shape[0], C.shape[0]))
    for start in range(0, X.shape[0], CHUNK):
        diff = X[start : start + CHUNK, None, :] - C[None, :, :]
        out[start : start + CHUNK] = np.einsum("pcd,pcd->pc", diff, diff)
    return out


def cluster_means(X: Float[np.ndarray, "n d"], labels: Int[np.ndarray, " n"],
                  C: Float[np.ndarray, "k d"]) -> Float[np.ndarray, "k d"]:
    """Lloyd's update of ``C`` by ``labels`` (-1: counted nowhere): each cluster's members summed in index order
    over their count, which is exact for coinciding members where summing ``1/m``-weighted points is not; an empty
    cluster keeps its centroid."""
    X, labels = np.asarray(X, dtype=np.float64), np.asarray(labels)
    new = np.array(C, dtype=np.float64, copy=True)
    for j in range(new.shape[0]):
        members = X[labels == j]
        if len(members):
            new[j] = members.sum(axis=0) / len(members)
    return new


def objective(X: Float[np.ndarray, "n d"], C: Float[np.ndarray, "k d"], labels: Int[np.ndarray, " n"] | None = None) -> float:
    """k-means objective: sum of squared distances to the assigned (default: nearest) centroid; points labelled -1
    (left out, e.g. trimmed k-means outliers) count nowhere."""
    D = sq_distances(X, C)
    if labels is None:
        return float(D.min(axis=1).sum()) if len(X) else 0.0
    labels = np.asarray(labels)
    inside = np.flatnonzero(labels >= 0)
    return float(D[inside, labels[inside]].sum()) if len(inside) else 0.0


def data_scale(X: Float[np.ndarray, "n d"], C0: Float[np.ndarray, "k d"] | None = None) -> float:
    """Largest distance of a point (or initial centroid) from the mean of the points; 1 if all coincide."""
    X = np.asarray(X, dtype=np.float64)
    # Coinciding points: their own value, not a mean an ulp away (as circuits.encoding.fit_unit_scaling).
    mu = X[0] if (X == X[:1]).all() else X.mean(axis=0)
    r = np.sqrt(((X - mu) ** 2).sum(axis=1)).max()
    if C0 is not None:
        r = max(r, np.sqrt(((np.asarray(C0, dtype=np.float64) - mu) ** 2).sum(axis=1)).max())
    return float(r) if r > 0 else 1.0


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
    return np.where(R.sum(axis=1) > ASSIGNED_MASS, R.argmax(axis=1), -1)


def unit_rows(A: Float[np.ndarray, "m d"], what: str = "rows") -> Float[np.ndarray, "m d"]:
    A = np.asarray(A, dtype=np.float64)
    norms = np.linalg.norm(A, axis=1, keepdims=True)
    if (norms == 0).any():
        raise ValueError(f"spherical k-means needs non-zero {what}: {int((norms == 0).sum())} have norm 0")
    return A / norms


@dataclass
class Trace:
    """Every iterate of a reference run (indexing as in the module docstring)."""

    centroids: Float[np.ndarray, "T_plus_1 k d"]
    responsibilities: Float[np.ndarray, "T_plus_1 n k"]
    objectives: Float[np.ndarray, " T_plus_1"]

    @property
    def iterations(self) -> int:
        return len(self.centroids) - 1

    @property
    def assignments(self) -> Int[np.ndarray, "T_plus_1 n"]:
        """The labels of every iterate."""
        return np.stack([labels_of(R) for R in self.responsibilities])

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
        """One-hot rows of the cost column each point chooses (a row of zeros for a column of label -1)."""
        cost = self.costs(X, C, t)
        return one_hot(cost.labels[np.argmin(cost.values + cost.bias, axis=1)], C.shape[0])

    # -- update -------------------------------------------------------------------------------------------
    def update(self, X: Float[np.ndarray, "n d"], R: Float[np.ndarray, "n k"], C: Float[np.ndarray, "k d"],
               u: int) -> Float[np.ndarray, "k d"]:
        """Lloyd's update: each cluster's mean as a sum over a count (as scikit-learn); an empty cluster keeps its
        centroid. :meth:`update_weights` gives the same means as weights (what the verifier compares attention
        with)."""
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
        """The iterates from ``C0``: assign, record, update, ``iterations`` times, and a last assignment."""
        X, C = np.asarray(X, dtype=np.float64), np.asarray(C0, dtype=np.float64).copy()
        cents, resps, objs = [C.copy()], [], []
        for t in range(iterations + 1):
            R = self.assign(X, C, t)
            resps.append(R)
            objs.append(self.objective(X, C, R))
            if t < iterations:
                C = self.update(X, R, C, t + 1)
                cents.append(C.copy())
        return Trace(np.stack(cents), np.stack(resps), np.array(objs))


def assign(X: Float[np.ndarray, "n d"], C: Float[np.ndarray, "k d"], tie_break: float = 0.0) -> Int[np.ndarray, " n"]:
    """Nearest centroid of each point; ties (within ``tie_break``, absolute) go to the lower index."""
    return labels_of(Reference(tie_break=tie_break).assign(X, C, 0))


def update(X: Float[np.ndarray, "n d"], labels: Int[np.ndarray, " n"], C: Float[np.ndarray, "k d"]) -> Float[np.ndarray, "k d"]:
    """Mean of each cluster's points; an empty cluster keeps its centroid. Label -1 (unassigned) counts nowhere."""
    return cluster_means(X, labels, C)


def lloyd(X: Float[np.ndarray, "n d"], C0: Float[np.ndarray, "k d"], iterations: int,
          tie_break: float = 0.0) -> Trace:
    """Run ``iterations`` Lloyd steps from ``C0`` and record every iterate (:class:`Reference`). ``tie_break`` is
    absolute (squared user units)."""
    return Reference(tie_break=tie_break).run(X, C0, iterations)
