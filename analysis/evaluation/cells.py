"""The held-out task grid as cells of work (:mod:`analysis.engine` runs them, serially or on Ray), and their
results gathered into one evaluation.

A fixed-shape checkpoint is evaluated on chunks of the test stream of :mod:`circuits.training.tasks`
(:class:`TaskChunk`, gathered by :func:`tasks_evaluation`); a general model (any ``d <= D``, ``k <= K``) on held-out
tasks of the general family at several shapes ``(d, k)`` (:class:`ShapeGrid`, one :class:`ShapeCell` per shape,
gathered by :func:`shapes_evaluation`: per shape the per-step comparison and the anytime measures, and the anytime
measures over all shapes). Datasets are cells too (:class:`~analysis.evaluation.real.DatasetRun`). A cell that
failed (``None`` among the results) is left out and the rest are evaluated as if they had been the only ones.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from analysis.evaluation.comparison import TaskEvaluation, compare
from analysis.evaluation.metrics import anytime_summary, per_task, sklearn_optimum
from analysis.evaluation.protocol import Trajectories, lloyd_trajectory, trajectories
from analysis.evaluation.real import DatasetRun, evaluate_real_data
from analysis.evaluation.recurrent import chunk_trajectory, join_chunks
from circuits.training.model import RecurrentKMeans
from circuits.training.tasks import TEST, TaskBatch

#: Shapes ``(d, k)`` evaluated by default: from 2-D to the capacity, few to many clusters.
DEFAULT_SHAPES = ((2, 3), (4, 8), (8, 5), (16, 10), (32, 16), (64, 8))


# ----------------------------------------------------------------------------------------------- a fixed shape
@dataclass(frozen=True)
class TaskChunk:
    """One evaluation cell: held-out tasks ``start..start+len(X)-1``, both trajectories."""

    start: int
    X: np.ndarray
    C0: np.ndarray
    steps: int

    def __str__(self) -> str:
        return f"held-out tasks {self.start}-{self.start + len(self.X) - 1}"


def task_chunks(tasks: TaskBatch, steps: int, chunk: int) -> list[TaskChunk]:
    return [TaskChunk(s, tasks.X[s : s + chunk], tasks.C0[s : s + chunk], steps) for s in range(0, tasks.batch, chunk)]


def evaluation_cell(model: RecurrentKMeans, cell: TaskChunk | DatasetRun):
    """A fixed-shape checkpoint's cell: (model centroids, readout agreement, Lloyd's centroids) of a chunk, or a
    dataset's dict (fitted to the model's shape, :func:`~analysis.evaluation.real.evaluate_real_data`). A chunk is
    one forward pass (:func:`~analysis.evaluation.recurrent.chunk_trajectory`); :func:`tasks_evaluation` joins the
    chunks' readout agreements, each weighted by its size, as the recurrent adapter does within a cell."""
    if isinstance(cell, DatasetRun):
        return evaluate_real_data(model, cell, raw=False)
    cents, agree = chunk_trajectory(model, cell.X, cell.C0, cell.steps)
    return cents, agree, lloyd_trajectory(cell.X, cell.C0, cell.steps)


def tasks_evaluation(tasks: TaskBatch, steps: int, cells: list[TaskChunk], results: list) -> TaskEvaluation:
    """The comparison over the chunks that finished (``None`` in ``results``: a chunk that failed, left out)."""
    done = [(cell, r) for cell, r in zip(cells, results) if r is not None]
    index = np.concatenate([np.arange(c.start, c.start + len(c.X)) for c, _ in done])
    cm, agree = join_chunks([(r[0], r[1]) for _, r in done], [len(c.X) for c, _ in done])
    traj = Trajectories(cm, np.concatenate([r[2] for _, r in done], axis=1), agree)
    desc = {"kind": "tasks", "count": len(index), "n": tasks.n, "d": tasks.d, "k": tasks.k, "family": tasks.family,
            "init": tasks.init, "steps": steps}
    return compare(tasks.X[index], tasks.components[index], traj, desc)


def evaluate_tasks(model: RecurrentKMeans, tasks: TaskBatch, steps: int = 20, chunk: int = 16) -> TaskEvaluation:
    """A fixed-shape trained model against Lloyd's on ``tasks``, ``chunk`` tasks per forward pass."""
    cells = task_chunks(tasks, steps, chunk)
    return tasks_evaluation(tasks, steps, cells, [evaluation_cell(model, cell) for cell in cells])


# ----------------------------------------------------------------------------------------------- general models
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


@dataclass(frozen=True)
class ShapeGrid:
    """The held-out task grid of a general model: ``tasks`` tasks of ``n`` points at each shape, ``steps`` steps
    from ``init`` centroids; ``with_optimum`` also runs scikit-learn's ``KMeans(n_init=10)`` on every task."""

    shapes: Sequence[tuple[int, int]] = DEFAULT_SHAPES
    tasks: int = 32
    n: int = 256
    steps: int = 20
    init: str = "random"
    seed: int = 0
    chunk: int = 16
    with_optimum: bool = True

    def cells(self) -> list[ShapeCell]:
        """Shape ``i`` is batch ``i`` of the test stream."""
        return [ShapeCell(i, tuple(shape), self.tasks, self.n, self.steps, self.init, self.seed, self.chunk,
                          self.with_optimum) for i, shape in enumerate(self.shapes)]


@dataclass
class ShapeResult:
    """A shape cell's statistics, and its per-task objectives for the summary over all shapes."""

    summary: dict
    obj_model: np.ndarray  # [T + 1, tasks]
    obj_lloyd: np.ndarray
    optimum: np.ndarray | None


def shape_tasks(model, shape: tuple[int, int], tasks: int, n: int, init: str, seed: int, index: int) -> TaskBatch:
    """Batch ``index`` of the general family's test stream at ``shape``, drawn for ``model``'s capacity."""
    from circuits.training.general_tasks import general_tasks

    return general_tasks(tasks, n, model.config.d, model.config.k, seed, TEST, index, shape=shape, init=init)


def general_cell(model, cell: ShapeCell | DatasetRun) -> ShapeResult | dict:
    """A general model's cell: a :class:`ShapeResult`, or a dataset's dict (raw units at the true k,
    :func:`~analysis.evaluation.real.evaluate_real_data`)."""
    if isinstance(cell, DatasetRun):
        return evaluate_real_data(model, cell, raw=True)
    d, k = cell.shape
    batch = shape_tasks(model, cell.shape, cell.tasks, cell.n, cell.init, cell.seed, cell.index)
    traj = trajectories(model, batch.X, batch.C0, cell.steps, cell.chunk)
    ev = compare(batch.X, batch.components, traj, {"kind": "general tasks", "count": cell.tasks, "n": cell.n, "d": d,
                                                    "k": k, "family": "general", "init": cell.init, "steps": cell.steps})
    om, ol = per_task(batch.X, traj)
    opt = np.array([sklearn_optimum(x, k, cell.seed) for x in batch.X]) if cell.with_optimum else None
    return ShapeResult({**ev.to_dict(), "anytime": anytime_summary(om, ol, opt)}, om, ol, opt)


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


def evaluate_grid(model, grid: ShapeGrid = ShapeGrid()) -> dict:
    """A general model (any :class:`~analysis.evaluation.protocol.TrajectoryModel`, or a general checkpoint) per
    shape of ``grid`` and over all shapes."""
    cells = grid.cells()
    return shapes_evaluation(cells, [general_cell(model, cell) for cell in cells])
