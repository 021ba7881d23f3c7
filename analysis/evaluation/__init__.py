"""How good is a model at k-means? Its objective against Lloyd's, step by step, from the same initial centroids.

On held-out random tasks (the test streams of :mod:`circuits.training.tasks` and
:mod:`circuits.training.general_tasks`, never seen in training or validation) the model is applied for ``1..T``
steps and Lloyd's algorithm (:mod:`circuits.reference`) is run for as many iterations from the same initial
centroids. Per step both mean objectives, the per-task ratio model / Lloyd's, how often the model is better or
worse, and ARI / NMI of both clusterings against the components that generated the points; on real data the same
from several initialisations against the true classes.

==========================================  =========================================================================
:mod:`~analysis.evaluation.protocol`        what a model must provide (:class:`TrajectoryModel`: given ``X``, ``C0``
                                            and ``steps``, its centroids after every step), Lloyd's trajectory
:mod:`~analysis.evaluation.recurrent`       a trained :class:`~circuits.training.model.RecurrentKMeans` adapted to
                                            the protocol, and the observed forward pass the drift analysis shares
:mod:`~analysis.evaluation.metrics`         objectives, labels, ARI / NMI, merged centroids, anytime measures
:mod:`~analysis.evaluation.comparison`      the per-step record of one batch of tasks (:func:`compare`)
:mod:`~analysis.evaluation.cells`           the held-out task grid as cells of work, and their results gathered
:mod:`~analysis.evaluation.real`            real datasets, evaluated once (:func:`evaluate_real_data`)
:mod:`~analysis.evaluation.checkpoint`      ``cluster --checkpoint``: one problem, with the export parity check
                                            (:mod:`analysis.verify.export`)
==========================================  =========================================================================
"""

from analysis.evaluation.cells import (
    DEFAULT_SHAPES, ShapeCell, ShapeGrid, ShapeResult, TaskChunk, evaluate_grid, evaluate_tasks, evaluation_cell,
    general_cell, shape_tasks, shapes_evaluation, task_chunks, tasks_evaluation,
)
from analysis.evaluation.comparison import StepRecord, TaskEvaluation, compare
from analysis.evaluation.metrics import (
    REL_TOL, agreement_scores, anytime_summary, mean_adjusted_rand, nearest_labels, objectives, sklearn_optimum,
)
from analysis.evaluation.protocol import Trajectories, TrajectoryModel, as_trajectory_model, lloyd_trajectory, trajectories
from analysis.evaluation.real import DEFAULT_DATASETS, REAL_DATASETS, DatasetRun, dataset_points, evaluate_real_data

__all__ = [
    "DEFAULT_DATASETS", "DEFAULT_SHAPES", "REAL_DATASETS", "REL_TOL", "DatasetRun", "ShapeCell", "ShapeGrid",
    "ShapeResult", "StepRecord", "TaskChunk", "TaskEvaluation", "Trajectories", "TrajectoryModel", "agreement_scores",
    "anytime_summary", "as_trajectory_model", "compare", "dataset_points", "evaluate_grid", "evaluate_real_data",
    "evaluate_tasks", "evaluation_cell", "general_cell", "lloyd_trajectory", "mean_adjusted_rand", "nearest_labels",
    "objectives", "shape_tasks", "shapes_evaluation", "sklearn_optimum", "task_chunks", "tasks_evaluation",
    "trajectories",
]
