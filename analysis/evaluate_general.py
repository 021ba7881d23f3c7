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

from dataclasses import dataclass

import numpy as np

from analysis.evaluate import REL_TOL, DatasetRun, Model, compare, objectives, trajectories
from circuits.training.tasks import TEST, TaskBatch

#: Shapes ``(d, k)`` evaluated by default: from 2-D to the capacity, few to many clusters.
DEFAULT_SHAPES = ((2, 3), (4, 8), (8, 5), (16, 10), (32, 16), (64, 8))
#: The real datasets at their true k (scikit-learn's bundled ones; blobs is synthetic and left out).
REAL_DATASETS = ("iris", "wine", "breast_cancer", "digits")


def sklearn_optimum(X: np.ndarray, k: int, seed: int = 0) -> float:
    """scikit-learn's best objective of ten k-means++ restarts (Lloyd's algorithm to convergence)."""
    from sklearn.cluster import KMeans
    from threadpoolctl import threadpool_limits

    # One OpenMP thread: scikit-learn's inertia sums in a thread-count-dependent order, and the same evaluation
    # must give the same bytes in this process and in a Ray worker.
    with threadpool_limits(1):
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


def shape_tasks(model: Model, shape: tuple[int, int], tasks: int, n: int, init: str, seed: int,
                index: int) -> TaskBatch:
    from circuits.training.general_tasks import general_tasks

    return general_tasks(tasks, n, model.config.d, model.config.k, seed, TEST, index, shape=shape, init=init)


# ----------------------------------------------------------------------------------------------- cells (analysis.engine)
@dataclass(frozen=True)
class ShapeCell:
    """One evaluation cell: the held-out tasks of one shape (batch ``index`` of the test stream)."""

    index: int
    shape: tuple[int, int]
    tasks: int
    n: int
    steps: int
    init: str
    seed: int
    chunk: int
    with_optimum: bool

    def __str__(self) -> str:
        return f"shape d={self.shape[0]}, k={self.shape[1]} ({self.tasks} {self.init}-init tasks)"


@dataclass
class ShapeResult:
    """A shape cell's statistics, and its per-task objectives for the summary over all shapes."""

    summary: dict
    obj_model: np.ndarray  # [T + 1, tasks]
    obj_lloyd: np.ndarray
    optimum: np.ndarray | None


def general_cell(model: Model, cell: ShapeCell | DatasetRun) -> ShapeResult | dict:
    """A cell's result: a :class:`ShapeResult`, or a dataset's dict (see :func:`evaluate_real`)."""
    if isinstance(cell, DatasetRun):
        return evaluate_real(model, cell.name, cell.inits, cell.steps, cell.init, cell.seed, cell.chunk)
    d, k = cell.shape
    batch = shape_tasks(model, cell.shape, cell.tasks, cell.n, cell.init, cell.seed, cell.index)
    traj = trajectories(model, batch.X, batch.C0, cell.steps, cell.chunk)
    ev = compare(batch.X, batch.components, traj, {"kind": "general tasks", "count": cell.tasks, "n": cell.n, "d": d,
                                                    "k": k, "family": "general", "init": cell.init, "steps": cell.steps})
    om, ol = per_task(batch.X, traj)
    opt = np.array([sklearn_optimum(x, k, cell.seed) for x in batch.X]) if cell.with_optimum else None
    return ShapeResult({**ev.to_dict(), "anytime": anytime_summary(om, ol, opt)}, om, ol, opt)


def shape_cells(shapes=DEFAULT_SHAPES, tasks: int = 32, n: int = 256, steps: int = 20, init: str = "random",
                seed: int = 0, chunk: int = 16, with_optimum: bool = True) -> list[ShapeCell]:
    return [ShapeCell(i, tuple(shape), tasks, n, steps, init, seed, chunk, with_optimum)
            for i, shape in enumerate(shapes)]


def shapes_evaluation(cells: list[ShapeCell], results: list[ShapeResult | None]) -> dict:
    """Per shape and over every shape that finished (``None`` in ``results``: a cell that failed, left out)."""
    done = [(cell, r) for cell, r in zip(cells, results) if r is not None]
    with_optimum = all(r.optimum is not None for _, r in done)
    overall = anytime_summary(np.concatenate([r.obj_model for _, r in done], axis=1),
                              np.concatenate([r.obj_lloyd for _, r in done], axis=1),
                              np.concatenate([r.optimum for _, r in done]) if with_optimum else None)
    first = cells[0]
    return {"init": first.init, "n": first.n, "steps": first.steps, "tasks_per_shape": first.tasks,
            "seed": first.seed, "shapes": [list(c.shape) for c, _ in done], "per_shape": [r.summary for _, r in done],
            "overall": overall}


def evaluate_shapes(model: Model, shapes=DEFAULT_SHAPES, tasks: int = 32, n: int = 256, steps: int = 20,
                    init: str = "random", seed: int = 0, chunk: int = 16, with_optimum: bool = True) -> dict:
    """Per shape and over all shapes (see the module docstring); shape ``i`` is batch ``i`` of the test stream."""
    cells = shape_cells(shapes, tasks, n, steps, init, seed, chunk, with_optimum)
    return shapes_evaluation(cells, [general_cell(model, cell) for cell in cells])


def evaluate_real(model: Model, name: str, inits: int = 10, steps: int = 20, init: str = "random",
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
