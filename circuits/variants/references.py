"""What the variants' numpy references share: softmax and sparsemax rows, closeness, the seeded Gumbel noise.

Each variant's reference, the algorithm its circuit realises, is a subclass of Lloyd's
:class:`circuits.reference.Reference` that changes its assignment or its update, declared in the variant's module
(``SoftKMeans`` in :mod:`circuits.variants.soft`, ``TrimmedKMeans`` in :mod:`circuits.variants.trimmed`, ...).

Every reference is written as the textbook iteration, independently of any circuit: an *assignment* maps
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

import numpy as np
from jaxtyping import Float, Int

from circuits.reference import sq_distances


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


class DegenerateUpdate(ValueError):
    """The algorithm is undefined at this state (a spherical cluster whose members' directions cancel)."""


#: A spherical cluster is degenerate when its members' unit vectors sum to at most this much per member.
DEGENERATE = 1e-12
