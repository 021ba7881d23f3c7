"""The results' figures and text: ROC curves with the baselines on one axes, one figure per construction, and the
tables ``discover --table`` prints.

Every curve is a monotone ROC envelope (:func:`~analysis.discovery.scoring.monotone_envelope`); a method's curve
in the table's figure is the vertical average over seeds (the mean true-positive rate at each false-positive rate,
each seed's envelope interpolated linearly). Chance is the random baseline's mean curve (the diagonal); the
weights-only baseline is one subgraph, so its envelope runs from (0, 0) through its one point to (1, 1).
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from analysis.report.document import Header, Report, Section

_GRID = np.linspace(0.0, 1.0, 101)
_COLOURS = {"acdc": "#1f77b4", "eap": "#2ca02c", "eap-ig": "#9467bd", "weights-only": "#ff7f0e", "chance": "#999999"}
_LABELS = {"step_auc": "step AUC", "auroc": "AUROC (envelope)", "auprc": "AUPRC", "auroc_raw": "AUROC (raw points)"}
#: The edge-level areas the table prints (``auroc_raw`` is in the JSON).
PRINTED = ("step_auc", "auroc", "auprc")


def _fmt(x) -> str:
    return "-" if x is None or x != x else f"{x:.3f}"


def _baseline_traces(weights_fpr, weights_tpr, weights_step: float, random_step: tuple[float, float]) -> list:
    return [go.Scatter(x=weights_fpr, y=weights_tpr, mode="lines+markers", name=f"weights-only (step AUC"
                       f" {_fmt(weights_step)})", line=dict(color=_COLOURS["weights-only"], dash="dot")),
            go.Scatter(x=[0, 1], y=[0, 1], mode="lines", line=dict(dash="dash", color=_COLOURS["chance"]),
                       name=f"random (step AUC {_fmt(random_step[0])} ± {_fmt(random_step[1])})")]


def _layout(fig: go.Figure, title: str) -> go.Figure:
    fig.update_layout(title=title, xaxis_title="false-positive rate", yaxis_title="true-positive rate", height=480,
                      xaxis=dict(range=[-0.02, 1.02]), yaxis=dict(range=[-0.02, 1.02]))
    return fig


def roc_figure(curves: dict[str, tuple[np.ndarray, np.ndarray, float]], baselines: dict) -> go.Figure:
    """``{name: (fpr, tpr, step AUC)}`` envelopes and the baselines of one result, on one axes."""
    fig = go.Figure()
    for name, (fpr, tpr, step) in curves.items():
        fig.add_trace(go.Scatter(x=fpr, y=tpr, mode="lines+markers", name=f"{name} (step AUC {_fmt(step)})",
                                 line=dict(color=_COLOURS.get(name))))
    weights = baselines["weights-only"]
    for trace in _baseline_traces(weights.fpr, weights.tpr, weights.edges["step_auc"],
                                  baselines["random"]["edges"]["step_auc"]):
        fig.add_trace(trace)
    return _layout(fig, "ROC envelope against the ground truth, with the baselines")


def _mean_curve(rows: list[dict]) -> np.ndarray:
    return np.mean([np.interp(_GRID, r["roc"]["fpr"], r["roc"]["tpr"]) for r in rows], axis=0)


def construction_figure(result, construction: str) -> go.Figure:
    """Every method's mean ROC envelope and the baselines for each task of ``construction``; a menu picks the task
    (corruption family, ablation, metric)."""
    fig = go.Figure()
    buttons, visible_sets = [], []
    tasks = [t for metric in dict.fromkeys(r["metric"] for r in result.rows) for t in result.tasks(metric)
             if t["construction"] == construction]
    for task in tasks:
        start = len(fig.data)
        truth = result.truth_of(task)
        for method in dict.fromkeys(r["method"] for r in result.rows):
            rows = [r for r in result.rows if r["method"] == method and all(r[k] == v for k, v in task.items())]
            if not rows:
                continue
            steps = [r["edges"]["step_auc"] for r in rows]
            fig.add_trace(go.Scatter(x=_GRID, y=_mean_curve(rows), mode="lines", line=dict(color=_COLOURS.get(method)),
                                     name=f"{method} (step AUC {_fmt(float(np.mean(steps)))}, {len(rows)} seeds)"))
        w = truth["baselines"]["weights-only"]
        for trace in _baseline_traces(w["roc"]["fpr"], w["roc"]["tpr"], w["edges"]["step_auc"],
                                      truth["baselines"]["random"]["edges"]["step_auc"]):
            fig.add_trace(trace)
        visible_sets.append(range(start, len(fig.data)))
        buttons.append(f"{task['corruption']}, {task['ablation']}, {task['metric']}")
    for i, trace in enumerate(fig.data):
        trace.visible = i in visible_sets[0]
    fig.update_layout(updatemenus=[dict(
        buttons=[dict(label=label, method="update",
                      args=[{"visible": [i in shown for i in range(len(fig.data))]}])
                 for label, shown in zip(buttons, visible_sets)],
        direction="down", x=0.0, xanchor="left", y=1.14, yanchor="top")])
    return _layout(fig, f"{construction}: mean ROC envelope of every method, and the baselines")


def table_page(result) -> Report:
    """One page, one figure per construction (``discover --table --out``)."""
    report = Report(Header(title="Circuit discovery: every method against the proven ground truth"))
    for construction in dict.fromkeys(r["construction"] for r in result.rows):
        report.add_section(Section(construction, "The menu picks the task: corruption family, ablation kind and"
                                   " metric. Curves are averaged over seeds.",
                                   [construction_figure(result, construction)]))
    return report


def truth_table(result) -> str:
    """The ground truths: members, inert edges by reason, undecided, coverage, and whether jointly inert."""
    lines = ["| construction | corruption | ablation | members | inert: weights / invariant / flow | undecided |"
             " share of the data flow | jointly inert |", "|" + "---|" * 8]
    for t in result.truths:
        c = t["counts"]
        lines.append(f"| {t['construction']} | {t['corruption']} | {t['ablation']} | {t['members']} of"
                     f" {t['candidates']} | {c['inert (weights)']} / {c['inert (invariant)']} / {c['inert (flow)']}"
                     f" | {t['undecided']} | {t['coverage']:.2f} | {'yes' if t['jointly_inert'] else 'no'} |")
    return "\n".join(lines)


def table_text(result) -> str:
    """Everything ``discover --table`` prints: the truths, then per metric the edge-level tables of :data:`PRINTED`
    and the node-level step AUC; then what was skipped."""
    parts = ["Ground truths (edges):", truth_table(result)]
    for metric in dict.fromkeys(r["metric"] for r in result.rows):
        for key in PRINTED:
            parts += ["", f"{_LABELS[key]}, edges, metric {metric} (mean ± std (min-max, seeds)):",
                      result.markdown(metric, key)]
        parts += ["", f"step AUC, nodes (heads and MLPs), metric {metric}:", result.markdown(metric, "step_auc", "nodes")]
    parts += [""] + [f"skipped: {line}" for line in result.skipped]
    return "\n".join(parts)
