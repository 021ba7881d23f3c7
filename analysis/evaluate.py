"""Moved to :mod:`analysis.evaluation` (trajectory protocol, metrics, task cells, real data) and, for the export
check of ``cluster --checkpoint``, :mod:`analysis.verify.export`; kept for one release.

Every name this module held is re-exported from its new home; :func:`evaluate_dataset` and :func:`model_trajectory`
keep their old signatures on top of :func:`analysis.evaluation.evaluate_real_data` and
:func:`analysis.evaluation.as_trajectory_model`.
"""

from __future__ import annotations

import numpy as np

from analysis.evaluation.cells import (
    TaskChunk, evaluate_tasks, evaluation_cell, task_chunks, tasks_evaluation,
)
from analysis.evaluation.checkpoint import cluster_with_checkpoint
from analysis.evaluation.comparison import StepRecord, TaskEvaluation, compare
from analysis.evaluation.metrics import (
    REL_TOL, adjusted_rand, agreement_scores, contingency, merged_pairs, nearest_labels, normalized_mutual_info,
    objectives,
)
from analysis.evaluation.protocol import (
    Trajectories, TrajectoryModel, as_trajectory_model, lloyd_trajectory, trajectories,
)
from analysis.evaluation.real import DEFAULT_DATASETS, DatasetRun, dataset_points, evaluate_real_data
from analysis.evaluation.recurrent import chunk_trajectory, join_chunks
from analysis.verify.export import export_tolerance, run_export
from circuits.training.model import RecurrentKMeans

#: What the evaluation runs: a trained model, or anything with the trajectory protocol.
Model = RecurrentKMeans | TrajectoryModel

__all__ = [
    "DEFAULT_DATASETS", "REL_TOL", "DatasetRun", "Model", "StepRecord", "TaskChunk", "TaskEvaluation", "Trajectories",
    "adjusted_rand", "agreement_scores", "chunk_trajectory", "cluster_with_checkpoint", "compare", "contingency",
    "dataset_points", "evaluate_dataset", "evaluate_tasks", "evaluation_cell", "export_tolerance", "join_chunks",
    "lloyd_trajectory", "merged_pairs", "model_trajectory", "nearest_labels", "normalized_mutual_info", "objectives",
    "run_export", "task_chunks", "tasks_evaluation", "trajectories",
]


def model_trajectory(model: Model, X: np.ndarray, C0: np.ndarray, steps: int, chunk: int = 16
                     ) -> tuple[np.ndarray, np.ndarray]:
    """The model's centroids after every step and its readout agreement (the trajectory protocol)."""
    return as_trajectory_model(model, chunk).trajectory(X, C0, steps)


def evaluate_dataset(model: RecurrentKMeans, name: str, steps: int = 20, inits: int = 10, init: str = "random",
                     seed: int = 0, chunk: int = 4) -> dict:
    """Model vs Lloyd's on dataset ``name`` fitted to the model's shape, from ``inits`` initialisations."""
    return evaluate_real_data(model, DatasetRun(name, steps, inits, init, seed, chunk), raw=False)
