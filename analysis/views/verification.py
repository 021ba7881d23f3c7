"""The verification, drawn: the per-iteration table, the objective and its certificate, the ties.

* :func:`verification_table`: the :class:`~analysis.verify.VerificationReport` records as a table, one row per
  ``t = 0 .. T`` (the centroids after ``t`` updates and the assignment to them).
* :func:`objective_plot`: per iteration ``t = 0 .. T``, the k-means objective of the circuit's state (its
  centroids ``C`` and the assignment to them it wrote into ``Y``) against the reference algorithm's, the
  assignment and update margins (the certificate), and the largest centroid difference from the reference.
* :func:`ties_table`: every tied point and every mismatch the verifier listed.
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from analysis.capture import AssignAttention, UpdateAttention
from analysis.proof.bound import format_bound
from analysis.verify.verdict import bound_text, not_applicable
from analysis.views._common import View, as_capture, centroid_labels, point_labels, report_of
from analysis.views.trajectories import centroid_iterates, iterate_clusters, reference_run
from circuits import reference as lloyd_reference
from circuits.sharpness import FLOAT64_UNDERFLOW


def _require_report(obj):
    rep = report_of(obj)
    if rep is None:
        raise TypeError("this view needs a verified run (a RunResult with .report), not a bare capture")
    return rep


def _table(header: list[str], columns: list[list], height: int | None = None) -> go.Figure:
    fig = go.Figure(go.Table(
        header=dict(values=[f"<b>{h}</b>" for h in header], fill_color="#e8eef4", align="right",
                    font=dict(size=12)),
        cells=dict(values=columns, align="right", fill_color="white", height=24, font=dict(size=12)),
    ))
    rows = len(columns[0]) if columns else 0
    fig.update_layout(height=height or min(640, 70 + 26 * (rows + 1)), margin=dict(l=5, r=5, t=10, b=5))
    return fig


def verification_table(obj) -> View:
    """One row per ``t = 0 .. T`` of the report (every number in a row is at its ``t``), as a plotly table of every
    row (``data["header"]`` and ``data["rows"]`` hold them as text, for an HTML table)."""
    rep = _require_report(obj)
    records = rep.records
    header = ["t", "labels = ref", "max |dc|", "objective at t", "reference's objective at t", "min margin",
              "leak bound", "step |dc|", "step errors", "ties"]
    rows = [[r.iteration, f"{r.label_agreement:.2%}", f"{r.max_centroid_error:.3g}", f"{r.objective_circuit:.10g}",
             f"{r.objective_reference:.10g}", f"{r.min_margin:.3g}", bound_text(r.leak_bound),
             f"{r.step_centroid_error:.3g}", r.step_label_errors, r.ties] for r in records]
    # Fields that apply to some runs only (the update certificate where the update head is a softmax; soft
    # responsibilities, outliers, proven bounds where a variant fills them): shown where they apply, never as nan.
    optional = [("update margin", "update_min_margin", lambda v: f"{v:.3g}", lambda v: v is not None),
                ("update leak", "update_leak_bound", bound_text, lambda v: v is not None),
                ("max |dY|", "max_assignment_error", lambda v: f"{v:.3g}", lambda v: v != 0),
                ("update |dw|", "update_weight_error", lambda v: f"{v:.3g}", lambda v: v != 0),
                ("outliers", "outliers", str, lambda v: v != 0),
                ("proven |dc|", "proven_bound", format_bound, lambda v: v is not None)]
    notes = ["t: the centroids after t updates (t = 0: the initial ones) and the assignment to them; labels = ref:"
             " share of points whose label equals the reference trajectory's at t; max |dc|: largest centroid"
             " coordinate difference from the reference's at t (user units); objective at t: sum of squared"
             " distances from each point to its centroid at t; margins are score gaps between the chosen key and"
             " the best other key; a leak bound of 0 means the attention pattern is exactly hard, one of 1 or more"
             " bounds nothing (\"no bound\"); step columns compare each block with the reference step applied to"
             " the block's own input."]
    for title, attr, fmt, used in optional:
        values = [getattr(r, attr, None) for r in records]
        if any(v is not None and used(v) for v in values):
            header.append(title)
            for row, v in zip(rows, values):
                row.append(not_applicable("not computed") if v is None else fmt(v))
        elif attr == "update_min_margin":
            notes.append("update margin and leak: not shown, the update head's normalisation is swapped by the"
                         " variant (no softmax whose margin would certify it).")
    columns = [list(col) for col in zip(*rows)]
    data = dict(header=header, rows=rows, records=records)
    # As tall as its rows: a table that scrolled hid the last iterations (the report draws it as an HTML table).
    figure = _table(header, columns, height=70 + 26 * (len(rows) + 2))
    return View("verification_table", "Verification at each t", figure, data, notes)


def objective_plot(obj, b: int = 0, reference: np.ndarray | bool | None = None) -> View:
    """Objective (circuit vs reference), margins and centroid error for ``t = 0 .. T``."""
    data, has_reference = _objective_data(obj, b, reference)
    t, obj_ref, c_err = data["iteration"], data["objective_reference"], data["max_centroid_error"]
    a_leak, u_margin = data["assign_leak_bound"], data["update_min_margin"]
    T1 = len(t)
    fig = make_subplots(rows=3, cols=1, shared_xaxes=True, vertical_spacing=0.07,
                        subplot_titles=("k-means objective at t", "certificate: smallest margin (log)",
                                        "largest centroid difference from the reference (log; triangles at the bottom: exactly 0)"))
    fig.add_trace(go.Scatter(x=t, y=data["objective_circuit"], mode="lines+markers", name="circuit (C and Y)",
                             line=dict(color="#1f77b4", width=3)), row=1, col=1)
    if obj_ref is not None:
        fig.add_trace(go.Scatter(x=t, y=obj_ref, mode="lines+markers", name="reference",
                                 line=dict(color="black", dash="dash"),
                                 marker=dict(symbol="circle-open", size=11)), row=1, col=1)
    fig.add_trace(go.Scatter(x=t, y=data["assign_min_margin"], mode="lines+markers",
                             name="assign margin (min over points)", customdata=[bound_text(x) for x in a_leak],
                             hovertemplate="t=%{x}: %{y:.4g}<br>leak bound %{customdata}<extra></extra>",
                             line=dict(color="#2ca02c")), row=2, col=1)
    if np.isfinite(u_margin).any():
        fig.add_trace(go.Scatter(x=t, y=u_margin, mode="lines+markers", name="update margin (min over centroids)",
                                 line=dict(color="#9467bd")), row=2, col=1)
    fig.add_trace(go.Scatter(x=[0, T1 - 1], y=[FLOAT64_UNDERFLOW] * 2, mode="lines", hoverinfo="skip",
                             name=f"{FLOAT64_UNDERFLOW:.0f}: exactly hard in float64 above",
                             line=dict(color="#777", dash="dot")), row=2, col=1)
    if c_err is not None:
        rep = report_of(obj)
        _centroid_error_row(fig, t, c_err, rep.tolerances.centroid if rep is not None else None)
    fig.update_yaxes(type="log", row=2, col=1)
    fig.update_xaxes(title=dict(text="iteration t (centroids after t updates, points assigned to them)"),
                     dtick=1, row=3, col=1)
    fig.update_layout(height=760, margin=dict(l=70, r=20, t=40, b=50), legend=dict(x=1.01, y=1))
    notes = []
    if not has_reference:
        notes.append(f"no reference drawn for variant {as_capture(obj).circuit.variant!r}")
    return View("objective", "Objective and certificate per iteration", fig, data, notes)


def _objective_data(obj, b: int, reference: np.ndarray | bool | None) -> tuple[dict, bool]:
    """Per iteration: the circuit's and the reference's objective, the centroid error and the certificate's
    margins; and whether a reference is drawn."""
    cap = as_capture(obj)
    circ, X = cap.circuit, cap.encoded.X[b]
    cents = centroid_iterates(obj, b)
    T1 = len(cents)
    # "Objective at t": the verifier's records where the run was verified (the same numbers as the table), else
    # from the circuit's own state: centroids in C, each point at its (argmax) assignment, outliers nowhere.
    rep = report_of(obj)
    records = rep.records if rep is not None and b == 0 and len(rep.records) == T1 else None
    if records is not None:
        obj_circuit = np.array([r.objective_circuit for r in records])
    else:
        labels = iterate_clusters(obj, b)[1]
        obj_circuit = np.array([lloyd_reference.objective(X, cents[i], labels[i]) for i in range(T1)])
    run = reference_run(obj, b) if reference is None else None
    if reference is None:
        reference = False if run is None else run.centroids
    ref_c = None if reference is False else np.asarray(reference, dtype=np.float64)
    obj_ref = c_err = None
    if ref_c is not None:
        # The reference's own objective when it ran here, else that of its centroids with nearest assignment.
        obj_ref = (np.array([r.objective_reference for r in records]) if records is not None
                   else run.objectives if run is not None
                   else np.array([lloyd_reference.objective(X, ref_c[i]) for i in range(T1)]))
        c_err = np.abs(cents - ref_c[:T1]).max(axis=(1, 2))
    assign_att = [cap.layers[layer].attention for layer in circ.assignment_layers]
    update_att = [cap.layers[layer].attention for layer in circ.centroid_layers]
    a_margin = np.array([a.margin[b].min() if isinstance(a, AssignAttention) else np.nan for a in assign_att])
    a_leak = np.array([a.leak_bound[b].max() if isinstance(a, AssignAttention) else np.nan for a in assign_att])
    u_margin = np.array([u.margin[b].min() if isinstance(u, UpdateAttention) and u.margin is not None else np.nan
                         for u in update_att])
    data = dict(iteration=np.arange(T1), objective_circuit=obj_circuit, objective_reference=obj_ref,
                max_centroid_error=c_err, assign_min_margin=a_margin, assign_leak_bound=a_leak,
                update_min_margin=u_margin)
    return data, ref_c is not None


def _centroid_error_row(fig: go.Figure, t: np.ndarray, c_err: np.ndarray, tol: float | None) -> None:
    """The third row: the largest centroid difference on a log axis, exact zeros marked below it."""
    T1 = len(t)
    positive = c_err[c_err > 0]
    # A log axis has no 0. Exact agreement gets its own trace, drawn on a row just below the smallest real
    # value (or the tolerance), and the axis spans the real values only: never a made-up 1e-300.
    known = [*positive, *([tol] if tol else [])]
    low = min(known) if known else float(np.finfo(np.float64).eps)
    high = max(known) if known else low
    floor = low / 10
    exact = c_err == 0
    fig.add_trace(go.Scatter(
        x=t, y=np.where(exact, np.nan, c_err), mode="lines+markers", name="max |c - c_ref| (user units)",
        marker=dict(size=7), connectgaps=False, customdata=c_err.astype(str),
        hovertemplate="t=%{x}: %{customdata}<extra></extra>", line=dict(color="#d62728"),
    ), row=3, col=1)
    if exact.any():
        fig.add_trace(go.Scatter(
            x=t[exact], y=np.full(int(exact.sum()), floor), mode="markers+text", name="exactly 0",
            marker=dict(symbol="triangle-down", size=11, color="#d62728"), text=["exact 0"] * int(exact.sum()),
            textposition="top center", textfont=dict(size=10, color="#d62728"),
            hovertemplate="t=%{x}: exactly 0<extra></extra>",
        ), row=3, col=1)
    fig.update_yaxes(range=[np.log10(floor) - 0.3, np.log10(high) + 0.5], row=3, col=1)
    if tol:
        fig.add_trace(go.Scatter(x=[0, T1 - 1], y=[tol] * 2, mode="lines", hoverinfo="skip",
                                 name="tolerance", line=dict(color="#777", dash="dot")), row=3, col=1)
    fig.update_yaxes(type="log", exponentformat="e", row=3, col=1)


def ties_table(obj, limit: int = 200) -> View:
    """Every tie and every mismatch of the verification report (the first ``limit`` of each drawn)."""
    rep = _require_report(obj)
    plab, clab = point_labels(obj), centroid_labels(obj)
    header = ["kind", "point", "layer", "t", "candidates / expected", "chosen", "margin", "gap"]
    rows = [["tie", plab[t.point], t.layer, t.iteration, ", ".join(clab[j] for j in t.candidates), clab[t.chosen],
             f"{t.margin:.3g}", ""] for t in rep.ties[:limit]]
    rows += [[f"{m.kind} ({m.check})", plab[m.point], m.layer, m.iteration, clab[m.expected],
              clab[m.got] if m.got >= 0 else "none", f"{m.margin:.3g}", f"{m.gap:.3g}"]
             for m in rep.mismatches[:limit]]
    if not rows:
        rows = [["none", "", "", "", "", "", "", ""]]
    columns = [list(col) for col in zip(*rows)]
    data = dict(ties=rep.ties, mismatches=rep.mismatches, header=header, rows=rows)
    notes = [f"{len(rep.ties)} tie(s), {len(rep.mismatches)} mismatch(es) with the reference "
             f"({len(rep.errors)} of them errors). t: the assignment to the centroids after t updates; a tie is an"
             " exact tie (equal squared distances in rational arithmetic)."]
    if len(rep.ties) > limit or len(rep.mismatches) > limit:
        notes.append(f"only the first {limit} of each are listed; the verification counted all of them")
    return View("ties", "Ties and mismatches", _table(header, columns), data, notes)
