"""The drift analysis assembled: :func:`analyse` runs the measurements in stages (:data:`STAGES`) on held-out tasks
and returns one :class:`~analysis.drift.record.DriftAnalysis`, summarised in plain words
(:func:`analysis.drift.summary.summarise`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from analysis.drift.behaviour import ablations, behaviour, stiffness_sweep
from analysis.drift.patterns import attention_patterns
from analysis.drift.record import DriftAnalysis
from analysis.drift.summary import summarise
from analysis.drift.weights import compare_circuit, compare_mlp
from analysis.evaluation.metrics import objectives
from analysis.evaluation.protocol import lloyd_trajectory
from circuits.blocks import ASSIGN, UPDATE
from circuits.training.construction import EXACT, InitSharpness
from circuits.training.general_tasks import general_tasks
from circuits.training.model import ModelConfig, RecurrentKMeans
from circuits.training.tasks import TEST, TaskBatch, task_stream

#: The stages of :func:`analyse`, in order, as its ``stage`` callback names them (the last three are optional).
STAGES = ("weights", "behaviour", "ablations", "stiffness sweep", "attention patterns")
#: The construction's assignment stiffnesses swept for a fixed-shape model, and the factors of a general model's
#: initial stiffness swept for it.
FIXED_BETAS = (2, 3, 4, 5, 6, 8, 12, 20, 50, 200)
GENERAL_FACTORS = (0.125, 0.25, 0.5, 1.0, 2.0, 4.0, 16.0)


def stages_of(with_ablations: bool = True, with_patterns: bool = True) -> list[str]:
    """The stages :func:`analyse` runs with these options."""
    skipped = ({"ablations", "stiffness sweep"} if not with_ablations else set()) | (
        {"attention patterns"} if not with_patterns else set())
    return [s for s in STAGES if s not in skipped]


def construction_of(config: dict, dtype: torch.dtype, sharpness: InitSharpness | None = None) -> RecurrentKMeans:
    """The construction a run started from (its initial sharpness), or at ``sharpness``."""
    mc = dict(config["model"])
    mc["init"] = "exact"
    if sharpness is not None:
        mc["sharpness"] = sharpness.to_dict()
    return RecurrentKMeans(ModelConfig(**mc), dtype=dtype)


@dataclass(frozen=True)
class HeldOut:
    """The held-out tasks the behaviour is measured on, and the stiffnesses the construction is swept over."""

    batch: TaskBatch
    betas: tuple[float, ...]


def held_out(model: RecurrentKMeans, tasks: int, n: int, seed: int, shape: tuple[int, int] | None) -> HeldOut:
    """A fixed-shape model's test stream; a general model's general-family tasks at ``shape`` (default: its
    capacity), with a sweep around its initial stiffness."""
    cfg = model.config
    if not cfg.general:
        return HeldOut(task_stream(tasks, n, cfg.d, cfg.k, tasks, seed, TEST), FIXED_BETAS)
    batch = general_tasks(tasks, n, cfg.d, cfg.k, seed, TEST, 0, shape=shape or (cfg.d, cfg.k), init="random")
    a0 = cfg.init_sharpness.beta
    return HeldOut(batch, tuple(sorted({a0 * f for f in GENERAL_FACTORS})))


@dataclass(frozen=True)
class DriftOptions:
    """What :func:`analyse` measures: ``tasks`` held-out tasks of ``n`` points (default: the run's), ``steps`` steps,
    test stream ``seed``; attention patterns at ``pattern_steps``; ablations and the stiffness sweep; a general
    model's ``shape`` ``(d, k)`` (default: its capacity)."""

    tasks: int = 16
    n: int | None = None
    steps: int = 20
    seed: int = 0
    pattern_steps: tuple[int, ...] = (0, 1, 2, 5)
    with_patterns: bool = True
    with_ablations: bool = True
    shape: tuple[int, int] | None = None


def analyse(model: RecurrentKMeans, config: dict, log: list[dict] | None = None,
            stage: Callable[[str], None] | None = None, options: DriftOptions | None = None, **fields) -> DriftAnalysis:
    """Everything :func:`~analysis.report.drift.drift_report` draws, as numbers (see :mod:`analysis.drift`), with
    ``options`` or their fields as keywords (``analyse(model, config, log, tasks=4, steps=8)``). ``stage(name)`` is
    called as each of :func:`stages_of` begins (for progress reports).

    A general model (any ``d <= D``, ``k <= K``) is measured on held-out tasks of the general family at ``shape``
    ``(d, k)`` (default: the capacity); its weights are compared over the whole capacity."""
    o = options or DriftOptions(**fields)
    stage = stage or (lambda name: None)
    stage("weights")
    construction = construction_of(config, model.dtype)
    exact = construction_of(config, torch.float64, EXACT)
    circuits = [compare_circuit(model, construction, kind, which) for kind in (UPDATE, ASSIGN) for which in ("QK", "OV")]
    mlps = compare_mlp(model, construction, UPDATE) + compare_mlp(model, construction, ASSIGN)
    knobs = {"construction": construction.knobs(), "trained": model.knobs()}
    stage("behaviour")
    tasks = held_out(model, o.tasks, o.n or config["training"]["n"], o.seed, o.shape)
    batch, steps = tasks.batch, o.steps
    beh = behaviour({"trained": model, "construction": construction}, batch, steps)
    lloyd_final = np.array(objectives(batch.X, lloyd_trajectory(batch.X, batch.C0, steps)[-1][None])[0])
    abl, sweep = [], []
    if o.with_ablations:
        stage("ablations")
        abl = ablations(model, construction, batch, steps, lloyd_final)
        stage("stiffness sweep")
        # The construction at its own stiffness is one point of the sweep: measured already, on the same tasks.
        at_init = (beh.ratio["construction"][-1], beh.spread["ratio"]["construction"][-1])
        sweep = stiffness_sweep(model.config, batch, steps, lloyd_final, betas=tasks.betas, dtype=model.dtype,
                                at_init=at_init)
    pats = None
    if o.with_patterns:
        stage("attention patterns")
        one = batch.subset(slice(0, 1))
        pats = attention_patterns({"exact (Lloyd's)": exact, "trained": model}, one.X[0], one.C0[0], one.components[0],
                                  [t for t in o.pattern_steps if t <= steps])
    result = DriftAnalysis(config, model.layout, circuits, mlps, knobs, beh, abl, sweep, pats, list(log or []))
    result.summary = summarise(result)
    return result
