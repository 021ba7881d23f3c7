"""A general checkpoint (one model for any ``d <= D``, ``k <= K``) against Lloyd's, measured as a user would use it.

Three comparisons, each from the same initial centroids for the model and for Lloyd's (:mod:`circuits.reference`),
per step ``1..T``:

* :func:`evaluate_shapes` — held-out tasks of the general family (:mod:`circuits.training.general_tasks`, test
  stream) at several fixed shapes ``(d, k)``: per shape the per-step statistics of :func:`analysis.evaluate.compare`,
  and over all tasks together the anytime measures: the mean ratio at every step, the share of tasks whose
  objective never rises from one step to the next, the largest per-task ratio at the last step;
* :func:`evaluate_real` — scikit-learn's bundled datasets in their raw units at their true number of classes,
  from several initialisations, with ARI / NMI against the classes;
* both against scikit-learn's ``KMeans(init="k-means++", n_init=10)`` (the best of ten restarts, run to
  convergence): the mean ratio of the model's and of Lloyd's objective to that optimum, and the optimum's own
  ratio to Lloyd's (``optimum_over_lloyd``): how low the model's ratio to Lloyd's could go by reaching the best
  objective scikit-learn finds — a goal below it asks for more than ten k-means++ restarts deliver.

A ratio counts as above 1 (or an objective as rising) only beyond :data:`analysis.evaluate.REL_TOL` relative.
"""

from __future__ import annotations

import numpy as np

from analysis.evaluate import REL_TOL, compare, objectives, trajectories
from circuits.training.model import RecurrentKMeans
from circuits.training.tasks import TEST, TaskBatch

#: Shapes ``(d, k)`` evaluated by default: from 2-D to the capacity, few to many clusters.
DEFAULT_SHAPES = ((2, 3), (4, 8), (8, 5), (16, 10), (32, 16), (64, 8))
#: The real datasets at their true k (scikit-learn's bundled ones; blobs is synthetic and left out).
REAL_DATASETS = ("iris", "wine", "breast_cancer", "digits")


def sklearn_optimum(X: np.ndarray, k: int, seed: int = 0) -> float:
    """scikit-learn's best objective of ten k-means++ restarts (Lloyd's algorithm to convergence)."""
    from sklearn.cluster import KMeans

    return float(KMeans(n_clusters=k, init="k-means++", n_init=10, random_state=seed).fit(X).inertia_)


def per_task(X: np.ndarray, traj) -> tuple[np.ndarray, np.ndarray]:
    """Objectives ``[T + 1, tasks]`` of the model and of Lloyd's along both trajectories."""
    return objectives(X, traj.model), objectives(X, traj.lloyd)


def anytime_summary(obj_model: np.ndarray, obj_lloyd: np.ndarray, optimum: np.ndarray | None = None,
                    rel_tol: float = REL_TOL) -> dict:
    """The anytime measures over tasks (columns) and steps (rows, step 0 the initialisation)."""
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


def shape_tasks(model: RecurrentKMeans, shape: tuple[int, int], tasks: int, n: int, init: str, seed: int,
                index: int) -> TaskBatch:
    from circuits.training.general_tasks import general_tasks

    return general_tasks(tasks, n, model.config.d, model.config.k, seed, TEST, index, shape=shape, init=init)


def evaluate_shapes(model: RecurrentKMeans, shapes=DEFAULT_SHAPES, tasks: int = 32, n: int = 256, steps: int = 20,
                    init: str = "random", seed: int = 0, chunk: int = 16, with_optimum: bool = True) -> dict:
    """Per shape and over all shapes (see the module docstring); shape ``i`` is batch ``i`` of the test stream."""
    per_shape, all_model, all_lloyd, all_opt = [], [], [], []
    for i, (d, k) in enumerate(shapes):
        batch = shape_tasks(model, (d, k), tasks, n, init, seed, i)
        traj = trajectories(model, batch.X, batch.C0, steps, chunk)
        ev = compare(batch.X, batch.components, traj, {"kind": "general tasks", "count": tasks, "n": n, "d": d,
                                                        "k": k, "family": "general", "init": init, "steps": steps})
        om, ol = per_task(batch.X, traj)
        opt = np.array([sklearn_optimum(x, k, seed) for x in batch.X]) if with_optimum else None
        per_shape.append({**ev.to_dict(), "anytime": anytime_summary(om, ol, opt)})
        all_model.append(om)
        all_lloyd.append(ol)
        all_opt.append(opt)
    optimum = np.concatenate(all_opt) if with_optimum else None
    overall = anytime_summary(np.concatenate(all_model, axis=1), np.concatenate(all_lloyd, axis=1), optimum)
    return {"init": init, "n": n, "steps": steps, "tasks_per_shape": tasks, "seed": seed,
            "shapes": [list(s) for s in shapes], "per_shape": per_shape, "overall": overall}


def evaluate_real(model: RecurrentKMeans, name: str, inits: int = 10, steps: int = 20, init: str = "random",
                  seed: int = 0, chunk: int = 2) -> dict:
    """Dataset ``name`` in raw units at its true k, from ``inits`` initialisations (seeds ``seed..``)."""
    from analysis.data import load_dataset
    from circuits.initialisation import initial_centroids

    ds = load_dataset(name)
    X, y = np.asarray(ds.X, dtype=np.float64), np.asarray(ds.y)
    k = int(len(np.unique(y)))
    C0 = np.stack([initial_centroids(X, k, init, seed + i) for i in range(inits)])
    Xb = np.broadcast_to(X, (inits, *X.shape)).copy()
    traj = trajectories(model, Xb, C0, steps, chunk)
    ev = compare(Xb, np.broadcast_to(y, (inits, len(y))), traj,
                 {"kind": "dataset", "name": name, "n": X.shape[0], "d": X.shape[1], "k": k, "classes": k,
                  "prepared": "raw units", "init": init, "inits": inits, "steps": steps})
    om, ol = per_task(Xb, traj)
    opt = np.full(inits, sklearn_optimum(X, k, seed))
    return {**ev.to_dict(), "anytime": anytime_summary(om, ol, opt)}
