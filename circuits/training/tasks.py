"""Random clustering tasks, as in the paper's learning experiments, seeded and batched.

A task: ``k`` component means drawn from U[0, 1]^d, ``n`` points, each from a component chosen uniformly at
random plus per-dimension noise of scale ``sigma`` (0.1), the whole task min-max scaled to [0, 1] per dimension.
Initial centroids are ``k`` distinct random data points (the paper's choice) or k-means++ (scikit-learn's
:func:`~sklearn.cluster.kmeans_plusplus`).

Noise families, all scaled so that ``sigma`` is the per-dimension standard deviation where one exists:

* ``gaussian`` — N(0, 1) (the training distribution);
* ``laplace`` — Laplace with scale 1/sqrt(2);
* ``gumbel`` — Gumbel, centred, scale sqrt(6)/pi (skewed);
* ``lognormal`` — ``exp(Z)`` centred and divided by its standard deviation (strongly skewed);
* ``cauchy`` — standard Cauchy (no variance: ``sigma`` is its scale; heavy tails, so after min-max scaling most
  points crowd into a small part of [0, 1]^d).

Every batch is a pure function of ``(seed, stream, index)``: training, validation and test tasks come from
different streams, so held-out tasks are never trained on, and a training run can be resumed exactly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from jaxtyping import Float, Int

FAMILIES = ("gaussian", "cauchy", "gumbel", "laplace", "lognormal")
TASK_INITS = ("random", "k-means++")

#: Independent random streams of one seed.
TRAIN, VALIDATION, TEST = 0, 1, 2

SIGMA = 0.1


@dataclass
class TaskBatch:
    """``batch`` tasks of equal size: points in [0, 1]^d, initial centroids, generating components."""

    X: Float[np.ndarray, "batch n d"]
    C0: Float[np.ndarray, "batch k d"]
    components: Int[np.ndarray, "batch n"]
    family: str
    init: str

    @property
    def batch(self) -> int:
        return self.X.shape[0]

    @property
    def n(self) -> int:
        return self.X.shape[1]

    @property
    def d(self) -> int:
        return self.X.shape[2]

    @property
    def k(self) -> int:
        return self.C0.shape[1]

    def subset(self, index: slice) -> "TaskBatch":
        return TaskBatch(self.X[index], self.C0[index], self.components[index], self.family, self.init)


def noise(rng: np.random.Generator, family: str, shape: tuple[int, ...]) -> np.ndarray:
    """Unit-scale noise of ``family`` (unit variance except Cauchy, whose scale is 1)."""
    if family == "gaussian":
        return rng.standard_normal(shape)
    if family == "laplace":
        return rng.laplace(0.0, 1.0 / math.sqrt(2.0), shape)
    if family == "gumbel":
        scale = math.sqrt(6.0) / math.pi
        return rng.gumbel(0.0, scale, shape) - scale * np.euler_gamma
    if family == "lognormal":
        mean, std = math.exp(0.5), math.sqrt((math.e - 1.0) * math.e)
        return (rng.lognormal(0.0, 1.0, shape) - mean) / std
    if family == "cauchy":
        return rng.standard_cauchy(shape)
    raise ValueError(f"unknown task family {family!r}; choose one of {', '.join(FAMILIES)}")


def min_max_scale(X: Float[np.ndarray, "batch n d"]) -> Float[np.ndarray, "batch n d"]:
    lo, hi = X.min(axis=1, keepdims=True), X.max(axis=1, keepdims=True)
    span = np.where(hi > lo, hi - lo, 1.0)
    return (X - lo) / span


def random_points_init(rng: np.random.Generator, X: Float[np.ndarray, "batch n d"], k: int) -> Float[np.ndarray, "batch k d"]:
    """``k`` distinct data points per task (indices without replacement; continuous data has no duplicates)."""
    batch, n, _ = X.shape
    idx = np.argsort(rng.random((batch, n)), axis=1)[:, :k]
    idx.sort(axis=1)
    return np.take_along_axis(X, idx[..., None], axis=1).copy()


def kmeans_plusplus_init(rng: np.random.Generator, X: Float[np.ndarray, "batch n d"], k: int) -> Float[np.ndarray, "batch k d"]:
    from sklearn.cluster import kmeans_plusplus

    seeds = rng.integers(0, 2**31 - 1, size=X.shape[0])
    return np.stack([kmeans_plusplus(x, n_clusters=k, random_state=int(s))[0] for x, s in zip(X, seeds)])


def make_tasks(batch: int, n: int, d: int, k: int, seed: int = 0, stream: int = TRAIN, index: int = 0,
               family: str = "gaussian", init: str = "random", sigma: float = SIGMA) -> TaskBatch:
    """Batch ``index`` of stream ``stream`` of seed ``seed``: a deterministic function of all arguments."""
    if family not in FAMILIES:
        raise ValueError(f"unknown task family {family!r}; choose one of {', '.join(FAMILIES)}")
    if init not in TASK_INITS:
        raise ValueError(f"unknown init {init!r}; choose one of {', '.join(TASK_INITS)}")
    if batch < 1 or d < 1 or k < 1 or n < k:
        raise ValueError(f"tasks need batch, d, k >= 1 and n >= k, got batch={batch}, n={n}, d={d}, k={k}")
    rng = np.random.default_rng([seed, stream, index])
    means = rng.uniform(0.0, 1.0, (batch, k, d))
    components = rng.integers(0, k, (batch, n))
    X = np.take_along_axis(means, components[..., None], axis=1) + sigma * noise(rng, family, (batch, n, d))
    X = min_max_scale(X)
    C0 = random_points_init(rng, X, k) if init == "random" else kmeans_plusplus_init(rng, X, k)
    return TaskBatch(X, C0, components, family, init)


def task_stream(batch: int, n: int, d: int, k: int, count: int, seed: int, stream: int, family: str = "gaussian",
                init: str = "random") -> TaskBatch:
    """``count`` tasks of one stream, generated in batches of ``batch`` and concatenated."""
    parts = [make_tasks(min(batch, count - start), n, d, k, seed, stream, i, family, init)
             for i, start in enumerate(range(0, count, batch))]
    return TaskBatch(np.concatenate([p.X for p in parts]), np.concatenate([p.C0 for p in parts]),
                     np.concatenate([p.components for p in parts]), family, init)
