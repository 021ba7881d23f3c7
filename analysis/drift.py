"""What training changed: a trained recurrent model next to the construction it started from, in the named basis.

Weights. For both heads (update, assign) the trained QK and OV circuits (``W_Q W_K^T`` and ``W_V W_O`` as
TransformerLens :class:`~transformer_lens.FactoredMatrix` objects) are compared with the construction's at the
run's initial sharpness (:mod:`circuits.training.construction`): cosine similarity and relative Frobenius distance
(basis-invariant), singular values, and the change of every (row subspace, column subspace) block — which blocks
of the named residual basis moved most, and which are new. The MLPs keep the construction's wiring; their
coefficients are compared unit role by unit role. The construction's knobs (stiffnesses, self weight, schedule
growth) are read back from the trained weights (:meth:`~circuits.training.model.RecurrentKMeans.knobs`).

Behaviour. On held-out tasks, step by step: the k-means objective of the trained model, of the construction at its
initial sharpness and of Lloyd's; how soft the assignments are (entropy of ``Y``); ARI against the generating
components; the stiffness the model applies (its ``BETA``). Attention patterns of the trained and the exact model
(the construction at Lloyd's sharpness) on one problem come from the exported ``HookedTransformer`` via
``run_with_cache``. Ablations put one group of trained weights back to the construction's and measure what is
lost; a sweep of the construction's own stiffness says how much of the gain a hand-tuned construction gets.

History. For a run, the training log holds the drift of each block from its initial weights, the knobs and the
validation ratio at every validation step.

:func:`analyse` computes all of this as numbers (:class:`DriftAnalysis`); :func:`drift_report` draws it as a
self-contained HTML report (:mod:`analysis.report`), with a plain-words summary computed from the numbers.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

import numpy as np
import plotly.graph_objects as go
import torch
from plotly.subplots import make_subplots

from analysis.evaluate import lloyd_trajectory, nearest_labels, objectives
from analysis.views._common import View, cluster_colour
from circuits import hook_names
from circuits.blocks import ASSIGN, UPDATE
from circuits.layout import ResidualLayout
from circuits.training.construction import EXACT, EXTRA_SUBSPACES_DOCS, InitSharpness
from circuits.training.model import ModelConfig, RecurrentKMeans, unit_to_task
from circuits.training.tasks import TEST, TaskBatch, task_stream

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
                c_steps.append(unit_to_task(resid[:, 1 + n :, model.layout["C"]], enc).double().numpy())
                Y = resid[:, 1 : 1 + n, model.layout["Y"]].double().clamp_min(0)
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
        model = RecurrentKMeans(ModelConfig(config.d, config.k, "exact", sharp.to_dict(), config.d_head, config.reembed),
                                dtype=dtype)
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


def analyse(model: RecurrentKMeans, config: dict, log: list[dict] | None = None, tasks: int = 16, n: int | None = None,
            steps: int = 20, seed: int = 0, pattern_steps: tuple[int, ...] = (0, 1, 2, 5), with_patterns: bool = True,
            with_ablations: bool = True) -> DriftAnalysis:
    """Everything :func:`drift_report` draws, as numbers (see the module docstring)."""
    n = n or config["training"]["n"]
    construction = construction_of(config, model.dtype)
    exact = construction_of(config, torch.float64, EXACT)
    circuits = [compare_circuit(model, construction, kind, which) for kind in (UPDATE, ASSIGN) for which in ("QK", "OV")]
    mlps = compare_mlp(model, construction, UPDATE) + compare_mlp(model, construction, ASSIGN)
    knobs = {"construction": construction.knobs(), "trained": model.knobs()}
    batch = task_stream(tasks, n, model.config.d, model.config.k, tasks, seed, TEST)
    beh = behaviour({"trained": model, "construction": construction}, batch, steps)
    lloyd_final = np.array(objectives(batch.X, lloyd_trajectory(batch.X, batch.C0, steps)[-1][None])[0])
    abl = ablations(model, construction, batch, steps, lloyd_final) if with_ablations else []
    sweep = stiffness_sweep(model.config, batch, steps, lloyd_final, dtype=model.dtype) if with_ablations else []
    pats = None
    if with_patterns:
        one = batch.subset(slice(0, 1))
        pats = attention_patterns({"exact (Lloyd's)": exact, "trained": model}, one.X[0], one.C0[0], one.components[0],
                                  [t for t in pattern_steps if t <= steps])
    result = DriftAnalysis(config, model.layout, circuits, mlps, knobs, beh, abl, sweep, pats, list(log or []))
    result.summary = summarise(result)
    return result


def _fmt(x: float) -> str:
    return f"{x:.3g}"


def summarise(a: DriftAnalysis) -> list[str]:
    """Plain-words findings, each computed from the analysis (no sentence is written unless its numbers say so)."""
    out = []
    beh, T = a.behaviour, a.behaviour.steps
    r_t, r_c = beh.ratio["trained"], beh.ratio["construction"]
    lloyd_ari = beh.ari["Lloyd's"][-1]
    out.append(
        f"Outcome: on {beh.tasks} held-out tasks (n={beh.n}) the trained model's k-means objective after {T} steps is"
        f" {_fmt(r_t[-1])} x Lloyd's from the same initial centroids (the construction it started from: {_fmt(r_c[-1])} x)."
        f" ARI against the generating components: trained {_fmt(beh.ari['trained'][-1])},"
        f" Lloyd's {_fmt(lloyd_ari)}.")
    worse = [t for t in range(1, T + 1) if r_t[t] > 1]
    if not worse:
        out.append("It is at or below Lloyd's objective at every step.")
    elif r_t[T] > 1:
        out.append(f"It is worse than Lloyd's on {len(worse)} of {T} steps, including the last.")
    else:
        out.append(f"It is worse than Lloyd's up to step {max(worse)} (ratio {_fmt(r_t[1])} after step 1) and better"
                   f" from step {max(worse) + 1} on: it trades early progress for a better end point.")
    ent = beh.entropy["trained"]
    out.append(f"Soft assignments: the entropy of a point's assignment is {_fmt(ent[1])} nats after step 1 and"
               f" {_fmt(ent[-1])} after step {T} (Lloyd's: 0; uniform over k: {_fmt(np.log(a.layout.k))}).")
    kt, kc = a.knobs["trained"], a.knobs["construction"]
    st = beh.stiffness["trained"]
    out.append(f"Assignment stiffness applied (a x BETA, read from the residual): {_fmt(st[0])} at step 0, {_fmt(st[1])}"
               f" at step 1, {_fmt(st[-1])} at step {T} (construction: {_fmt(beh.stiffness['construction'][-1])} at every step;"
               f" schedule growth g {_fmt(kc['schedule_growth'])} -> {_fmt(kt['schedule_growth'])}).")
    out.append(f"Update head: member score b {_fmt(kc['update_member_score'])} -> {_fmt(kt['update_member_score'])},"
               f" self score {_fmt(kc['update_self_score'])} -> {_fmt(kt['update_self_score'])}. With a finite b a centroid"
               " averages its members weighted by exp(b r_ij) and every other point by exp(0): a centroid that owns little"
               " responsibility (a duplicate sharing a cluster) is pulled towards the mean of all points, free to be"
               " captured by a cluster that has no centroid — the escape from Lloyd's poor local minima.")
    by_change = sorted(a.circuits, key=lambda c: -c.rel_frobenius)
    c0 = by_change[0]
    top = c0.blocks[0]
    out.append(f"Weights: the largest relative change is the {BLOCK_NAMES[c0.block]} {c0.which} circuit"
               f" ({_fmt(c0.rel_frobenius)} relative Frobenius distance, cosine {_fmt(c0.cosine)}); its most changed block"
               f" is {top[0]} x {top[1]} ({'new' if top[3] == 0 else f'from {_fmt(top[3])}'} -> {_fmt(top[2])}).")
    new_blocks = [(c, b) for c in a.circuits for b in c.blocks if b[3] == 0 and b[2] > 0.1 * max(1e-12, np.linalg.norm(c.trained))]
    if new_blocks:
        items = ", ".join(f"{c.block} {c.which} {b[0]}x{b[1]}" for c, b in new_blocks[:4])
        out.append(f"New pathways (blocks the construction leaves at 0 holding over 10% of the trained circuit's norm): {items}.")
    if a.ablations:
        worst = max(a.ablations, key=lambda r: r["reverted"])
        only = sorted(a.ablations, key=lambda r: r["only_this_trained"])
        redundant = worst["reverted"] - r_t[-1] < 0.1 * abs(r_c[-1] - r_t[-1])
        out.append(f"Ablations: reverting one group of weights to the construction costs at most"
                   f" {_fmt(worst['reverted'] - r_t[-1])} of ratio ({worst['group']}: {_fmt(r_t[-1])} ->"
                   f" {_fmt(worst['reverted'])})" + ("; no single group is necessary: the change is spread over all of"
                                                    " them" if redundant else "") +
                   f". Trained alone (the rest as constructed), each group gets between"
                   f" {_fmt(only[0]['only_this_trained'])} ({only[0]['group']}) and {_fmt(only[-1]['only_this_trained'])}"
                   f" ({only[-1]['group']}).")
    if a.sweep:
        best = min(a.sweep, key=lambda r: r["ratio"])
        verdict = "better than" if r_t[-1] < best["ratio"] else "no better than"
        collapsed = [r["beta"] for r in a.sweep if r["ratio"] > 1]
        working = [r["beta"] for r in a.sweep if r["ratio"] <= 1 and collapsed and r["beta"] > max(collapsed)]
        if collapsed and working:
            out.append(f"A threshold in stiffness: the untrained construction (b={_fmt(best['beta_update'])}) is worse than"
                       f" Lloyd's up to a={_fmt(max(collapsed))} (soft enough that centroids merge) and better from"
                       f" a={_fmt(min(working))}; the trained model applies {_fmt(st[-1])} at its last step.")
        out.append(f"Is it just the temperature? The untrained construction at its best assignment stiffness in the sweep"
                   f" (a={_fmt(best['beta'])}, b={_fmt(best['beta_update'])}) reaches {_fmt(best['ratio'])} x Lloyd's on"
                   f" the same tasks; the trained model ({_fmt(r_t[-1])}) is {verdict} that.")
    return out


# ----------------------------------------------------------------------------------------------- figures
def _heat(z, x, y, title, colorscale="RdBu", zmid=0.0, showscale=True):
    return go.Heatmap(z=z, x=x, y=y, colorscale=colorscale, zmid=zmid, showscale=showscale, hoverongaps=False,
                      name=title)


def view_behaviour(a: DriftAnalysis) -> View:
    beh = a.behaviour
    steps = list(range(beh.steps + 1))
    fig = make_subplots(rows=2, cols=2, subplot_titles=("k-means objective (mean over tasks)", "ARI to generating components",
                                                        "assignment entropy (nats)", "stiffness applied (a x BETA)"))
    colours = {"trained": "#d62728", "construction": "#1f77b4", "Lloyd's": "#2ca02c"}
    for name, ys in beh.objective.items():
        fig.add_trace(go.Scatter(x=steps, y=ys, name=name, legendgroup=name, line=dict(color=colours[name])), 1, 1)
    for name, ys in beh.ari.items():
        fig.add_trace(go.Scatter(x=steps, y=ys, name=name, legendgroup=name, showlegend=False,
                                 line=dict(color=colours[name])), 1, 2)
    for name, ys in beh.entropy.items():
        fig.add_trace(go.Scatter(x=steps, y=ys, name=name, legendgroup=name, showlegend=False,
                                 line=dict(color=colours[name])), 2, 1)
    for name, ys in beh.stiffness.items():
        fig.add_trace(go.Scatter(x=steps, y=ys, name=name, legendgroup=name, showlegend=False,
                                 line=dict(color=colours[name])), 2, 2)
    fig.update_xaxes(title_text="step")
    fig.update_layout(height=620, title=f"Behaviour on {beh.tasks} held-out tasks (n={beh.n}), step by step")
    return View("drift-behaviour", "behaviour per step", fig, {"behaviour": beh.__dict__})


def view_similarity(a: DriftAnalysis) -> View:
    labels = [f"{BLOCK_NAMES[c.block]} {c.which}" for c in a.circuits]
    fig = make_subplots(rows=1, cols=2, subplot_titles=("cosine similarity to the construction", "relative Frobenius distance"))
    fig.add_trace(go.Bar(x=labels, y=[c.cosine for c in a.circuits], marker_color="#1f77b4", name="cosine"), 1, 1)
    fig.add_trace(go.Bar(x=labels, y=[c.rel_frobenius for c in a.circuits], marker_color="#d62728", name="|W - W0| / |W0|"), 1, 2)
    fig.update_layout(height=380, showlegend=False, title="Trained head circuits vs the construction (basis-invariant)")
    return View("drift-similarity", "cosine and distance", fig,
                {"cosine": [c.cosine for c in a.circuits], "rel_frobenius": [c.rel_frobenius for c in a.circuits]})


def view_singular_values(a: DriftAnalysis, top: int = 40) -> View:
    fig = make_subplots(rows=1, cols=len(a.circuits), subplot_titles=[f"{BLOCK_NAMES[c.block]} {c.which}" for c in a.circuits])
    for i, c in enumerate(a.circuits, start=1):
        m = min(top, len(c.sv_trained))
        fig.add_trace(go.Scatter(y=c.sv_construction[:m], mode="lines+markers", name="construction", legendgroup="c",
                                 showlegend=i == 1, line=dict(color="#1f77b4")), 1, i)
        fig.add_trace(go.Scatter(y=c.sv_trained[:m], mode="lines+markers", name="trained", legendgroup="t",
                                 showlegend=i == 1, line=dict(color="#d62728")), 1, i)
        fig.update_yaxes(type="log", row=1, col=i)
    fig.update_layout(height=360, title="Singular values (FactoredMatrix.S), largest first")
    return View("drift-singular-values", "singular values", fig,
                {"trained": [c.sv_trained.tolist() for c in a.circuits],
                 "construction": [c.sv_construction.tolist() for c in a.circuits]})


def view_blocks(a: DriftAnalysis) -> View:
    """Per circuit, |change| of every (row subspace, column subspace) block, with a menu to pick the circuit."""
    fig = go.Figure()
    names = list(a.layout.names)
    buttons = []
    for i, c in enumerate(a.circuits):
        _, change = subspace_blocks(c.trained - c.construction, a.layout)
        _, cons = subspace_blocks(c.construction, a.layout)
        text = [[f"|change| {change[r, s]:.3g}<br>|construction| {cons[r, s]:.3g}" for s in range(len(names))]
                for r in range(len(names))]
        fig.add_trace(go.Heatmap(z=change, x=names, y=names, colorscale="Reds", visible=i == 0, text=text,
                                 hovertemplate="rows %{y}, cols %{x}<br>%{text}<extra></extra>",
                                 colorbar=dict(title="|change|")))
        rows_title = "query reads" if c.which == "QK" else "value reads"
        cols_title = "key reads" if c.which == "QK" else "writes"
        buttons.append(dict(label=f"{BLOCK_NAMES[c.block]} {c.which}", method="update",
                            args=[{"visible": [j == i for j in range(len(a.circuits))]},
                                  {"yaxis.title.text": rows_title, "xaxis.title.text": cols_title}]))
    fig.update_layout(height=560, title="Change of each subspace block (Frobenius norm of trained - construction)",
                      updatemenus=[dict(buttons=buttons, x=0, y=1.12, xanchor="left", yanchor="top")],
                      yaxis=dict(autorange="reversed", title="query reads"), xaxis=dict(title="key reads"))
    return View("drift-blocks", "subspace blocks", fig, {"names": names})


def view_circuits(a: DriftAnalysis) -> View:
    """Trained and construction matrices side by side, restricted to dimensions either touches."""
    labels = a.layout.labels
    fig = make_subplots(rows=1, cols=2, subplot_titles=("construction", "trained"), horizontal_spacing=0.12)
    buttons, n_traces = [], 2 * len(a.circuits)
    for i, c in enumerate(a.circuits):
        scale = max(np.abs(c.construction).max(), np.abs(c.trained).max(), 1e-12)
        rows = np.flatnonzero((np.abs(c.construction) + np.abs(c.trained)).max(1) > 1e-3 * scale)
        cols = np.flatnonzero((np.abs(c.construction) + np.abs(c.trained)).max(0) > 1e-3 * scale)
        for j, (W, name) in enumerate(((c.construction, "construction"), (c.trained, "trained"))):
            fig.add_trace(go.Heatmap(z=W[np.ix_(rows, cols)], x=[labels[q] for q in cols], y=[labels[q] for q in rows],
                                     colorscale="RdBu", zmid=0, zmin=-scale, zmax=scale, visible=i == 0,
                                     showscale=j == 1, name=name), 1, j + 1)
        buttons.append(dict(label=f"{BLOCK_NAMES[c.block]} {c.which}", method="update",
                            args=[{"visible": [t // 2 == i for t in range(n_traces)]}]))
    fig.update_yaxes(autorange="reversed")
    fig.update_layout(height=720, title="Head circuits in the named residual basis (rows read by query/value, columns by key/written)",
                      updatemenus=[dict(buttons=buttons, x=0, y=1.1, xanchor="left", yanchor="top")])
    return View("drift-circuits", "circuits side by side", fig, {})


def view_patterns(a: DriftAnalysis) -> View:
    p = a.patterns
    names = list(p.assign)
    fig = make_subplots(rows=2, cols=len(names), subplot_titles=[f"{name}: assign head, point -> centroid" for name in names]
                        + [f"{name}: update head, centroid -> point" for name in names], vertical_spacing=0.12)
    steps_traces = []
    for si, t in enumerate(p.steps):
        idx = []
        for ci, name in enumerate(names):
            fig.add_trace(go.Heatmap(z=p.assign[name][si].T, colorscale="Viridis", zmin=0, zmax=1, showscale=ci == 0,
                                     visible=si == 0, name=f"{name} assign"), 1, ci + 1)
            idx.append(len(fig.data) - 1)
            fig.add_trace(go.Heatmap(z=p.update[name][si], colorscale="Viridis", zmin=0,
                                     zmax=max(1e-12, float(p.update[name][si].max())), showscale=False,
                                     visible=si == 0, name=f"{name} update"), 2, ci + 1)
            idx.append(len(fig.data) - 1)
        steps_traces.append(idx)
    total = len(fig.data)
    slider = dict(active=0, currentvalue=dict(prefix="step "), pad=dict(t=40), steps=[
        dict(label=str(t), method="update", args=[{"visible": [i in steps_traces[si] for i in range(total)]}])
        for si, t in enumerate(p.steps)])
    bounds = np.flatnonzero(np.diff(p.components)) + 0.5
    for ci in range(len(names)):
        for b in bounds:
            fig.add_vline(x=float(b), line=dict(color="white", width=1), row=1, col=ci + 1)
            fig.add_vline(x=float(b), line=dict(color="white", width=1), row=2, col=ci + 1)
    fig.update_yaxes(title_text="centroid", autorange="reversed")
    fig.update_xaxes(title_text="point (sorted by generating component)")
    fig.update_layout(height=640, sliders=[slider],
                      title="Attention on one held-out problem (HookedTransformer.run_with_cache); step 0 is the first assignment")
    return View("drift-patterns", "attention patterns", fig, {"steps": p.steps})


def view_history(a: DriftAnalysis) -> View | None:
    log = [r for r in a.log if r.get("drift")]
    if not log:
        return None
    steps = [r["step"] for r in log]
    fig = make_subplots(rows=1, cols=3, subplot_titles=("validation ratio model / Lloyd's", "relative distance from the initial weights",
                                                        "knobs read from the weights"))
    fig.add_trace(go.Scatter(x=steps, y=[r["val_ratio"] for r in log], name="validation ratio", line=dict(color="black")), 1, 1)
    for kind in (UPDATE, ASSIGN):
        for part, dash in (("qk", "solid"), ("ov", "dash"), ("mlp", "dot")):
            fig.add_trace(go.Scatter(x=steps, y=[r["drift"][kind][part] for r in log], name=f"{kind} {part}",
                                     line=dict(dash=dash, color="#1f77b4" if kind == UPDATE else "#d62728")), 1, 2)
    knob_names = [k for k in ("assign_stiffness", "update_member_score", "update_self_score", "schedule_growth")
                  if all("knobs" in r for r in log)]
    for i, kname in enumerate(knob_names):
        fig.add_trace(go.Scatter(x=steps, y=[r["knobs"][kname] for r in log], name=kname,
                                 line=dict(color=cluster_colour(i))), 1, 3)
    fig.update_xaxes(title_text="training step")
    fig.update_layout(height=400, title="Drift against training step (from the training log)")
    return View("drift-history", "drift against training step", fig, {"steps": steps})


def view_sweep(a: DriftAnalysis) -> View | None:
    if not a.sweep:
        return None
    fig = go.Figure(go.Scatter(x=[r["beta"] for r in a.sweep], y=[r["ratio"] for r in a.sweep], mode="lines+markers",
                               name="construction (untrained) at stiffness a"))
    fig.add_hline(y=a.behaviour.ratio["trained"][-1], line=dict(color="#d62728", dash="dash"),
                  annotation_text="trained model")
    fig.add_hline(y=1.0, line=dict(color="#2ca02c", dash="dot"), annotation_text="Lloyd's")
    fig.update_xaxes(type="log", title_text="assignment stiffness a (unit-scaled)")
    fig.update_yaxes(type="log", title_text=f"objective / Lloyd's after {a.behaviour.steps} steps")
    fig.update_layout(height=380, title="Is it just the temperature? The construction swept over its stiffness")
    return View("drift-sweep", "stiffness sweep", fig, {"sweep": a.sweep})


def drift_report(a: DriftAnalysis, title: str = "What training changed"):
    """The analysis as a :class:`analysis.report.Report` (write it with ``.write(path)``)."""
    from analysis.report import Fact, Header, Html, Report, Section, Table

    beh = a.behaviour
    r_t = beh.ratio["trained"][-1]
    tr = a.config["training"]
    header = Header(
        title=title,
        verdict=f"trained / Lloyd's after {beh.steps} steps: {r_t:.4f} on {beh.tasks} held-out tasks (n={beh.n})",
        verified=r_t < 1, exact=False,
        groups={
            "run": [Fact("tasks", f"d={tr['d']} k={tr['k']} n={tr['n']}, gaussian mixtures"),
                    Fact("init", tr["init"], "construction at finite sharpness, or random weights"),
                    Fact("steps", str(a.config.get("progress", {}).get("step", tr["steps"]))),
                    Fact("best validation step", str(a.config.get("progress", {}).get("best_step")))],
            "construction it is compared with": [Fact(k, _fmt(v)) for k, v in a.config["model"]["sharpness"].items()],
        },
        messages=["Comparisons are against the construction at the run's initial sharpness; the exact (Lloyd's)"
                  " construction appears in the attention patterns."],
    )
    report = Report(header)
    summary = "".join(f"<li>{_html(s)}</li>" for s in a.summary)
    report.add_section(Section("What the trained model does differently", "", [Html(f"<ul class='summary'>{summary}</ul>")]))
    report.add_section(Section("Behaviour", "Mean over held-out tasks, step by step: objective, ARI, softness, stiffness.",
                               [view_behaviour(a)]))
    if a.patterns is not None:
        report.add_section(Section("Attention patterns", "The same problem through the exact construction (Lloyd's, hard"
                                   " attention) and the trained model. Points are sorted by the component that generated"
                                   " them; white lines separate components. Use the slider to change step.",
                                   [view_patterns(a)]))
    knob_rows = [[name, KNOB_DOCS[name][0], _fmt(a.knobs["construction"][name]), _fmt(a.knobs["trained"][name]),
                  KNOB_DOCS[name][1]] for name in KNOB_DOCS]
    report.add_section(Section("Knobs read back from the weights", "The construction's named knobs, read from the"
                               " trained weights in the named basis.",
                               [Table(["knob", "where", "construction", "trained", "meaning"], knob_rows)]))
    items = [view_similarity(a), view_singular_values(a), view_blocks(a), view_circuits(a)]
    top_rows = [[f"{BLOCK_NAMES[c.block]} {c.which}", r[0], r[1], _fmt(r[3]), _fmt(r[2]), _fmt(r[4])]
                for c in a.circuits for r in c.blocks[:5]]
    items.append(Table(["circuit", "rows", "cols", "|construction|", "|trained|", "|change|"], top_rows,
                       caption="The five most changed subspace blocks of every circuit"))
    report.add_section(Section("Head circuits: trained vs construction", "QK = W_Q W_K^T (rows: what the query reads,"
                               " columns: what the key reads); OV = W_V W_O (rows: what the value reads, columns: what is"
                               " written). The fixed structural channel (point x point masked) is left out: it is never"
                               " trained.", items))
    mlp_rows = [[BLOCK_NAMES[r.block], r.role, r.units, _fmt(r.construction), _fmt(r.trained), _fmt(r.max_rel_change)]
                for r in a.mlps]
    report.add_section(Section("MLPs: coefficients by unit role", "Units keep the construction's wiring; the effective"
                               " coefficient is out x gate x linear (the unit's output for unit inputs).",
                               [Table(["block", "role: gate x linear -> writes", "units", "construction (mean)",
                                       "trained (mean)", "largest relative change"], mlp_rows)]))
    extra = []
    if a.ablations:
        extra.append(Table(["weights", "ratio with these reverted to the construction", "ratio with only these trained"],
                           [[r["group"], _fmt(r["reverted"]), _fmt(r["only_this_trained"])] for r in a.ablations]))
    sweep = view_sweep(a)
    if sweep is not None:
        extra.append(sweep)
    if extra:
        report.add_section(Section("Which changes matter", f"Objective / Lloyd's after {beh.steps} steps on the same"
                                   f" {beh.tasks} tasks.", extra))
    hist = view_history(a)
    if hist is not None:
        report.add_section(Section("Drift against training step", "From the checkpoint's training log.", [hist]))
    layout_rows = [[r["name"], r["width"], EXTRA_SUBSPACES_DOCS.get(r["name"], r["holds"])] for r in a.layout.describe()]
    report.add_section(Section("Residual layout", "The exact circuit's subspaces plus the two the trainable model adds.",
                               [Table(["subspace", "width", "holds"], layout_rows)]))
    return report


def _html(text: str) -> str:
    import html

    return html.escape(text)
