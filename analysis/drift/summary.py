"""The drift analysis in plain words: each finding a sentence computed from the numbers (none is written unless
its numbers say so)."""

from __future__ import annotations

import numpy as np

from analysis.drift.record import DriftAnalysis
from analysis.drift.weights import BLOCK_NAMES


def fmt(x: float) -> str:
    """Three significant digits, as every number of the summary and the report is shown."""
    return f"{x:.3g}"


def spread(x: float, std: float) -> str:
    """A mean with its standard deviation over tasks, as every compared mean is shown."""
    return f"{fmt(x)} (std {fmt(std)})"


def summarise(a: DriftAnalysis) -> list[str]:
    """Plain-words findings, each computed from the analysis (no sentence is written unless its numbers say so)."""
    return [*outcome(a), *dynamics(a), *weight_changes(a), *ablation_findings(a), *sweep_findings(a)]


def outcome(a: DriftAnalysis) -> list[str]:
    """The trained model's ratio to Lloyd's and ARI, and the steps on which it is worse than Lloyd's."""
    beh, T = a.behaviour, a.behaviour.steps
    r_t, r_c = beh.ratio["trained"], beh.ratio["construction"]
    sd = beh.spread
    lloyd_ari = spread(beh.ari["Lloyd's"][-1], sd["ari"]["Lloyd's"][-1])
    out = [
        f"Outcome: on {beh.tasks} held-out tasks (n={beh.n}) the trained model's k-means objective after {T} steps is"
        f" {fmt(r_t[-1])} x Lloyd's (std over the tasks {fmt(sd['ratio']['trained'][-1])}) from the same initial"
        f" centroids (the construction it started from: {spread(r_c[-1], sd['ratio']['construction'][-1])} x)."
        f" ARI against the generating components: trained {spread(beh.ari['trained'][-1], sd['ari']['trained'][-1])},"
        f" Lloyd's {lloyd_ari}."]
    worse = [t for t in range(1, T + 1) if r_t[t] > 1]
    if not worse:
        out.append("It is at or below Lloyd's objective at every step.")
    elif r_t[T] > 1:
        out.append(f"It is worse than Lloyd's on {len(worse)} of {T} steps, including the last.")
    else:
        out.append(f"It is worse than Lloyd's up to step {max(worse)} (ratio {fmt(r_t[1])} after step 1) and better"
                   f" from step {max(worse) + 1} on: it trades early progress for a better end point.")
    return out


def dynamics(a: DriftAnalysis) -> list[str]:
    """How soft the assignments are, the stiffness applied, and the update head's scores."""
    beh, T = a.behaviour, a.behaviour.steps
    ent, st = beh.entropy["trained"], beh.stiffness["trained"]
    kt, kc = a.knobs["trained"], a.knobs["construction"]
    return [
        f"Soft assignments: the entropy of a point's assignment is {fmt(ent[1])} nats after step 1 and"
        f" {fmt(ent[-1])} after step {T} (Lloyd's: 0; uniform over k: {fmt(np.log(a.layout.k))}).",
        f"Assignment stiffness applied (a x BETA, read from the residual): {fmt(st[0])} at step 0, {fmt(st[1])}"
        f" at step 1, {fmt(st[-1])} at step {T} (construction: {fmt(beh.stiffness['construction'][-1])} at every step;"
        f" schedule growth g {fmt(kc['schedule_growth'])} -> {fmt(kt['schedule_growth'])}).",
        f"Update head: member score b {fmt(kc['update_member_score'])} -> {fmt(kt['update_member_score'])},"
        f" self score {fmt(kc['update_self_score'])} -> {fmt(kt['update_self_score'])}. With a finite b a centroid"
        " averages its members weighted by exp(b r_ij) and every other point by exp(0): a centroid that owns little"
        " responsibility (a duplicate sharing a cluster) is pulled towards the mean of all points.",
    ]


def weight_changes(a: DriftAnalysis) -> list[str]:
    """The circuit that changed most, its most changed block, and blocks the construction leaves at 0."""
    c0 = sorted(a.circuits, key=lambda c: -c.rel_frobenius)[0]
    top = c0.blocks[0]
    out = [f"Weights: the largest relative change is the {BLOCK_NAMES[c0.block]} {c0.which} circuit"
           f" ({fmt(c0.rel_frobenius)} relative Frobenius distance, cosine {fmt(c0.cosine)}); its most changed block"
           f" is {top[0]} x {top[1]} ({'new' if top[3] == 0 else f'from {fmt(top[3])}'} -> {fmt(top[2])})."]
    new_blocks = [(c, b) for c in a.circuits for b in c.blocks
                  if b[3] == 0 and b[2] > 0.1 * max(1e-12, np.linalg.norm(c.trained))]
    if new_blocks:
        items = ", ".join(f"{c.block} {c.which} {b[0]}x{b[1]}" for c, b in new_blocks[:4])
        out.append(f"New pathways (blocks the construction leaves at 0 holding over 10% of the trained circuit's norm): {items}.")
    return out


def ablation_findings(a: DriftAnalysis) -> list[str]:
    """What reverting one weight group costs, and what training one group alone gets."""
    if not a.ablations:
        return []
    r_t, r_c = a.behaviour.ratio["trained"], a.behaviour.ratio["construction"]
    worst = max(a.ablations, key=lambda r: r["reverted"])
    only = sorted(a.ablations, key=lambda r: r["only_this_trained"])
    redundant = worst["reverted"] - r_t[-1] < 0.1 * abs(r_c[-1] - r_t[-1])
    return [f"Ablations: reverting one group of weights to the construction costs at most"
            f" {fmt(worst['reverted'] - r_t[-1])} of ratio ({worst['group']}: {fmt(r_t[-1])} ->"
            f" {spread(worst['reverted'], worst['reverted_std'])})" + (
                "; no single group is necessary: the change is spread over all of them" if redundant else "") +
            f". Trained alone (the rest as constructed), each group gets between"
            f" {spread(only[0]['only_this_trained'], only[0]['only_this_trained_std'])} ({only[0]['group']}) and"
            f" {spread(only[-1]['only_this_trained'], only[-1]['only_this_trained_std'])}"
            f" ({only[-1]['group']})."]


def sweep_findings(a: DriftAnalysis) -> list[str]:
    """Whether the untrained construction at its best stiffness reaches the trained model (is it the temperature?)."""
    if not a.sweep:
        return []
    r_t, st = a.behaviour.ratio["trained"], a.behaviour.stiffness["trained"]
    best = min(a.sweep, key=lambda r: r["ratio"])
    verdict = "better than" if r_t[-1] < best["ratio"] else "no better than"
    collapsed = [r["beta"] for r in a.sweep if r["ratio"] > 1]
    working = [r["beta"] for r in a.sweep if r["ratio"] <= 1 and collapsed and r["beta"] > max(collapsed)]
    out = []
    if collapsed and working:
        out.append(f"A threshold in stiffness: the untrained construction (b={fmt(best['beta_update'])}) is worse than"
                   f" Lloyd's up to a={fmt(max(collapsed))} and better from"
                   f" a={fmt(min(working))}; the trained model applies {fmt(st[-1])} at its last step.")
    out.append(f"Is it just the temperature? The untrained construction at its best assignment stiffness in the sweep"
               f" (a={fmt(best['beta'])}, b={fmt(best['beta_update'])}) reaches {spread(best['ratio'], best['ratio_std'])}"
               f" x Lloyd's on the same tasks; the trained model"
               f" ({spread(r_t[-1], a.behaviour.spread['ratio']['trained'][-1])}) is {verdict} that.")
    return out
