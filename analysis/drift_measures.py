"""The measurements behind the drift analysis (:mod:`analysis.drift`): a trained recurrent model next to the
construction it started from, in the named basis.

Weights: :func:`compare_circuit` (QK and OV as ``FactoredMatrix`` objects: cosine, relative Frobenius distance,
singular values, the change of every subspace block) and :func:`compare_mlp` (coefficients by unit role).
Behaviour on held-out tasks, step by step: :func:`behaviour`, :func:`ablations`, :func:`stiffness_sweep`, and the
attention patterns of one problem (:func:`attention_patterns`). :class:`DriftAnalysis` holds all of them; the
views (:mod:`analysis.views.drift`) and the report (:mod:`analysis.report.drift`) read it.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

import numpy as np
import torch

from analysis.evaluate import lloyd_trajectory, nearest_labels, objectives
from circuits import hook_names
from circuits.blocks import ASSIGN, UPDATE
from circuits.layout import ResidualLayout
from circuits.training.construction import InitSharpness
from circuits.training.model import ModelConfig, RecurrentKMeans, unit_to_task
from circuits.training.tasks import TaskBatch

BLOCK_NAMES = {UPDATE: "update (U)", ASSIGN: "assign (A)"}
KNOB_DOCS = {
    "assign_stiffness": ("assign head: XB.C weight / 2", "stiffness a of the assignment (times BETA)"),
    "assign_norm_weight": ("assign head: -(BETA.N weight)", "weight of |c|^2 in the score; equals a for a distance"),
    "assign_offdiag": ("assign head: off-diagonal / diagonal of XB.C", "0: Euclidean distance; >0: a learned metric"),
    "update_member_score": ("update head: ID_j.Y_j weight", "b: score of a member (times its responsibility)"),
    "update_member_offdiag": ("update head: off-diagonal / diagonal of ID.Y", "centroids scoring other clusters' points"),
    "update_self_score": ("update head: ID_j.ID_j weight", "b*rho: a centroid's score on itself (inertia)"),
    "update_distance_score": ("update head: C.X diagonal", "0: membership only; >0: centroids also attend near points"),
    "update_value_X": ("update head: X -> C_stage diagonal", "1: the new centroid is a mean of points"),
    "update_value_C": ("update head: C -> C_stage diagonal", "1: the own key contributes the old centroid"),
    "schedule_growth": ("update MLP: BETA <- g BETA + 1", "g = 0: constant stiffness; g > 0: a schedule"),
}


# ----------------------------------------------------------------------------------------------- weights
@dataclass
class CircuitComparison:
    """One circuit (QK or OV) of one block, trained next to the construction."""

    block: str
    which: str
    trained: np.ndarray
    construction: np.ndarray
    cosine: float
    rel_frobenius: float
    sv_trained: np.ndarray
    sv_construction: np.ndarray
    #: (row subspace, column subspace, |trained|, |construction|, |change|), largest change first.
    blocks: list[tuple[str, str, float, float, float]]


def factored(model: RecurrentKMeans, kind: str, which: str):
    """A head circuit as a TransformerLens ``FactoredMatrix`` (learned part, no structural channel)."""
    from transformer_lens import FactoredMatrix

    w = {name: t.detach().double() for name, t in model.head_weights(kind).items()}
    if which == "QK":
        return FactoredMatrix(w["W_Q"], w["W_K"].T)
    return FactoredMatrix(w["W_V"], w["W_O"])


def subspace_blocks(W: np.ndarray, layout: ResidualLayout) -> tuple[list[str], np.ndarray]:
    names = list(layout.names)
    out = np.array([[np.linalg.norm(W[layout[a], layout[b]]) for b in names] for a in names])
    return names, out


def compare_circuit(trained: RecurrentKMeans, construction: RecurrentKMeans, kind: str, which: str) -> CircuitComparison:
    ft, fc = factored(trained, kind, which), factored(construction, kind, which)
    T, C = ft.AB.numpy(), fc.AB.numpy()
    norm_t, norm_c = np.linalg.norm(T), np.linalg.norm(C)
    names, bt = subspace_blocks(T, trained.layout)
    _, bc = subspace_blocks(C, trained.layout)
    _, bd = subspace_blocks(T - C, trained.layout)
    rows = [(names[i], names[j], float(bt[i, j]), float(bc[i, j]), float(bd[i, j]))
            for i in range(len(names)) for j in range(len(names))]
    rows.sort(key=lambda r: -r[4])
    return CircuitComparison(
        block=kind, which=which, trained=T, construction=C,
        cosine=float((T * C).sum() / max(norm_t * norm_c, 1e-300)),
        rel_frobenius=float(np.linalg.norm(T - C) / max(norm_c, 1e-300)),
        sv_trained=ft.S.numpy(), sv_construction=fc.S.numpy(), blocks=rows,
    )


@dataclass
class MLPRole:
    """Units of one MLP that share a role: what their gate and linear input read and what they write."""

    block: str
    role: str
    units: int
    construction: float
    trained: float
    max_rel_change: float


def unit_roles(model: RecurrentKMeans, kind: str) -> tuple[list[str], np.ndarray]:
    """Per unit its role (``gate x linear -> output`` in subspace names) and its effective coefficient
    ``out * gate * linear`` (the unit's output for unit inputs; single-entry gates and inputs)."""
    L = model.layout
    idx = {name: getattr(model, f"{kind}_mlp_{name}_idx").cpu().numpy() for name in ("gate", "linear", "out")}
    act = {name: getattr(model, f"{kind}_mlp_{name}_active").cpu().numpy() for name in ("gate", "linear")}
    coeff = {name: model.weight(kind, f"mlp_{name}").detach().double().cpu().numpy() for name in ("gate", "linear", "out")}
    roles, eff = [], []
    for u in range(len(idx["out"])):
        def reads(name: str) -> str:
            dims = [int(idx[name][i, u]) for i in range(idx[name].shape[0]) if act[name][i, u]]
            return "+".join(sorted({L.subspace_of(dim)[0] for dim in dims}))
        roles.append(f"{reads('gate')} x {reads('linear')} -> {L.subspace_of(int(idx['out'][u]))[0]}")
        eff.append(coeff["out"][u] * coeff["gate"][0, u] * coeff["linear"][0, u])
    return roles, np.array(eff)


def compare_mlp(trained: RecurrentKMeans, construction: RecurrentKMeans, kind: str) -> list[MLPRole]:
    roles, eff_t = unit_roles(trained, kind)
    _, eff_c = unit_roles(construction, kind)
    out = []
    for role in dict.fromkeys(roles):
        sel = np.array([r == role for r in roles])
        c, t = eff_c[sel], eff_t[sel]
        rel = np.abs(t - c) / np.maximum(np.abs(c), 1e-12)
        out.append(MLPRole(kind, role, int(sel.sum()), float(c.mean()), float(t.mean()),
                           float(np.where(np.abs(c) > 1e-12, rel, np.abs(t - c)).max())))
    out.sort(key=lambda r: -r.max_rel_change)
    return out


# ----------------------------------------------------------------------------------------------- behaviour
@dataclass
class Behaviour:
    """Per step ``0..T`` on held-out tasks (means over tasks)."""

    steps: int
    tasks: int
    n: int
    objective: dict[str, list[float]]
    ratio: dict[str, list[float]]
    entropy: dict[str, list[float]]
    ari: dict[str, list[float]]
    stiffness: dict[str, list[float]]


def _run_observed(model: RecurrentKMeans, tasks: TaskBatch, steps: int, chunk: int = 8):
    """Centroids (task units), mean assignment entropy and mean applied stiffness per step."""
    cents, ent, beta = [], [], []
    a = model.knobs()["assign_stiffness"]
    with torch.no_grad():
        for start in range(0, tasks.batch, chunk):
            part = tasks.subset(slice(start, start + chunk))
            enc = model.encode(part.X, part.C0)
            n = part.n
            c_steps, e_steps, b_steps = [], [], []

            def observe(t, resid):
                c_steps.append(unit_to_task(resid[:, 1 + n :, model.layout["C"]], enc).double().cpu().numpy())
                Y = resid[:, 1 : 1 + n, model.layout["Y"]].double().clamp_min(0)  # a general model: zero beyond k
                p = Y / Y.sum(-1, keepdim=True).clamp_min(1e-30)
                e_steps.append(float(-(p * torch.log(p.clamp_min(1e-30))).sum(-1).mean()) * len(part.X))
                b_steps.append(float(resid[:, 1 : 1 + n, model.layout["BETA"]].double().mean()) * a * len(part.X))

            model.run(enc.resid, steps, n, observe=observe)
            cents.append(np.stack(c_steps))
            ent.append(e_steps)
            beta.append(b_steps)
    return np.concatenate(cents, axis=1), np.sum(ent, 0) / tasks.batch, np.sum(beta, 0) / tasks.batch


def _mean_ari(X, C, truth) -> float:
    from sklearn.metrics import adjusted_rand_score

    labels = nearest_labels(X, C)
    return float(np.mean([adjusted_rand_score(t, lab) for t, lab in zip(truth, labels)]))


def behaviour(models: dict[str, RecurrentKMeans], tasks: TaskBatch, steps: int) -> Behaviour:
    """Objective, ratio to Lloyd's, softness, ARI and stiffness per step of each model, and of Lloyd's."""
    lloyd = lloyd_trajectory(tasks.X, tasks.C0, steps)
    obj_lloyd = objectives(tasks.X, lloyd)
    out = Behaviour(steps, tasks.batch, tasks.n, {}, {}, {}, {}, {})
    out.objective["Lloyd's"] = obj_lloyd.mean(1).tolist()
    out.ari["Lloyd's"] = [_mean_ari(tasks.X, lloyd[t], tasks.components) for t in range(steps + 1)]
    for name, model in models.items():
        cents, ent, beta = _run_observed(model, tasks, steps)
        obj = objectives(tasks.X, cents)
        out.objective[name] = obj.mean(1).tolist()
        out.ratio[name] = (obj / obj_lloyd).mean(1).tolist()
        out.entropy[name] = list(map(float, ent))
        out.stiffness[name] = list(map(float, beta))
        out.ari[name] = [_mean_ari(tasks.X, cents[t], tasks.components) for t in range(steps + 1)]
    return out


def mean_ratio(model: RecurrentKMeans, tasks: TaskBatch, steps: int, lloyd_obj: np.ndarray) -> float:
    cents, _, _ = _run_observed(model, tasks, steps)
    return float((objectives(tasks.X, cents[-1][None])[0] / lloyd_obj).mean())


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
        rows.append({"group": label, "reverted": mean_ratio(reverted, tasks, steps, lloyd_obj),
                     "only_this_trained": mean_ratio(only, tasks, steps, lloyd_obj)})
    return rows


def stiffness_sweep(config: ModelConfig, tasks: TaskBatch, steps: int, lloyd_obj: np.ndarray,
                    betas: tuple[float, ...] = (2, 3, 4, 5, 6, 8, 12, 20, 50, 200),
                    dtype: torch.dtype = torch.float32) -> list[dict]:
    """The construction (no training) at several assignment stiffnesses, the update stiffness kept."""
    base = config.init_sharpness
    rows = []
    for beta in betas:
        sharp = InitSharpness(**{**base.to_dict(), "beta": float(beta)})
        model = RecurrentKMeans(ModelConfig(config.d, config.k, "exact", sharp.to_dict(), config.d_head, config.reembed,
                                            general=config.general), dtype=dtype)
        rows.append({"beta": float(beta), "beta_update": base.beta_update, "ratio": mean_ratio(model, tasks, steps, lloyd_obj)})
    return rows


@dataclass
class Patterns:
    """Attention of one problem, per step: assign head point -> centroid, update head centroid -> point."""

    steps: list[int]
    order: np.ndarray
    components: np.ndarray
    assign: dict[str, list[np.ndarray]]
    update: dict[str, list[np.ndarray]]


def attention_patterns(models: dict[str, RecurrentKMeans], X: np.ndarray, C0: np.ndarray, components: np.ndarray,
                       steps: list[int]) -> Patterns:
    """Patterns read with ``run_with_cache`` from each model's exported two-layer ``HookedTransformer``."""
    n, k = X.shape[0], C0.shape[0]
    order = np.argsort(components, kind="stable")
    out = Patterns(steps, order, components[order], {}, {})
    wanted = {hook_names.pattern(0), hook_names.pattern(1)}
    for name, model in models.items():
        ht = model.hooked_transformer(torch.float64)
        enc = model.encode(X, C0)
        resid = enc.resid.double()
        out.assign[name], out.update[name] = [], []
        with torch.no_grad():
            for t in range(max(steps) + 1):
                if t:
                    resid = model.reembed(resid, enc.resid.double())
                # Step 0 is the assign block alone (layer 1); later steps run both layers.
                resid, cache = ht.run_with_cache(resid, start_at_layer=1 if t == 0 else 0, stop_at_layer=2,
                                                 names_filter=hook_names.names_filter(wanted))
                if t in steps:
                    out.assign[name].append(cache[hook_names.pattern(1)][0, 0, 1 : 1 + n, 1 + n :].numpy()[order])
                    u = cache[hook_names.pattern(0)][0, 0, 1 + n :, 1 : 1 + n].numpy() if t else np.zeros((k, n))
                    out.update[name].append(u[:, order])
    return out


# ----------------------------------------------------------------------------------------------- analysis
@dataclass
class DriftAnalysis:
    config: dict
    layout: ResidualLayout
    circuits: list[CircuitComparison]
    mlps: list[MLPRole]
    knobs: dict[str, dict[str, float]]
    behaviour: Behaviour
    ablations: list[dict]
    sweep: list[dict]
    patterns: Patterns | None
    log: list[dict] = field(default_factory=list)
    summary: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {
            "circuits": [{"block": c.block, "which": c.which, "cosine": c.cosine, "rel_frobenius": c.rel_frobenius,
                          "top_blocks": [dict(zip(("rows", "cols", "trained", "construction", "change"), b))
                                         for b in c.blocks[:10]]} for c in self.circuits],
            "mlp_roles": [r.__dict__ for r in self.mlps],
            "knobs": self.knobs,
            "behaviour": self.behaviour.__dict__,
            "ablations": self.ablations,
            "stiffness_sweep": self.sweep,
            "summary": self.summary,
        }


def construction_of(config: dict, dtype: torch.dtype, sharpness: InitSharpness | None = None) -> RecurrentKMeans:
    """The construction a run started from (its initial sharpness), or at ``sharpness``."""
    mc = dict(config["model"])
    mc["init"] = "exact"
    if sharpness is not None:
        mc["sharpness"] = sharpness.to_dict()
    return RecurrentKMeans(ModelConfig(**mc), dtype=dtype)



def _fmt(x: float) -> str:
    return f"{x:.3g}"
