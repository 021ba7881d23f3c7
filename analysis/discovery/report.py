"""The discovery page: the ground-truth graph beside the discovered one, the ROC curve with the baselines, the
edge table with each edge's verdict; and the command line's summary of one result.

Built on the project's report engine (:mod:`analysis.report.document`): one self-contained HTML page, plotly
figures embedded. The two graph drawings are subplots with shared axes (zoom and pan one, the other follows). In
each the forward pass runs from top to bottom (input, then head and MLP of each block, then the readout), heads
in the left column and MLPs in the right, so a deep circuit (the learned swap's 31 blocks) grows the page down,
not out of it; an edge is an arc bowed sideways by an amount that depends on the port it enters (query, key,
value, MLP, readout), so edges between the same two nodes into different ports do not overlap.
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from analysis.discovery.graph import INPUT, OUTPUT, CircuitGraph, node_layer
from analysis.discovery.scoring import FOUND, MISSED, SPURIOUS
from analysis.report.document import Fact, Header, Report, Section, Table

COLOURS = {"circuit": "#444444", FOUND: "#2ca02c", MISSED: "#d62728", SPURIOUS: "#ff7f0e"}
_PORT_BEND = {"q": 0.55, "k": 0.35, "v": 0.15, "mlp": 0.25, "out": 0.25}


def node_xy(node: str, n_layers: int) -> tuple[float, float]:
    """A node's place: ``x`` 0 for heads, 1 for MLPs (0.5 input and readout), ``y`` minus its forward position."""
    if node == INPUT:
        return 0.5, 0.0
    if node == OUTPUT:
        return 0.5, -(2.0 * n_layers + 1)
    layer = node_layer(node)
    return (0.0, -(1.0 + 2 * layer)) if node.startswith("A") else (1.0, -(2.0 + 2 * layer))


def _arc(graph: CircuitGraph, edge) -> tuple[list[float | None], list[float | None]]:
    (x0, y0), (x1, y1) = node_xy(edge.src, graph.n_layers), node_xy(edge.dst, graph.n_layers)
    # Arcs into a head bow left of the heads' column, the others right of the MLPs': they never cross a node.
    side = -1.0 if edge.dst.startswith("A") else 1.0
    bend = _PORT_BEND.get(edge.port, 0.2) * (1 + 0.08 * abs(y1 - y0))
    cx, cy = (x0 + x1) / 2 + side * (bend + 0.5), (y0 + y1) / 2
    t = np.linspace(0, 1, 16)
    xs = (1 - t) ** 2 * x0 + 2 * (1 - t) * t * cx + t**2 * x1
    ys = (1 - t) ** 2 * y0 + 2 * (1 - t) * t * cy + t**2 * y1
    return xs.tolist() + [None], ys.tolist() + [None]


def _edge_traces(graph: CircuitGraph, groups: dict[str, list[int]], col: int, fig) -> None:
    for status, idx in groups.items():
        xs, ys, hx, hy, text = [], [], [], [], []
        for i in idx:
            e = graph.edges[i]
            ax, ay = _arc(graph, e)
            xs += ax
            ys += ay
            hx.append(ax[8])
            hy.append(ay[8])
            text.append(f"{e.label} ({status}) via {', '.join(e.subspaces) or 'no data subspace'}")
        dash = "dot" if status == MISSED else "solid"
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", line=dict(color=COLOURS[status], width=1.6, dash=dash),
                                 name=f"{status} ({len(idx)})", hoverinfo="skip"), row=1, col=col)
        fig.add_trace(go.Scatter(x=hx, y=hy, mode="markers", marker=dict(size=5, color=COLOURS[status]),
                                 text=text, hoverinfo="text", showlegend=False), row=1, col=col)


def graph_figure(graph: CircuitGraph, status: list[str], title: str, truth=None) -> go.Figure:
    """Ground truth (left; default: the weights' data flow) beside the discovered graph (right), axes shared:
    found, missed and spurious edges in their colours."""
    fig = make_subplots(rows=1, cols=2, subplot_titles=("ground truth of the task", title),
                        shared_xaxes=True, shared_yaxes=True, horizontal_spacing=0.04)
    truth = ([i for i, e in enumerate(graph.edges) if e.subspaces] if truth is None
             else [int(i) for i in np.flatnonzero(truth)])
    groups = {s: [i for i, st in enumerate(status) if st == s] for s in (FOUND, MISSED, SPURIOUS)}
    nodes = graph.sources + [OUTPUT]
    xy = [node_xy(n, graph.n_layers) for n in nodes]
    for col, grp in ((1, {"circuit": truth}), (2, groups)):
        _edge_traces(graph, grp, col, fig)
        fig.add_trace(go.Scatter(x=[p[0] for p in xy], y=[p[1] for p in xy], mode="markers+text", text=nodes,
                                 textposition="middle center", textfont=dict(size=9),
                                 marker=dict(size=22, color="#deebf7", line=dict(color="#3182bd", width=1)),
                                 hoverinfo="text", showlegend=False), row=1, col=col)
        fig.update_yaxes(visible=False, row=1, col=col)
        fig.update_xaxes(visible=False, row=1, col=col)
    fig.update_layout(height=max(520, 34 * (2 * graph.n_layers + 2) + 140),
                      title="Circuit edges: ground truth and discovered", margin=dict(l=20, r=20),
                      legend=dict(orientation="h", y=-0.02, yanchor="top"))
    return fig


def discovery_report(result, description: str = "") -> Report:
    """The page of one :class:`~analysis.discovery.run.DiscoveryResult`."""
    from analysis.discovery.figures import roc_figure

    pr = result.pr
    truth = result.ground_truth
    random = result.baselines["random"]["edges"]
    weights = result.baselines["weights-only"].edges
    header = Header(
        title=f"Circuit discovery: {result.method} on the {result.graph.name or 'k-means'} circuit",
        groups={"Result": [
            Fact("step AUC", _num(result.step_auc), f"random {_num(random['step_auc'][0])} ± {_num(random['step_auc'][1])},"
                 f" weights-only {_num(weights['step_auc'])}"),
            Fact("AUROC / AUPRC", f"{_num(result.auroc)} / {_num(result.scored.edges['auprc'])}",
                 "trapezoid under the monotone ROC envelope; average precision"),
            Fact("nodes: step AUC", _num(result.scored.nodes["step_auc"]), "heads and MLPs"),
            Fact("precision / recall", f"{_num(pr.precision)} / {_num(pr.recall)}",
                 f"{pr.found} found, {pr.missed} missed, {pr.spurious} spurious"),
            Fact("ground truth", f"{int(truth.members.sum())} of {len(truth.verdicts)} candidate edges",
                 f"{int((~truth.decided).sum())} undecided; {result.ablation} ablation, {result.metric} metric"),
        ]},
        messages=[description] if description else [],
    )
    report = Report(header)
    chosen = (f"ACDC at threshold {result.threshold:g}" if result.method == "acdc"
              else f"{result.method}: the {int(result.truth.sum())} highest scores")
    report.add_section(Section("Graphs", "Left: the ground truth of the task; right: what the method reported (the"
                               " axes are shared: zoom one, both follow). Top to bottom is the forward pass; heads"
                               " in the left column, MLPs in the right. Green: found; red dotted: in the truth but"
                               " not reported; orange: reported but not in the truth. Hover the dot on an edge for"
                               " its name and subspaces.",
                               [graph_figure(result.graph, result.status, chosen, result.truth)]))
    report.add_section(Section("ROC curve", "The monotone envelope of the method's subgraphs (ACDC: one per swept"
                               " threshold; a score: one per distinct value), the weights-only baseline, and chance"
                               " (the random baseline's mean curve).",
                               [roc_figure({result.method: (result.fpr, result.tpr, result.step_auc)},
                                           result.baselines)]))
    rows = [[e.label, ", ".join(e.subspaces) or "-", f"{s:.3g}", st, v.status + (f" ({v.reason})" if v.reason else ""),
             _witness(v.witness)]
            for e, s, st, v in zip(result.graph.edges, result.scores, result.status, truth.verdicts)
            if v.status != "inert" or st != "absent" or e.subspaces]
    report.add_section(Section("Edges", "Every edge in the truth, reported, or carrying data in the weights; its"
                               " verdict (member with its witness: sampler, seed and the readout's change; inert with"
                               " the reason; undecided).",
                               [Table(["edge", "data subspaces", "score", "status", "truth", "witness"], rows)]))
    return report


def _num(x) -> str:
    return "-" if x is None or x != x else f"{x:.3f}"


def _witness(w) -> str:
    return "" if not w else f"{w['sampler']} seed {w['seed']}: {w['change']:.2g}"


def summary(result) -> str:
    """The command line's lines for one result."""
    truth = result.ground_truth
    counts = truth.counts()
    e, nd = result.scored.edges, result.scored.nodes
    random = result.baselines["random"]["edges"]
    weights = result.baselines["weights-only"].edges
    pr = result.pr
    chosen = f"threshold {result.threshold:g}" if result.method == "acdc" else "top scores"
    inert = ", ".join(f"{v} {k[7:-1]}" for k, v in counts.items() if k.startswith("inert"))
    return "\n".join([
        f"ground truth: {counts['member']} of {len(truth.verdicts)} candidate edges (each with a witness), inert:"
        f" {inert}; undecided {counts['undecided']}; {100 * truth.coverage:.0f}% of the {int(truth.graph.truth.sum())}"
        f" data-flow edges; inert edges jointly inert: {'yes' if truth.jointly_inert else 'no'}",
        f"{result.method}: step AUC {_num(e['step_auc'])}, AUROC {_num(e['auroc'])}, AUPRC {_num(e['auprc'])};"
        f" nodes: step AUC {_num(nd['step_auc'])}",
        f"baselines: random step AUC {_num(random['step_auc'][0])} ± {_num(random['step_auc'][1])}, weights-only"
        f" {_num(weights['step_auc'])}",
        f"reported subgraph ({chosen}): precision {_num(pr.precision)}, recall {_num(pr.recall)}"
        f" ({pr.found} found, {pr.missed} missed, {pr.spurious} spurious)"])
