"""The page of a construction's run (``report --construction NAME``, ``cluster --construction NAME --out``):
a construction of :mod:`analysis.constructions` on one problem, as a self-contained HTML report
(:mod:`analysis.report.document`).

Per step ``t`` (the state after ``t`` updates; ``t = 0`` is the start): every candidate's objective as the circuit
computed it and as its numpy reference did, the candidate kept, its margin to the next different one and the
candidates exactly as good (the tie order decided among them), and the attention of the heads that choose: the
``choose`` head (every token over the candidates' centroid tokens, scored by their objectives) and the
``swap_slot`` head (which current centroid the swap moves). Then the verification section, the same record as the
``cluster --json`` document (:func:`analysis.constructions.common.cluster_document`): the verdict in the one vocabulary
(:mod:`analysis.verify.verdict`), the candidate kept by the circuit and by the reference at every step, each
column's centroid error against its tolerance, and every problem and note.

The attention is read from the dense stacked ``HookedTransformer`` (``run_with_cache`` on the two heads' pattern
hooks only), which is the structured path's forward layer for layer; above :data:`PAGE_MAX_TOKENS` tokens the page
says so instead.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import plotly.graph_objects as go

from analysis.constructions.common import CANDIDATE_LABELS, alterations_text
from analysis.report.document import Fact, Header, Report, Section, Table

#: The heads whose attention the page draws, by block name, with what their keys are.
CHOOSING_HEADS = ("choose", "swap_slot")
#: The page runs the dense model for those heads only up to this many tokens: every layer of the stacked model forms
#: its (tokens)^2 pattern on the way (a page of a bigger problem says so instead of spending minutes and gigabytes).
PAGE_MAX_TOKENS = 2000


@dataclass
class ConstructionView:
    """A named figure of the page (the engine's :class:`~analysis.report.document.FigureItem`), with what it drew."""

    name: str
    figure: go.Figure
    notes: list
    data: dict


def _number(x: float | None, spec: str = ".10g") -> str:
    """A number for a table cell; what is not a number says why instead of printing ``nan``."""
    if x is None or not math.isfinite(x):
        return "left out"
    return format(x, spec)


def gap_text(rec: dict) -> str:
    """The kept candidate's margin to the next different objective, and the candidates exactly as good."""
    if rec["choice_gap"] is None:
        return "tie: every candidate equal (tie order)"
    tied = ", ".join(CANDIDATE_LABELS[c] for c in rec["tied_with"])
    return f"{rec['choice_gap']:.3g}" + (f" (equal to {tied}; tie order)" if tied else "")


def attention(result) -> dict | None:
    """Per step, the ``choose`` head's attention from the BOS token summed over each candidate's centroid tokens
    ``[steps, candidates]`` and the ``swap_slot`` head's over the current centroids ``[steps, k]``, read from the
    dense model; ``None`` where the problem has more than :data:`PAGE_MAX_TOKENS` tokens."""
    import torch

    from circuits import hook_names

    circ = result.circuit
    resid, seq, _ = circ.encode(result.X, result.C0)
    if seq.n_tokens > PAGE_MAX_TOKENS:
        return None
    layers = {(t, b): circ.layer(t, b) for t in range(circ.steps) for b in CHOOSING_HEADS}
    names = {hook_names.pattern(layer) for layer in layers.values()}
    with torch.no_grad():
        _, cache = circ.model.run_with_cache(resid, names_filter=hook_names.names_filter(names))
    choose = np.zeros((circ.steps, len(circ.SPEC.candidates)))
    slot = np.zeros((circ.steps, circ.layout.k))
    for t in range(circ.steps):
        row = cache[hook_names.pattern(layers[t, "choose"])][0, 0, seq.bos].cpu().numpy()
        for r, (_, group) in enumerate(circ.SPEC.candidates):
            choose[t, r] = float(row[seq.group(group)].sum())
        row = cache[hook_names.pattern(layers[t, "swap_slot"])][0, 0, seq.bos].cpu().numpy()
        slot[t] = row[seq.group("current")]
    return {"choose": choose, "swap_slot": slot}


def _heatmap(name: str, title: str, z: np.ndarray, x: list[str], steps: list[int], notes: list[str]
             ) -> ConstructionView:
    """Attention weights (rows: steps, from 1) on a 0-to-1 colour scale, which covers every weight."""
    fig = go.Figure(go.Heatmap(z=z, x=x, y=steps, zmin=0.0, zmax=1.0, colorscale="Blues",
                               colorbar={"title": "weight"}, hovertemplate="t=%{y}, %{x}: %{z:.3g}<extra></extra>"))
    fig.update_layout(title=title, xaxis_title="key", yaxis={"title": "t (after t updates)", "dtick": 1},
                      template="plotly_white", height=max(260, 70 + 40 * len(steps)))
    return ConstructionView(name, fig, notes, {"z": z, "zmin": 0.0, "zmax": 1.0})


def objectives_view(doc: dict) -> ConstructionView:
    """Every candidate's objective per step (markers), the kept one and Lloyd's (lines), from t = 0."""
    recs, names = doc["per_iteration"], doc["candidates"]
    t = [0] + [r["iteration"] for r in recs]
    fig = go.Figure()
    start = doc["objective_start"]
    fig.add_scatter(x=t, y=[start] + [r["objective_circuit"] for r in recs], mode="lines+markers",
                    name="kept (the construction)", line={"width": 3})
    fig.add_scatter(x=t, y=[start] + [r["objective_lloyd"] for r in recs], mode="lines", name="Lloyd's",
                    line={"dash": "dash"})
    for c in names:
        xs = [r["iteration"] for r in recs if math.isfinite(r["candidate_objectives"][c])]
        ys = [r["candidate_objectives"][c] for r in recs if math.isfinite(r["candidate_objectives"][c])]
        fig.add_scatter(x=xs, y=ys, mode="markers", name=f"candidate: {CANDIDATE_LABELS[c]}",
                        marker={"size": 9, "symbol": "circle-open"})
    fig.update_layout(title="Objective per step: every candidate, the one kept, and Lloyd's",
                      xaxis={"title": "t (after t updates)", "dtick": 1}, yaxis_title="objective (sum of squared"
                      " distances to the nearest centroid)", template="plotly_white", height=420)
    return ConstructionView("objectives", fig, ["objective at t: the sum over points of the squared distance to the"
                                                " nearest of the centroids after t updates, in the data's units"],
                            {"t": t})


def candidates_table(doc: dict) -> Table:
    names = doc["candidates"]
    rows = []
    for r in doc["per_iteration"]:
        rows.append([r["iteration"], CANDIDATE_LABELS[r["choice"]],
                     *(_number(r["candidate_objectives"][c]) for c in names), gap_text(r),
                     f"{r['min_margin']:.3g}"])
    return Table(["t", "kept", *(f"{CANDIDATE_LABELS[c]} objective" for c in names),
                  "margin to the next (relative)", "min assignment margin"], rows,
                 caption="each candidate's objective as the circuit computed it; the kept one is the least (with the"
                         " select margin's tie order); 'margin to the next': how much larger the next different"
                         " objective is, relative; candidates exactly as good are named, the tie order kept the"
                         " first; 'min assignment margin': beta times the smallest gap between a point's two"
                         " nearest kept centroids (unit-scaled squared distances; above 745 the runner-up weighs"
                         " exactly 0)")


def verification_section(doc: dict) -> Section:
    names = doc["candidates"]
    sec = Section("Verification", (
        f"{doc['verdict']}\n\nThe transformer is held to its numpy reference at every step: the same candidate kept,"
        " and every centroid coordinate within its column's tolerance (a fraction of the column's spread plus a few"
        " float64 epsilons of its magnitude, so that data far from 0 and columns of very different sizes are each"
        " held to what float64 can say about them). Lloyd's is the yardstick the construction is meant to beat,"
        " never to match."), key="verification")
    sec.add(Table(["t", "kept (circuit)", "kept (reference)", "largest centroid error", "labels = reference's",
                   "objective (circuit)", "objective (reference)"],
                  [[r["iteration"], CANDIDATE_LABELS[r["choice"]], CANDIDATE_LABELS[r["reference_choice"]],
                    f"{r['max_centroid_error']:.3g}", f"{r['label_agreement']:.2%}", _number(r["objective_circuit"]),
                    _number(r["objective_reference"])] for r in doc["per_iteration"]],
                  caption="per step, the circuit against its numpy reference"))
    sec.add(Table(["t", *(f"{CANDIDATE_LABELS[c]} (reference)" for c in names)],
                  [[r["iteration"], *(_number(r["reference_candidate_objectives"][c]) for c in names)]
                   for r in doc["per_iteration"]],
                  caption="every candidate's objective in the numpy reference"))
    sec.add(Table(["column", "tolerance"], [[m, f"{v:.3g}"] for m, v in enumerate(doc["centroid_tolerances"])],
                  caption="the largest centroid error per column that still agrees, in the data's units"))
    if doc["problems"]:
        sec.add(Table(["problem"], [[p] for p in doc["problems"]], caption="where the run parts from its reference"))
    sec.add(Table(["note"], [[n] for n in doc["notes"]]))
    return sec


def construction_report(result, source: str = "", init: str = "") -> Report:
    """The page (module docstring) of ``result`` (a :class:`analysis.constructions.common.ConstructionResult`)."""
    doc = result.doc
    title = result.construction.title
    steps = [r["iteration"] for r in doc["per_iteration"]]
    facts = [Fact("data", f"{source or 'data'}: n={doc['n']}, d={doc['d']}, k={doc['k']}" + (f", init {init}" if
                                                                                              init else "")),
             Fact("steps", str(len(steps)), "t = 0 is the start; t = s after s updates"),
             Fact("layers", f"{doc['layers']} ({doc['path']} path)", doc["path_note"]),
             Fact("inertia", f"{doc['inertia']:.10g}", f"Lloyd's {doc['lloyd_inertia']:.10g}; ratio"
                  f" {doc['ratio_to_lloyd']:.4f}")]
    if "alphas" in doc:
        facts.append(Fact("factors", ", ".join(f"{a:g}" for a in doc["alphas"]), "alpha_t per step; the last one"
                          " for every later step"))
    ran = result.run.alterations
    if ran:
        facts.append(Fact("altered", alterations_text(ran), "not the construction as built: the verdict and every"
                          " table are this run's; what is said of the construction need not hold of it"))
    knobs = [Fact(key, f"{value:g}") for key, value in doc["knobs"].items()]
    header = Header(f"{title[0].upper()}{title[1:]} on {source or 'the data'}", verdict=doc["verdict"],
                    verified=doc["verified"], exact=False, groups={"run": facts, "knobs": knobs},
                    messages=list(doc["problems"]))
    choice = Section("Candidates and the choice", (
        "Each step forms its candidates from the current centroids and keeps the one of least objective; the safety"
        " nets (Lloyd's chain, and for the learned construction the untrained swap's chain) are trajectories run"
        " beside it from the same start, so the kept objective is never above theirs."
        + (" This run's circuit was not the construction as built (the header's 'altered'): what is said here of the"
           " construction need not hold of it." if ran else "")), key="candidates")
    choice.add(objectives_view(doc))
    choice.add(candidates_table(doc))
    heads = Section("The heads that choose", (
        "`choose`: every token attends to the candidates' centroid tokens with score -beta_select times each"
        " candidate's objective (with the tie-order margin), so all its weight lands on the kept candidate's tokens;"
        " shown from the BOS token, summed over each candidate's k tokens. `swap_slot`: every token attends to the"
        " current centroid of least removal cost, the one the swap moves onto the farthest point."), key="heads")
    now = result.circuit.alterations()
    att = attention(result) if now == ran else None
    labels = [CANDIDATE_LABELS[c] for c in doc["candidates"]]
    if now != ran:
        # The attention is read from a re-run: with other weights or hooks it would be another run's.
        heads.add(Table(["note"], [[f"attention not drawn: the circuit was changed after this run (now:"
                                    f" {alterations_text(now)}; the run: {alterations_text(ran)}), and the page reads"
                                    " the attention from a re-run, which would not be this run"]]))
    elif att is None:
        heads.add(Table(["note"], [[f"attention not drawn: the problem has more than {PAGE_MAX_TOKENS} tokens, and"
                                    " the page reads it from the dense model, whose every layer forms a (tokens)^2"
                                    " pattern"]]))
    else:
        heads.add(_heatmap("choose_attention", "choose head: attention on each candidate (from BOS)", att["choose"],
                           labels, steps, ["rows sum to 1: the weight on each candidate's k tokens"]))
        heads.add(_heatmap("swap_slot_attention", "swap_slot head: which current centroid the swap moves",
                           att["swap_slot"], [f"c{j}" for j in range(att["swap_slot"].shape[1])], steps,
                           ["the weight on each current centroid token (from BOS)"]))
    return Report(header, [choice, heads, verification_section(doc)])
