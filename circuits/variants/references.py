"""Numpy reference implementations of the clustering algorithms the variant circuits realise.

Each is a subclass of Lloyd's :class:`circuits.reference.Reference` that changes its assignment or its update.

Every algorithm here is written as the textbook iteration, independently of any circuit: an *assignment* maps
centroids to a responsibility matrix ``R`` (``n x k``; one-hot rows for hard algorithms, rows of zeros for points
left out), an *update* maps ``(R, centroids)`` to new centroids. :meth:`Reference.run` records every iterate with
the same indexing as :class:`circuits.reference.Trace`: ``centroids[t]`` after ``t`` iterations
(``centroids[0]`` is the initialisation) and ``responsibilities[t]`` the assignment to ``centroids[t]``.

All parameters are in the units of the points given to the reference (the verifier converts the circuit's
unit-scaled knobs). Update ``u`` (``u = 1 .. T``) is the one that produces ``centroids[u]``; randomised
updates draw their noise by that index, exactly as the circuit's hook does.

Rules shared with :mod:`circuits.reference`: hard assignments go to ``argmin_j cost_ij + tie_break * j`` (lower
index on ties); a cluster without members keeps its centroid.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from jaxtyping import Float, Int

from circuits.reference import Costs, Reference, Trace, labels_of, objective, one_hot, sq_distances, unit_rows

def softmax_rows(Z: Float[np.ndarray, "n k"]) -> Float[np.ndarray, "n k"]:
    Z = Z - Z.max(axis=1, keepdims=True)
    E = np.exp(Z)
    return E / E.sum(axis=1, keepdims=True)


def sparsemax(z: Float[np.ndarray, " m"]) -> Float[np.ndarray, " m"]:
    """Euclidean projection of ``z`` onto the probability simplex (Martins & Astudillo, 2016)."""
    z = np.asarray(z, dtype=np.float64)
    zs = np.sort(z)[::-1]
    cumulative = np.cumsum(zs)
    ranks = np.arange(1, len(z) + 1)
    support = ranks[1 + ranks * zs > cumulative][-1]
    tau = (cumulative[support - 1] - 1.0) / support
    return np.maximum(z - tau, 0.0)


def closeness(X: Float[np.ndarray, "n d"], C: Float[np.ndarray, "k d"], members: Int[np.ndarray, " m"], j: int,
              gamma: float) -> Float[np.ndarray, " m"]:
    """``-gamma |x_i - c_j|^2`` for the members ``i`` of centroid ``j``."""
    return -gamma * sq_distances(X[members], C[j : j + 1])[:, 0]


def gumbel_noise(seed: int, update: int, problem: int, k: int, n_tokens: int) -> Float[np.ndarray, "k n_tokens"]:
    """The Gumbel noise centroid queries add to their update scores: one draw per (centroid, key position).

    Seeded by ``(seed, update, problem)`` so that the circuit's hook and the reference draw the same numbers;
    key positions follow :class:`~circuits.layout.SequenceLayout` (point ``i`` is key ``1 + i``).
    """
    rng = np.random.default_rng([int(seed), int(update), int(problem)])
    return rng.gumbel(size=(k, n_tokens))


@dataclass
class SoftKMeans(Reference):
    """Soft k-means with stiffness ``beta``: ``R = softmax_j(-beta_t |x - c_j|^2)``, responsibility-weighted means.

    ``prior`` is a pseudo-count on the old centroid: ``c_j <- (sum_i r_ij x_i + prior c_j) / (sum_i r_ij + prior)``.
    It only matters when a centroid's responsibilities all but vanish (it then keeps its place, the soft analogue
    of the empty-cluster rule); ``prior = 0`` is textbook soft k-means. ``growth`` anneals the stiffness,
    ``beta_t = beta * growth**t`` at assignment ``t`` (deterministic annealing; ``growth = 1`` is plain soft k-means).
    """

    beta: float = 1.0
    prior: float = 0.0
    growth: float = 1.0
    name: str = "soft"

    def __post_init__(self) -> None:
        self.hard = False

    def stiffness(self, t: int) -> float:
        return self.beta * self.growth**t

    def assign(self, X, C, t):
        return softmax_rows(-self.stiffness(t) * sq_distances(X, C))

    def update_weights(self, X, R, C, u):
        mass = R.sum(axis=0) + self.prior
        W = np.concatenate([R.T, np.full((C.shape[0], 1), self.prior)], axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            W = W / mass[:, None]
        # No responsibility and no prior: nothing to average, keep the centroid.
        W[mass == 0] = 0.0
        W[mass == 0, -1] = 1.0
        return W


class DegenerateUpdate(ValueError):
    """The algorithm is undefined at this state (a spherical cluster whose members' directions cancel)."""


#: A spherical cluster is degenerate when its members' unit vectors sum to at most this much per member.
DEGENERATE = 1e-12


@dataclass
class SphericalKMeans(Reference):
    """Spherical k-means (Dhillon & Modha): unit-norm points, assignment by cosine similarity, centroid = normalised
    sum of the members. The cost is ``-cos(x_i, c_j)`` (centroids may be given at any positive scale)."""

    name: str = "spherical"

    def costs(self, X, C, t):
        k = C.shape[0]
        cos = unit_rows(X, "points") @ unit_rows(C, "centroids").T
        return Costs(-cos, np.arange(k), self.tie_break * np.arange(k, dtype=np.float64))

    def update(self, X, R, C, u):
        members = labels_of(R)
        new = unit_rows(C, "centroids").copy()
        Xu = unit_rows(X, "points")
        for j in range(C.shape[0]):
            inside = members == j
            if inside.any():
                s = Xu[inside].sum(axis=0)
                norm = np.linalg.norm(s)
                # Members whose directions cancel (e.g. two opposite points) leave no direction to move to.
                if norm <= DEGENERATE * inside.sum():
                    raise DegenerateUpdate(
                        f"spherical k-means is undefined at update {u}: the {int(inside.sum())} unit vectors of cluster"
                        f" {j} sum to {norm:.2g} (no mean direction)")
                new[j] = s / norm
        return new

    def objective(self, X, C, R):
        # 2 * sum(1 - cos): the k-means objective of the unit points about the unit centroids.
        return objective(unit_rows(X, "points"), unit_rows(C, "centroids"), labels_of(R))


@dataclass
class TrimmedKMeans(Reference):
    """Trimmed k-means with a distance threshold: a point whose nearest centroid is farther than ``sqrt(theta)``
    (squared distance above ``theta``) is an outlier at that iteration: it belongs to no cluster and is left out of
    the update. ``sink_tie_break`` is added to the threshold's cost, so a point exactly at ``theta`` stays in."""

    theta: float = 1.0
    sink_tie_break: float = 0.0
    name: str = "trimmed"

    def costs(self, X, C, t):
        k = C.shape[0]
        D = sq_distances(X, C)
        values = np.concatenate([D, np.full((len(X), 1), self.theta)], axis=1)
        bias = np.concatenate([self.tie_break * np.arange(k, dtype=np.float64), [self.sink_tie_break]])
        return Costs(values, np.concatenate([np.arange(k), [-1]]), bias)


@dataclass
class SparseKMeans(Reference):
    """Hard assignment; each centroid moves to the sparsemax-weighted average of its members, weights
    ``sparsemax_i(-gamma |x_i - c_j|^2)`` over the members (members far from the centroid get weight 0)."""

    gamma: float = 1.0
    name: str = "sparse"

    def update_weights(self, X, R, C, u):
        return self.member_weights(X, R, C, lambda members, j: sparsemax(closeness(X, C, members, j, self.gamma)))


@dataclass
class GumbelKMeans(Reference):
    """Hard assignment; each centroid jumps to one of its members drawn by Gumbel-max sampling,
    ``argmax_i(-gamma |x_i - c_j|^2 + g_ij)`` with seeded Gumbel noise ``g`` (:func:`gumbel_noise`), i.e. a member
    drawn with probability ``softmax_i(-gamma |x_i - c_j|^2)``; ``gamma = 0`` draws uniformly (a randomised
    k-medoids-style step). ``problem`` is the problem's index in its batch (it seeds the noise)."""

    gamma: float = 0.0
    seed: int = 0
    problem: int = 0
    name: str = "gumbel"

    def update_weights(self, X, R, C, u):
        k, n = C.shape[0], X.shape[0]
        noise = gumbel_noise(self.seed, u, self.problem, k, 1 + n + k)

        def draw(members, j):
            # Point i is key 1 + i of the sequence, as in the circuit.
            return np.eye(len(members))[np.argmax(closeness(X, C, members, j, self.gamma) + noise[j, 1 + members])]

        return self.member_weights(X, R, C, draw)


@dataclass
class DampedKMeans(Reference):
    """Damped Lloyd: hard assignment, then each centroid moves a fraction ``eta`` of the way to its members' mean,
    ``c_j <- c_j + eta (mean_j - c_j)`` (an empty cluster keeps its centroid). ``eta = 1`` is Lloyd's algorithm."""

    eta: float = 0.5
    name: str = "damped"

    def update(self, X, R, C, u):
        mean_weights = Reference.update_weights(self, X, R, C, u)
        mean = mean_weights[:, :-1] @ X + mean_weights[:, -1:] * C
        return C + self.eta * (mean - C)

    def update_weights(self, X, R, C, u):
        W = self.eta * Reference.update_weights(self, X, R, C, u)
        W[:, -1] += 1.0 - self.eta
        return W
