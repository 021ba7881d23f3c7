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

:func:`analyse` computes all of this as numbers (:class:`~analysis.drift_measures.DriftAnalysis`, measured by
:mod:`analysis.drift_measures`) and :func:`summarise` puts them in plain words. The figures are
:mod:`analysis.views.drift`; :func:`drift_report` (:mod:`analysis.report.drift`, re-exported here) draws the
analysis as a self-contained HTML report.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from analysis.drift_measures import (
    BLOCK_NAMES, DriftAnalysis, _fmt, ablations, attention_patterns, behaviour, compare_circuit, compare_mlp,
    construction_of, stiffness_sweep,
)
from analysis.evaluate import lloyd_trajectory, objectives
from analysis.report.drift import drift_report
from circuits.blocks import ASSIGN, UPDATE
from circuits.training.construction import EXACT
from circuits.training.general_tasks import general_tasks
from circuits.training.model import RecurrentKMeans
from circuits.training.tasks import TEST, task_stream

#: ``drift_report`` and ``DriftAnalysis`` are re-exported so that ``from analysis.drift import analyse, drift_report``
#: stays the one import a caller needs.
__all__ = ["DriftAnalysis", "STAGES", "analyse", "construction_of", "drift_report", "stages_of", "summarise"]


#: The stages of :func:`analyse`, in order, as its ``stage`` callback names them (the last three are optional).
STAGES = ("weights", "behaviour", "ablations", "stiffness sweep", "attention patterns")


def stages_of(with_ablations: bool = True, with_patterns: bool = True) -> list[str]:
    """The stages :func:`analyse` runs with these options."""
    skipped = ({"ablations", "stiffness sweep"} if not with_ablations else set()) | (
        {"attention patterns"} if not with_patterns else set())
    return [s for s in STAGES if s not in skipped]


def analyse(model: RecurrentKMeans, config: dict, log: list[dict] | None = None, tasks: int = 16, n: int | None = None,
            steps: int = 20, seed: int = 0, pattern_steps: tuple[int, ...] = (0, 1, 2, 5), with_patterns: bool = True,
            with_ablations: bool = True, stage: Callable[[str], None] | None = None,
            shape: tuple[int, int] | None = None) -> DriftAnalysis:
    """Everything :func:`drift_report` draws, as numbers (see the module docstring). ``stage(name)`` is called as
    each of :func:`stages_of` begins (for progress reports).

    A general model (any ``d <= D``, ``k <= K``) is measured on held-out tasks of the general family at ``shape``
    ``(d, k)`` (default: the capacity); its weights are compared over the whole capacity."""
    stage = stage or (lambda name: None)
    n = n or config["training"]["n"]
    stage("weights")
    construction = construction_of(config, model.dtype)
    exact = construction_of(config, torch.float64, EXACT)
    circuits = [compare_circuit(model, construction, kind, which) for kind in (UPDATE, ASSIGN) for which in ("QK", "OV")]
    mlps = compare_mlp(model, construction, UPDATE) + compare_mlp(model, construction, ASSIGN)
    knobs = {"construction": construction.knobs(), "trained": model.knobs()}
    stage("behaviour")
    if model.config.general:
        d, k = shape or (model.config.d, model.config.k)
        batch = general_tasks(tasks, n, model.config.d, model.config.k, seed, TEST, 0, shape=(d, k), init="random")
        a0 = model.config.init_sharpness.beta
        betas = tuple(sorted({a0 * f for f in (0.125, 0.25, 0.5, 1.0, 2.0, 4.0, 16.0)}))
    else:
        batch = task_stream(tasks, n, model.config.d, model.config.k, tasks, seed, TEST)
        betas = (2, 3, 4, 5, 6, 8, 12, 20, 50, 200)
    beh = behaviour({"trained": model, "construction": construction}, batch, steps)
    lloyd_final = np.array(objectives(batch.X, lloyd_trajectory(batch.X, batch.C0, steps)[-1][None])[0])
    abl, sweep = [], []
    if with_ablations:
        stage("ablations")
        abl = ablations(model, construction, batch, steps, lloyd_final)
        stage("stiffness sweep")
        sweep = stiffness_sweep(model.config, batch, steps, lloyd_final, betas=betas, dtype=model.dtype)
    pats = None
    if with_patterns:
        stage("attention patterns")
        one = batch.subset(slice(0, 1))
        pats = attention_patterns({"exact (Lloyd's)": exact, "trained": model}, one.X[0], one.C0[0], one.components[0],
                                  [t for t in pattern_steps if t <= steps])
    result = DriftAnalysis(config, model.layout, circuits, mlps, knobs, beh, abl, sweep, pats, list(log or []))
    result.summary = summarise(result)
    return result



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
