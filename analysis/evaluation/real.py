"""Real data, evaluated once: a model against Lloyd's on a scikit-learn dataset from several initialisations, with
ARI / NMI against the true classes.

:func:`evaluate_real_data` prepares the points one of two ways:

* ``raw=False`` (a fixed-shape checkpoint, :func:`dataset_points`): every feature min-max scaled to [0, 1] as the
  training tasks are, then reduced by PCA to the model's ``d`` or padded with zero coordinates (which change no
  distance), clustered at the model's ``k``;
* ``raw=True`` (a general model, measured as a user would use it): the raw units at the true number of classes,
  plus the anytime measures against scikit-learn's optimum (:func:`analysis.evaluation.metrics.anytime_summary`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from analysis.evaluation.comparison import compare
from analysis.evaluation.metrics import anytime_summary, per_task, sklearn_optimum
from analysis.evaluation.protocol import trajectories

#: Datasets used by default for a fixed-shape checkpoint: digits has 10 classes; blobs is scikit-learn's make_blobs
#: with k centres.
DEFAULT_DATASETS = ("digits", "blobs")
#: The real datasets of a general model, at their true k (scikit-learn's bundled ones; blobs is synthetic and left
#: out).
REAL_DATASETS = ("iris", "wine", "breast_cancer", "digits")


@dataclass(frozen=True)
class DatasetRun:
    """One evaluation cell: one dataset from ``inits`` initialisations (seeds ``seed..seed+inits-1``)."""

    name: str
    steps: int
    inits: int
    init: str
    seed: int
    chunk: int

    def __str__(self) -> str:
        return f"dataset {self.name} ({self.inits} {self.init} inits from seed {self.seed})"


@dataclass(frozen=True)
class PreparedData:
    """Points as both algorithms see them, the true classes, the number of clusters, and how they were prepared."""

    X: np.ndarray
    y: np.ndarray
    k: int
    how: str


def dataset_points(name: str, d: int, k: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, str]:
    """Points with ``d`` coordinates, true classes, and how they were prepared.

    Every feature is first min-max scaled to [0, 1], as the training tasks are (features in different units —
    wine's proline in the hundreds beside ratios near 1 — would otherwise leave one or two that matter); then PCA
    down to ``d`` or zero padding up to it. Model and Lloyd's see the same prepared points.
    """
    from sklearn.decomposition import PCA

    from analysis.data import EVALUATION_BLOBS_N, load_dataset

    if name == "blobs":
        ds = load_dataset("blobs", n=EVALUATION_BLOBS_N, d=d, centers=k, seed=seed)
    else:
        ds = load_dataset(name)
    X, y = ds.X, ds.y
    d_data = X.shape[1]
    lo, hi = X.min(axis=0), X.max(axis=0)
    X = (X - lo) / np.where(hi > lo, hi - lo, 1.0)
    how = "features min-max scaled to [0, 1]"
    if X.shape[1] > d:
        X = PCA(n_components=d, random_state=seed).fit_transform(X)
        how += f", PCA {d_data} -> {d} dimensions"
    elif X.shape[1] < d:
        X = np.pad(X, ((0, 0), (0, d - X.shape[1])))
        how += f", {d_data} dimensions padded with zeros to {d} (distances unchanged)"
    if name == "blobs":
        how = f"make_blobs(n_samples={EVALUATION_BLOBS_N}, n_features={d}, centers={k}, random_state={seed}), " + how
    return np.asarray(X, dtype=np.float64), np.asarray(y), how


def prepared(name: str, capacity, seed: int, raw: bool) -> PreparedData:
    """``name`` in raw units at its true k (``raw``), or fitted to ``capacity`` (``d``, ``k``) by
    :func:`dataset_points`."""
    if not raw:
        X, y, how = dataset_points(name, capacity.d, capacity.k, seed)
        return PreparedData(X, y, capacity.k, how)
    from analysis.data import load_dataset

    ds = load_dataset(name)
    y = np.asarray(ds.y)
    return PreparedData(np.asarray(ds.X, dtype=np.float64), y, int(len(np.unique(y))), "raw units")


def evaluate_real_data(model, run: DatasetRun, *, raw: bool) -> dict:
    """Model (any :class:`~analysis.evaluation.protocol.TrajectoryModel`, or a trained recurrent model) against
    Lloyd's on dataset ``run.name``, prepared as the module docstring says; with ``raw`` also the anytime measures
    against scikit-learn's optimum."""
    from circuits.initialisation import initial_centroids

    data = prepared(run.name, model.config, run.seed, raw)
    X, y, k = data.X, data.y, data.k
    C0 = np.stack([initial_centroids(X, k, run.init, run.seed + i) for i in range(run.inits)])
    Xb = np.broadcast_to(X, (run.inits, *X.shape)).copy()
    traj = trajectories(model, Xb, C0, run.steps, run.chunk)
    ev = compare(Xb, np.broadcast_to(y, (run.inits, len(y))), traj,
                 {"kind": "dataset", "name": run.name, "n": X.shape[0], "d": X.shape[1], "k": k,
                  "classes": int(len(np.unique(y))), "prepared": data.how, "init": run.init, "inits": run.inits,
                  "steps": run.steps}).to_dict()
    if not raw:
        return ev
    om, ol = per_task(Xb, traj)
    return {**ev, "anytime": anytime_summary(om, ol, np.full(run.inits, sklearn_optimum(X, k, run.seed)))}
