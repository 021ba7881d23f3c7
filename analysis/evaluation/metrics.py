"""The evaluation's numbers, each computed once: objectives, labels, agreement with the truth (ARI, NMI), merged
centroids, the anytime measures of the ratio to Lloyd's, and scikit-learn's optimum.

A ratio counts as above 1 (or an objective as rising) only beyond :data:`REL_TOL` relative.
"""

from __future__ import annotations

import numpy as np
import torch
from jaxtyping import Float, Int

from circuits import reference
from circuits.training.loss import kmeans_objective

#: Relative differences below this count as ties (and an objective "rises" only by more): well above the float32
#: resolution of a trained model's centroids (~1e-7 relative), well below any difference that matters.
REL_TOL = 1e-5


def objectives(X: Float[np.ndarray, "batch n d"], C: np.ndarray) -> np.ndarray:
    """``C``: (..., batch, k, d) -> objective (..., batch), each point to its nearest centroid.

    Batched in torch (:func:`circuits.training.loss.kmeans_objective`, the objective training reports): the same
    sum as :func:`circuits.reference.objective`, in another order (they differ in the last bits), kept so that
    every evaluation's numbers stay those of the runs recorded in ``checkpoints/*/eval``."""
    flat = C.reshape(-1, *C.shape[-3:])
    out = [kmeans_objective(torch.as_tensor(X), torch.as_tensor(c)).numpy() for c in flat]
    return np.stack(out).reshape(C.shape[:-2])


def nearest_labels(X: Float[np.ndarray, "batch n d"], C: Float[np.ndarray, "batch k d"]) -> Int[np.ndarray, "batch n"]:
    """Each task's points to their nearest centroid (:func:`circuits.reference.assign`)."""
    return np.stack([reference.assign(x, c) for x, c in zip(X, C)])


def merged_pairs(X: np.ndarray, C: np.ndarray, fraction: float = 0.01) -> float:
    """Mean over tasks of the number of centroid pairs closer than ``fraction`` of the data radius."""
    out = []
    for x, c in zip(X, C):
        radius = np.linalg.norm(x - x.mean(0), axis=1).max()
        dist = np.sqrt(reference.sq_distances(c, c))
        out.append(int(np.triu(dist < fraction * radius, k=1).sum()))
    return float(np.mean(out))


def contingency(truth: Int[np.ndarray, " n"], labels: Int[np.ndarray, " n"]) -> Int[np.ndarray, "classes clusters"]:
    """Points per (true class, cluster), over the classes and clusters present."""
    _, t = np.unique(truth, return_inverse=True)
    _, c = np.unique(labels, return_inverse=True)
    rows, cols = int(t.max()) + 1, int(c.max()) + 1
    return np.bincount(t.ravel() * cols + c.ravel(), minlength=rows * cols).reshape(rows, cols)


def adjusted_rand(table: Int[np.ndarray, "classes clusters"]) -> float:
    """Hubert and Arabie's adjusted Rand index from the contingency table, by pair counts (integers, exact): 1.0
    when the two partitions are the same, as scikit-learn's ``adjusted_rand_score``."""
    n = int(table.sum())
    same_both = int((table**2).sum()) - n  # ordered pairs of distinct points together in both
    same_class = int((table.sum(axis=1) ** 2).sum()) - n
    same_cluster = int((table.sum(axis=0) ** 2).sum()) - n
    only_class, only_cluster = same_class - same_both, same_cluster - same_both
    neither = n * n - n - same_both - only_class - only_cluster
    if only_class == 0 and only_cluster == 0:
        return 1.0
    return 2.0 * (same_both * neither - only_class * only_cluster) / (
        same_class * (only_class + neither) + same_cluster * (only_cluster + neither))


def normalized_mutual_info(table: Int[np.ndarray, "classes clusters"]) -> float:
    """Mutual information over the arithmetic mean of the two entropies (natural log), as scikit-learn's
    ``normalized_mutual_info_score``: 1.0 when both are one block, 0.0 when the information is 0."""
    if table.shape == (1, 1):
        return 1.0
    p = table / table.sum()
    pi, pj = p.sum(axis=1), p.sum(axis=0)
    nz = table > 0
    mi = float((p[nz] * (np.log(p[nz]) - np.log(np.outer(pi, pj)[nz]))).sum())
    if len(pi) == 1 or len(pj) == 1 or mi <= 0:
        return 0.0
    entropy = lambda q: float(-(q * np.log(q)).sum())  # noqa: E731  (every class and cluster present: q > 0)
    return mi / ((entropy(pi) + entropy(pj)) / 2)


def mean_adjusted_rand(labels: Int[np.ndarray, "batch n"], truth: Int[np.ndarray, "batch n"]) -> float:
    """Mean ARI over tasks."""
    return float(np.mean([adjusted_rand(contingency(t, l)) for t, l in zip(truth, labels)]))


def agreement_scores(labels: np.ndarray, truth: np.ndarray) -> tuple[float, float]:
    """Mean ARI and NMI over tasks. Computed here from each task's contingency table: scikit-learn's functions
    check and convert their inputs on every call, which was most of a general evaluation's time (tested equal)."""
    tables = [contingency(t, l) for t, l in zip(truth, labels)]
    return float(np.mean([adjusted_rand(c) for c in tables])), float(np.mean([normalized_mutual_info(c) for c in tables]))


def sklearn_optimum(X: np.ndarray, k: int, seed: int = 0) -> float:
    """scikit-learn's best objective of ten k-means++ restarts (Lloyd's algorithm to convergence)."""
    from sklearn.cluster import KMeans
    from threadpoolctl import threadpool_limits

    # One OpenMP thread: scikit-learn's inertia sums in a thread-count-dependent order, and the same evaluation
    # must give the same bytes in this process and in a Ray worker.
    with threadpool_limits(1):
        return float(KMeans(n_clusters=k, init="k-means++", n_init=10, random_state=seed).fit(X).inertia_)


def per_task(X: np.ndarray, traj) -> tuple[np.ndarray, np.ndarray]:
    """Objectives ``[T + 1, tasks]`` of the model and of Lloyd's along both trajectories
    (:class:`~analysis.evaluation.protocol.Trajectories`)."""
    return objectives(X, traj.model), objectives(X, traj.lloyd)


def anytime_summary(obj_model: np.ndarray, obj_lloyd: np.ndarray, optimum: np.ndarray | None = None,
                    rel_tol: float = REL_TOL) -> dict:
    """The anytime measures over tasks (columns) and steps (rows, step 0 the initialisation): the ratio to Lloyd's
    per step, how often the objective never rises, and with ``optimum`` how far both are from scikit-learn's."""
    ratio = obj_model[1:] / obj_lloyd[1:]
    rises = (obj_model[1:] > obj_model[:-1] * (1 + rel_tol)).any(axis=0)
    out = {
        "tasks": int(ratio.shape[1]),
        "ratio_mean_per_step": ratio.mean(axis=1).tolist(),
        "ratio_median_per_step": np.median(ratio, axis=1).tolist(),
        "ratio_mean": float(ratio[-1].mean()), "ratio_median": float(np.median(ratio[-1])),
        "ratio_max": float(ratio[-1].max()), "worst_step_mean": float(ratio.mean(axis=1).max()),
        "frac_never_rises": float(1.0 - rises.mean()),
        "frac_above_lloyd_final": float((ratio[-1] > 1 + rel_tol).mean()),
        "frac_above_1_05_final": float((ratio[-1] > 1.05).mean()),
        "frac_below_lloyd_every_step": float((ratio <= 1 + rel_tol).all(axis=0).mean()),
    }
    if optimum is not None:
        out["model_over_optimum"] = float((obj_model[-1] / optimum).mean())
        out["lloyd_over_optimum"] = float((obj_lloyd[-1] / optimum).mean())
        floor = optimum / obj_lloyd[-1]
        out["optimum_over_lloyd"] = float(floor.mean())
        out["optimum_over_lloyd_median"] = float(np.median(floor))
    return out
