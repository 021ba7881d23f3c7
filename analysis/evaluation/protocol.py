"""The trajectory protocol: what the evaluation asks of a model, and the one adapter for a trained checkpoint.

A model under evaluation is anything that, given a batch of problems ``X`` and initial centroids ``C0``, returns
its centroids after every step ``0..steps`` (:class:`TrajectoryModel`); objectives and labels follow from the
centroids (:mod:`analysis.evaluation.metrics`). Every construction (:class:`analysis.constructions.common.ConstructionModel`,
``ConstructionSpec.model()``) implements the protocol itself; a trained :class:`~circuits.training.model.RecurrentKMeans` is adapted by
:class:`~analysis.evaluation.recurrent.RecurrentTrajectory` (:func:`as_trajectory_model`), which runs it in chunks
of tasks to bound memory. A later model implements ``config`` (``d``, ``k``) and ``trajectory`` and is evaluated
unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np
from jaxtyping import Float

from circuits import reference


class Capacity(Protocol):
    """The shapes a model runs: points of ``d`` coordinates, ``k`` centroids (a general model: at most these)."""

    d: int
    k: int


@runtime_checkable
class TrajectoryModel(Protocol):
    """Given ``X`` ``[batch, n, d]``, ``C0`` ``[batch, k, d]`` and ``steps``: per step the model's centroids.

    ``trajectory`` returns ``(centroids, agreement)``: the centroids after steps ``0..steps`` in the tasks' own
    units, ``[steps + 1, batch, k, d]``, and per step the fraction of points (over the whole batch) whose model-side
    labelling agrees with the labelling its centroids imply: a trained model's ``Y`` readout against the nearest
    centroid, a construction's run against its numpy reference (1.0 for a model with no second labelling)."""

    config: Capacity

    def trajectory(self, X: Float[np.ndarray, "batch n d"], C0: Float[np.ndarray, "batch k d"], steps: int
                   ) -> tuple[Float[np.ndarray, "T_plus_1 batch k d"], Float[np.ndarray, " T_plus_1"]]: ...


@dataclass
class Trajectories:
    """Centroids of the model and of Lloyd's after every step ``0..T``, per task, in the task's units."""

    model: Float[np.ndarray, "T_plus_1 batch k d"]
    lloyd: Float[np.ndarray, "T_plus_1 batch k d"]
    readout_agreement: Float[np.ndarray, " T_plus_1"]


def as_trajectory_model(model, chunk: int = 16) -> TrajectoryModel:
    """``model`` itself where it implements :class:`TrajectoryModel`; a trained recurrent model adapted, run
    ``chunk`` tasks at a time (:class:`~analysis.evaluation.recurrent.RecurrentTrajectory`)."""
    if isinstance(model, TrajectoryModel):
        return model
    from analysis.evaluation.recurrent import RecurrentTrajectory
    from circuits.training.model import RecurrentKMeans

    if isinstance(model, RecurrentKMeans):
        return RecurrentTrajectory(model, chunk)
    raise TypeError(f"{type(model).__name__} has no trajectory(X, C0, steps) and is not a RecurrentKMeans")


def lloyd_trajectory(X: Float[np.ndarray, "batch n d"], C0: Float[np.ndarray, "batch k d"], steps: int
                     ) -> Float[np.ndarray, "T_plus_1 batch k d"]:
    """Lloyd's centroids (:func:`circuits.reference.lloyd`) after every iteration ``0..steps``, per task."""
    return np.stack([reference.lloyd(x, c, steps).centroids for x, c in zip(X, C0)], axis=1)


def trajectories(model, X: np.ndarray, C0: np.ndarray, steps: int, chunk: int = 16) -> Trajectories:
    """The model's trajectory (adapted by :func:`as_trajectory_model`) and Lloyd's, from the same ``C0``."""
    cm, agree = as_trajectory_model(model, chunk).trajectory(X, C0, steps)
    return Trajectories(cm, lloyd_trajectory(X, C0, steps), agree)
