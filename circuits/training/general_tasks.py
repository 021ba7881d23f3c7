"""The general task family: clustering problems of any shape and kind a user might bring, seeded and batched.

The paper's family (:mod:`circuits.training.tasks`) is one shape (d, k), equal-sized isotropic Gaussian clusters
min-max scaled to [0, 1]. A general model (one checkpoint for any ``d <= D``, ``k <= K``) is trained and
validated on this family instead. Per *batch* (tasks of one batch share their shape, so they stack):

* the shape: ``d`` log-uniform in ``1..D``, ``k`` uniform in ``2..K``, initial centroids k random data points
  or scikit-learn's k-means++ (one of the two, each with probability 1/2);

and per *task*:

* ``m`` generating components, ``m = k`` (probability 1/2) or drawn from ``1..K`` (the user's k is not always
  the data's number of clusters), with Dirichlet(alpha) mixture weights, alpha log-uniform in [0.3, 5]
  (unequal cluster sizes);
* component means ``N(0, s^2 I)`` with separation ``s`` log-uniform in [0.15, 3] (noise has unit scale per
  direction), so overlapping and well-separated mixtures both occur;
* each component's noise ``z A_j^T`` with ``A_j = Q_j diag(sigma_j)``, ``Q_j`` a random rotation and
  ``sigma_j`` log-uniform in [0.2, 1] (anisotropic), and ``z`` Gaussian, or (probability 1/4) Student-t with
  3..10 degrees of freedom (heavy tails);
* the task's own units: every task is multiplied by ``10^u``, ``u ~ U[-3, 3]``, and shifted by an offset of
  up to 100 times that scale — the model's encoder has to undo this, as for the exact circuit.

A batch is a pure function of ``(seed, stream, index)``; the streams of :mod:`circuits.training.tasks`
(``TRAIN``, ``VALIDATION``, ``TEST``) keep held-out tasks out of training.
"""

from __future__ import annotations

import numpy as np

from circuits.initialisation import batch_init
from circuits.problems import GeneralMixture
from circuits.training.tasks import TaskBatch

#: Salt for the general family's random streams (distinct from the paper family's for the same seed).
GENERAL_SALT = 7919

#: The family's per-task mixture (the ranges in the module docstring).
GENERAL_MIXTURE = GeneralMixture()


def draw_shape(rng: np.random.Generator, d_max: int, k_max: int) -> tuple[int, int]:
    d = int(np.clip(np.round(np.exp(rng.uniform(0.0, np.log(d_max)))), 1, d_max))
    k = int(rng.integers(2, k_max + 1)) if k_max >= 2 else 1
    return d, k


def mixture(rng: np.random.Generator, n: int, d: int, m: int) -> tuple[np.ndarray, np.ndarray]:
    """One task's points ``(n, d)`` and generating components ``(n,)`` (:class:`circuits.problems.GeneralMixture`)."""
    return GENERAL_MIXTURE.sample(rng, n, d, m)


def general_tasks(batch: int, n: int, d_max: int, k_max: int, seed: int = 0, stream: int = 0, index: int = 0,
                  shape: tuple[int, int] | None = None, init: str | None = None) -> TaskBatch:
    """Batch ``index`` of stream ``stream``: ``batch`` tasks of one shape (drawn, or ``shape = (d, k)``).

    The flat signature is the API the training loop, evaluation and benchmarks call; each task's problem is
    :data:`GENERAL_MIXTURE`'s. Draws, in order: the shape, the initialisation (when ``init`` is None), per task
    the number of components and the problem, then the initial centroids."""
    rng = np.random.default_rng([seed, stream, index, GENERAL_SALT])
    d, k = draw_shape(rng, d_max, k_max)
    if shape is not None:
        d, k = shape
    if n < k or d < 1 or k < 1:
        raise ValueError(f"tasks need d, k >= 1 and n >= k, got n={n}, d={d}, k={k}")
    if init is None:
        init = "random" if rng.random() < 0.5 else "k-means++"
    X, comps = [], []
    for _ in range(batch):
        m = k if rng.random() < 0.5 else int(rng.integers(1, k_max + 1))
        x, c = mixture(rng, n, d, m)
        X.append(x)
        comps.append(c)
    X = np.stack(X)
    return TaskBatch(X, batch_init(rng, X, k, init), np.stack(comps), "general", init)


def general_stream(batch: int, n: int, d_max: int, k_max: int, batches: int, seed: int, stream: int,
                   shape: tuple[int, int] | None = None, init: str | None = None) -> list[TaskBatch]:
    """``batches`` batches of one stream (each of its own shape unless ``shape`` is given)."""
    return [general_tasks(batch, n, d_max, k_max, seed, stream, i, shape, init) for i in range(batches)]
