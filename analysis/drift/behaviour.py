"""What training changed in the behaviour: per step on held-out tasks, a trained model, the construction it
started from and Lloyd's; ablations of one weight group at a time; the construction swept over its stiffness.

The models run through the evaluation's observed forward pass (:func:`analysis.evaluation.recurrent.one_chunk`)
with two probes of their own, which keep one value per task: how soft the assignments are
(:func:`assignment_entropy`) and the stiffness the model applies (:func:`applied_stiffness`). Objectives and ARI are the evaluation's (:mod:`analysis.evaluation.metrics`).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

from analysis.evaluation.metrics import adjusted_rand, contingency, nearest_labels, objectives
from analysis.evaluation.protocol import lloyd_trajectory
from analysis.evaluation.recurrent import StepView, observe_chunks, one_chunk
from circuits.blocks import ASSIGN, UPDATE
from circuits.training.construction import InitSharpness
from circuits.training.model import ModelConfig, RecurrentKMeans
from circuits.training.tasks import TaskBatch


#: The per-step quantities of :class:`Behaviour`, each a mean over tasks with its spread (standard deviation).
QUANTITIES = ("objective", "ratio", "entropy", "ari", "stiffness")


@dataclass
class Behaviour:
    """Per step ``0..T`` on held-out tasks: means over tasks, and in ``spread[quantity][model]`` the standard
    deviation over the same tasks (a mean is never compared without it)."""

    steps: int
    tasks: int
    n: int
    objective: dict[str, list[float]]
    ratio: dict[str, list[float]]
    entropy: dict[str, list[float]]
    ari: dict[str, list[float]]
    stiffness: dict[str, list[float]]
    spread: dict[str, dict[str, list[float]]] = field(default_factory=lambda: {q: {} for q in QUANTITIES})

    def put(self, quantity: str, name: str, per_task: np.ndarray) -> None:
        """Record ``per_task`` (``[steps + 1, tasks]``) of ``quantity`` for ``name`` as its mean and spread."""
        per_task = np.asarray(per_task, dtype=np.float64)
        getattr(self, quantity)[name] = per_task.mean(1).tolist()
        self.spread[quantity][name] = per_task.std(1).tolist()


def assignment_entropy(view: StepView) -> np.ndarray:
    """Per task, the mean entropy (nats) of a point's assignment ``Y``, normalised to sum 1 (a general model: zero
    beyond k)."""
    Y = view.points("Y").double().clamp_min(0)
    p = Y / Y.sum(-1, keepdim=True).clamp_min(1e-30)
    return (-(p * torch.log(p.clamp_min(1e-30))).sum(-1).mean(-1)).cpu().numpy()


def applied_stiffness(a: float) -> Callable[[StepView], np.ndarray]:
    """Per task, the assignment stiffness applied: ``a`` (the assign head's stiffness knob) times the points'
    mean ``BETA``."""
    return lambda view: view.points("BETA").double().mean(dim=(-2, -1)).cpu().numpy() * a


def run_observed(model: RecurrentKMeans, tasks: TaskBatch, steps: int, chunk: int = 8
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Centroids (task units) ``[steps + 1, tasks, k, d]``, and per step and task the mean assignment entropy and
    the mean applied stiffness (``[steps + 1, tasks]``): the evaluation's forward pass, ``chunk`` tasks at a time,
    with probes that keep one value per task (so that each mean has its spread)."""
    probes = {"entropy": assignment_entropy, "stiffness": applied_stiffness(model.knobs()["assign_stiffness"])}
    parts = [one_chunk(model, tasks.X[s:s + chunk], tasks.C0[s:s + chunk], steps, probes)
             for s in range(0, tasks.batch, chunk)]
    cents = np.concatenate([c for c, _ in parts], axis=1)
    return cents, *(np.concatenate([v[name] for _, v in parts], axis=1) for name in probes)


def task_ari(X: np.ndarray, C: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """Per task, the ARI of the nearest-centroid labels against ``truth``."""
    return np.array([adjusted_rand(contingency(t, lab)) for t, lab in zip(truth, nearest_labels(X, C))])


def behaviour(models: dict[str, RecurrentKMeans], tasks: TaskBatch, steps: int) -> Behaviour:
    """Objective, ratio to Lloyd's, softness, ARI and stiffness per step of each model, and of Lloyd's."""
    lloyd = lloyd_trajectory(tasks.X, tasks.C0, steps)
    obj_lloyd = objectives(tasks.X, lloyd)
    out = Behaviour(steps, tasks.batch, tasks.n, {}, {}, {}, {}, {})
    out.put("objective", "Lloyd's", obj_lloyd)
    out.put("ari", "Lloyd's", np.array([task_ari(tasks.X, lloyd[t], tasks.components) for t in range(steps + 1)]))
    for name, model in models.items():
        cents, ent, beta = run_observed(model, tasks, steps)
        obj = objectives(tasks.X, cents)
        out.put("objective", name, obj)
        out.put("ratio", name, obj / obj_lloyd)
        out.put("entropy", name, ent)
        out.put("stiffness", name, beta)
        out.put("ari", name, np.array([task_ari(tasks.X, cents[t], tasks.components) for t in range(steps + 1)]))
    return out


def task_ratios(model: RecurrentKMeans, tasks: TaskBatch, steps: int, lloyd_obj: np.ndarray) -> np.ndarray:
    """Per task, the objective after ``steps`` over Lloyd's (``lloyd_obj``); no per-step probes, since only the
    end point is compared (the probes cost a fifth of a run)."""
    cents, _ = observe_chunks(model, tasks.X, tasks.C0, steps, {}, 8)
    return objectives(tasks.X, cents[-1][None])[0] / lloyd_obj


def mean_ratio(model: RecurrentKMeans, tasks: TaskBatch, steps: int, lloyd_obj: np.ndarray) -> float:
    return float(task_ratios(model, tasks, steps, lloyd_obj).mean())


ABLATION_GROUPS = {
    "update head QK": (UPDATE, ("W_Q", "W_K")),
    "update head OV": (UPDATE, ("W_V", "W_O")),
    "update MLP": (UPDATE, ("mlp_gate", "mlp_linear", "mlp_out")),
    "assign head QK": (ASSIGN, ("W_Q", "W_K")),
    "assign head OV": (ASSIGN, ("W_V", "W_O")),
    "assign MLP": (ASSIGN, ("mlp_gate", "mlp_linear", "mlp_out")),
}


def ablations(trained: RecurrentKMeans, construction: RecurrentKMeans, tasks: TaskBatch, steps: int,
              lloyd_obj: np.ndarray) -> list[dict]:
    """For each weight group: the ratio with that group reverted to the construction, and with only it trained."""
    rows = []
    for label, (kind, names) in ABLATION_GROUPS.items():
        reverted, only = copy.deepcopy(trained), copy.deepcopy(construction)
        with torch.no_grad():
            for name in names:
                getattr(reverted, f"{kind}_{name}").copy_(getattr(construction, f"{kind}_{name}"))
                getattr(only, f"{kind}_{name}").copy_(getattr(trained, f"{kind}_{name}"))
        r, o = (task_ratios(m, tasks, steps, lloyd_obj) for m in (reverted, only))
        rows.append({"group": label, "reverted": float(r.mean()), "reverted_std": float(r.std()),
                     "only_this_trained": float(o.mean()), "only_this_trained_std": float(o.std())})
    return rows


def stiffness_sweep(config: ModelConfig, tasks: TaskBatch, steps: int, lloyd_obj: np.ndarray,
                    betas: tuple[float, ...] = (2, 3, 4, 5, 6, 8, 12, 20, 50, 200),
                    dtype: torch.dtype = torch.float32, at_init: tuple[float, float] | None = None) -> list[dict]:
    """The construction (no training) at several assignment stiffnesses, the update stiffness kept. ``at_init``:
    the (mean, std) ratio already measured for the construction at its own initial stiffness on these tasks,
    used instead of running it again."""
    base = config.init_sharpness
    rows = []
    for beta in betas:
        if at_init is not None and float(beta) == base.beta:
            rows.append({"beta": float(beta), "beta_update": base.beta_update, "ratio": at_init[0],
                         "ratio_std": at_init[1]})
            continue
        sharp = InitSharpness(**{**base.to_dict(), "beta": float(beta)})
        model = RecurrentKMeans(ModelConfig(config.d, config.k, "exact", sharp.to_dict(), config.d_head, config.reembed,
                                            general=config.general), dtype=dtype)
        r = task_ratios(model, tasks, steps, lloyd_obj)
        rows.append({"beta": float(beta), "beta_update": base.beta_update, "ratio": float(r.mean()),
                     "ratio_std": float(r.std())})
    return rows
