"""A trained recurrent model (:class:`~circuits.training.model.RecurrentKMeans`) as a trajectory model.

:func:`observe_chunks` is the one observed forward pass: the model runs ``chunk`` tasks at a time (memory), and
after every step the centroids are read from the residual's ``C`` subspace and decoded to the tasks' units, and
each *probe* reduces the step to one number per chunk (a mean over the chunk's tasks and points); chunks are
joined with weights by size (:func:`join_chunks`). The evaluation's probe is :func:`readout_agreement`; the drift
analysis adds its own (:mod:`analysis.drift.behaviour`). :class:`RecurrentTrajectory` is the adapter that gives
such a model the trajectory protocol (:class:`analysis.evaluation.protocol.TrajectoryModel`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from circuits import reference
from circuits.encoding import EncodedBatch
from circuits.training.encoding import unit_to_task
from circuits.training.model import RecurrentKMeans


@dataclass(frozen=True)
class StepView:
    """One step of one chunk: the residual after the step, its encoding, and the decoded centroids."""

    model: RecurrentKMeans
    enc: EncodedBatch
    resid: torch.Tensor
    X: np.ndarray
    C0: np.ndarray
    #: ``[chunk, k, d]``, in the tasks' units (float64).
    centroids: np.ndarray

    def points(self, subspace: str) -> torch.Tensor:
        """The point tokens' coordinates in ``subspace`` (``[chunk, n, width]``)."""
        return self.resid[:, self.enc.sequence.points, self.model.layout[subspace]]


#: A step of a chunk reduced to one number, its mean over the chunk's tasks.
Probe = Callable[[StepView], float]


def readout_agreement(view: StepView) -> float:
    """Fraction of points whose ``Y`` readout (argmax) is their nearest centroid (:func:`circuits.reference.assign`).
    ``Y`` is the capacity's ``K`` wide; a general model's ``k`` tokens use its first ``k`` columns."""
    Y = view.points("Y")[..., : view.C0.shape[1]].double().cpu().numpy()
    nearest = np.stack([reference.assign(x, c) for x, c in zip(view.X, view.centroids)])
    return float((Y.argmax(-1) == nearest).mean())


def one_chunk(model: RecurrentKMeans, X: np.ndarray, C0: np.ndarray, steps: int, probes: dict[str, Probe]
              ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """One forward pass over a few tasks: the centroids after steps ``0..steps`` and every probe per step."""
    cents: list[np.ndarray] = []
    values: dict[str, list[float]] = {name: [] for name in probes}

    def observe(t: int, resid: torch.Tensor) -> None:
        C = unit_to_task(resid[:, enc.sequence.centroids, model.layout["C"]], enc).double().cpu().numpy()
        cents.append(C)
        view = StepView(model, enc, resid, X, C0, C)
        for name, probe in probes.items():
            values[name].append(probe(view))

    with torch.no_grad():
        enc = model.encode(X, C0)
        model.run(enc.resid, steps, X.shape[1], observe=observe)
    return np.stack(cents), {name: np.array(v) for name, v in values.items()}


def weighted_mean(means: list[np.ndarray], sizes: list[int]) -> np.ndarray:
    """Per-step means of chunks joined into the mean over all their tasks (each weighted by its size)."""
    return np.sum([a * size for a, size in zip(means, sizes)], axis=0) / sum(sizes)


def join_chunks(chunks: list[tuple[np.ndarray, np.ndarray]], sizes: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """The chunks' centroids side by side, and their per-step means weighted by chunk size."""
    return np.concatenate([c for c, _ in chunks], axis=1), weighted_mean([a for _, a in chunks], sizes)


def observe_chunks(model: RecurrentKMeans, X: np.ndarray, C0: np.ndarray, steps: int, probes: dict[str, Probe],
                   chunk: int) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """:func:`one_chunk` over all tasks, ``chunk`` at a time: centroids ``[steps + 1, batch, k, d]`` and per probe
    its mean per step over all tasks."""
    starts = range(0, X.shape[0], chunk)
    parts = [one_chunk(model, X[s : s + chunk], C0[s : s + chunk], steps, probes) for s in starts]
    sizes = [len(X[s : s + chunk]) for s in starts]
    cents = np.concatenate([c for c, _ in parts], axis=1)
    return cents, {name: weighted_mean([v[name] for _, v in parts], sizes) for name in probes}


def chunk_trajectory(model: RecurrentKMeans, x: np.ndarray, c0: np.ndarray, steps: int) -> tuple[np.ndarray, np.ndarray]:
    """One forward pass over a few tasks: the model's centroids after steps ``0..steps`` and, per step, the
    fraction of points whose ``Y`` readout equals their nearest centroid."""
    cents, values = one_chunk(model, x, c0, steps, {"agreement": readout_agreement})
    return cents, values["agreement"]


@dataclass
class RecurrentTrajectory:
    """A trained recurrent model under the trajectory protocol, run ``chunk`` tasks at a time."""

    model: RecurrentKMeans
    chunk: int = 16

    @property
    def config(self):
        return self.model.config

    def trajectory(self, X: np.ndarray, C0: np.ndarray, steps: int) -> tuple[np.ndarray, np.ndarray]:
        cents, values = observe_chunks(self.model, X, C0, steps, {"agreement": readout_agreement}, self.chunk)
        return cents, values["agreement"]
