"""Random clustering tasks, as in the paper's learning experiments, seeded and batched.

A task is a problem of the paper's mixture (:class:`circuits.problems.PaperMixture`: ``k`` component means drawn
from U[0, 1]^d, ``n`` points, each from a component chosen uniformly at random plus per-dimension noise of scale
``sigma`` (0.1) from a noise family, min-max scaled to [0, 1] per dimension). Initial centroids are ``k``
distinct random data points (the paper's choice) or k-means++ (scikit-learn's
:func:`~sklearn.cluster.kmeans_plusplus`), drawn by :mod:`circuits.initialisation`.

Every batch is a pure function of ``(seed, stream, index)``: training, validation and test tasks come from
different streams, so held-out tasks are never trained on, and a training run can be resumed exactly. The
generator, its noise families (:data:`circuits.problems.FAMILIES`, :func:`circuits.problems.noise`) and the
batched initialisations live in :mod:`circuits.problems` and :mod:`circuits.initialisation`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from jaxtyping import Float, Int

from circuits.initialisation import INIT_METHODS as TASK_INITS
from circuits.initialisation import batch_init
from circuits.problems import SIGMA, PaperMixture, check_family

#: Independent random streams of one seed.
TRAIN, VALIDATION, TEST = 0, 1, 2


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


def make_tasks(batch: int, n: int, d: int, k: int, seed: int = 0, stream: int = TRAIN, index: int = 0,
               family: str = "gaussian", init: str = "random", sigma: float = SIGMA) -> TaskBatch:
    """Batch ``index`` of stream ``stream`` of seed ``seed``: a deterministic function of all arguments.

    The flat signature is the documented API; the problem itself is :class:`~circuits.problems.PaperMixture`'s."""
    check_family(family)
    if init not in TASK_INITS:
        raise ValueError(f"unknown init {init!r}; choose one of {', '.join(TASK_INITS)}")
    if batch < 1 or d < 1 or k < 1 or n < k:
        raise ValueError(f"tasks need batch, d, k >= 1 and n >= k, got batch={batch}, n={n}, d={d}, k={k}")
    rng = np.random.default_rng([seed, stream, index])
    X, components = PaperMixture(n, d, k, sigma, family).sample(rng, batch)
    return TaskBatch(X, batch_init(rng, X, k, init), components, family, init)


def task_stream(batch: int, n: int, d: int, k: int, count: int, seed: int, stream: int, family: str = "gaussian",
                init: str = "random") -> TaskBatch:
    """``count`` tasks of one stream, generated in batches of ``batch`` and concatenated (the flat signature is
    the documented API, as :func:`make_tasks`'s)."""
    parts = [make_tasks(min(batch, count - start), n, d, k, seed, stream, i, family, init)
             for i, start in enumerate(range(0, count, batch))]
    return TaskBatch(np.concatenate([p.X for p in parts]), np.concatenate([p.C0 for p in parts]),
                     np.concatenate([p.components for p in parts]), family, init)
