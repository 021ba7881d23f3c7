"""Views of a drift analysis (:class:`~analysis.drift.record.DriftAnalysis`): what training changed, as figures.

Each function takes the analysis and returns a :class:`~analysis.views.View` (its data and a plotly figure), or
``None`` where the analysis holds nothing to draw; :func:`analysis.report.drift.drift_report` puts them on a page.

==========================  ==============================================================================
:func:`view_behaviour`      objective, ARI, assignment entropy and applied stiffness per step
:func:`view_similarity`     cosine and relative distance of each head circuit to the construction
:func:`view_singular_values`  singular values (``FactoredMatrix.S``) of each circuit, trained vs construction
:func:`view_blocks`         change of every (row subspace, column subspace) block, one circuit at a time
:func:`view_circuits`       trained and construction matrices side by side in the named basis
:func:`view_patterns`       attention of one problem, exact and trained, with a slider over the steps
:func:`view_history`        drift, validation ratio and knobs against training step (from the training log)
:func:`view_sweep`          the untrained construction swept over its stiffness, against the trained model
==========================  ==============================================================================
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from analysis.drift.record import DriftAnalysis
from analysis.drift.weights import BLOCK_NAMES, subspace_blocks
from analysis.views._common import View
from analysis.views.figure_parts import cluster_colour, colorbar_beside, signed_log, signed_log_ticks
from circuits.blocks import ASSIGN, UPDATE


def integer_steps(fig: go.Figure, steps: int, **where) -> None:
    """Step axes tick at whole steps only (a step is a count), at most about ten ticks."""
    fig.update_xaxes(tick0=0, dtick=max(1, int(np.ceil(steps / 10))), tickformat="d", **where)


def _band(fig: go.Figure, x: list[int], mean: list[float], std: list[float], colour: str, name: str,
          row: int, col: int) -> None:
    """Mean +- one standard deviation over tasks, as a translucent band behind the mean's line."""
    lo = (np.asarray(mean) - np.asarray(std)).tolist()
    hi = (np.asarray(mean) + np.asarray(std)).tolist()
    fig.add_trace(go.Scatter(x=x + x[::-1], y=hi + lo[::-1], mode="lines", fill="toself", fillcolor=colour, opacity=0.18,
                             line=dict(width=0), hoverinfo="skip", showlegend=False, legendgroup=name,
                             name=f"{name} +- std"), row, col)


def view_behaviour(a: DriftAnalysis) -> View:
    """Per step, each model's mean over the held-out tasks with a band of one standard deviation over them."""
    beh = a.behaviour
    steps = list(range(beh.steps + 1))
    panels = (("objective", "k-means objective"), ("ari", "ARI to generating components"),
              ("entropy", "assignment entropy (nats)"), ("stiffness", "stiffness applied (a x BETA)"))
    fig = make_subplots(rows=2, cols=2, subplot_titles=[f"{title} (mean +- std over tasks)" for _, title in panels])
    colours = {"trained": "#d62728", "construction": "#1f77b4", "Lloyd's": "#2ca02c"}
    for pi, (quantity, _) in enumerate(panels):
        row, col = pi // 2 + 1, pi % 2 + 1
        for name, ys in getattr(beh, quantity).items():
            std = beh.spread[quantity][name]
            _band(fig, steps, ys, std, colours[name], name, row, col)
            fig.add_trace(go.Scatter(x=steps, y=ys, name=name, legendgroup=name, showlegend=pi == 0,
                                     customdata=std, hovertemplate="step %{x}: %{y:.4g} (std %{customdata:.3g})",
                                     line=dict(color=colours[name])), row, col)
    fig.update_xaxes(title_text="step", row=2)
    integer_steps(fig, beh.steps)
    fig.update_layout(height=620, title=f"Behaviour on {beh.tasks} held-out tasks (n={beh.n}), step by step")
    return View("drift-behaviour", "behaviour per step", fig, {"behaviour": beh.__dict__})


def fitted_range(values, pad: float = 0.15) -> list[float]:
    """An axis range around ``values`` (``pad`` of their span on each side), so that differences between them show:
    cosines of 0.988 to 0.998 drawn on 0..1 are one flat line."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    if v.size == 0:
        return [0.0, 1.0]
    a, b = float(v.min()), float(v.max())
    span = b - a if b > a else max(abs(a), 1.0) * 1e-3
    return [a - pad * span, b + pad * span]


def view_similarity(a: DriftAnalysis) -> View:
    """Cosine and relative distance of each head circuit to the construction, as points on axes fitted to them."""
    labels = [f"{BLOCK_NAMES[c.block]} {c.which}" for c in a.circuits]
    cosines, distances = [c.cosine for c in a.circuits], [c.rel_frobenius for c in a.circuits]
    fig = make_subplots(rows=1, cols=2, subplot_titles=("cosine similarity to the construction (1: same direction)",
                                                        "relative Frobenius distance |W - W0| / |W0|"))
    fig.add_trace(go.Scatter(x=labels, y=cosines, mode="markers", marker=dict(size=12, color="#1f77b4"),
                             name="cosine", hovertemplate="%{x}: cosine %{y:.6f}<extra></extra>"), 1, 1)
    fig.add_trace(go.Scatter(x=labels, y=distances, mode="markers", marker=dict(size=12, color="#d62728"),
                             name="|W - W0| / |W0|", hovertemplate="%{x}: %{y:.4g}<extra></extra>"), 1, 2)
    fig.update_yaxes(range=fitted_range(cosines), row=1, col=1)
    fig.update_yaxes(range=fitted_range(distances), row=1, col=2)
    fig.update_layout(height=380, showlegend=False, title="Trained head circuits vs the construction (basis-invariant;"
                      " each axis spans its values)")
    return View("drift-similarity", "cosine and distance", fig, {"cosine": cosines, "rel_frobenius": distances})


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


def _separators(dims: np.ndarray, layout, axis: str, xref: str, yref: str) -> list[dict]:
    """Lines between the named subspaces along one axis of a heatmap whose entries are the layout ``dims``."""
    names = [layout.subspace_of(int(q))[0] for q in dims]
    cuts = [i + 0.5 for i in range(len(names) - 1) if names[i] != names[i + 1]]
    line = dict(color="#333", width=1)
    if axis == "x":
        return [dict(type="line", xref=xref, yref=f"{yref} domain", x0=c, x1=c, y0=0, y1=1, line=line) for c in cuts]
    return [dict(type="line", xref=f"{xref} domain", yref=yref, x0=0, x1=1, y0=c, y1=c, line=line) for c in cuts]


def _circuit_scales(W: np.ndarray, floor: float) -> dict[str, dict]:
    """One panel's colouring on both scales: linear (diverging, centred at 0, its own largest magnitude at the
    ends) and signed log (each decade above ``floor`` one step)."""
    top = max(float(np.abs(W).max()), 1e-300)
    log_top = float(signed_log(np.array([top]), floor)[0])
    tickvals, ticktext = signed_log_ticks(floor, top)
    return {"linear": dict(z=W, zmin=-top, zmax=top, tickvals=None, ticktext=None, title="entry"),
            "signed log": dict(z=signed_log(W, floor), zmin=-log_top, zmax=log_top, tickvals=tickvals,
                               ticktext=ticktext, title="entry (signed log)")}


def view_circuits(a: DriftAnalysis) -> View:
    """Trained and construction matrices side by side, restricted to dimensions either touches, with lines between
    subspaces. Colours are linear and diverging, centred at 0, each panel on its own bar from minus to plus its
    largest magnitude; a button switches both to a signed log scale (the sink and stiffness weights are decades
    above the rest, which the linear scale draws near white)."""
    labels = a.layout.labels
    fig = make_subplots(rows=1, cols=2, subplot_titles=("construction", "trained"), horizontal_spacing=0.16)
    buttons, n_traces, data, scales = [], 2 * len(a.circuits), [], []
    for i, c in enumerate(a.circuits):
        both = np.abs(c.construction) + np.abs(c.trained)
        scale = max(float(both.max()), 1e-12)
        rows = np.flatnonzero(both.max(1) > 1e-3 * scale)
        cols = np.flatnonzero(both.max(0) > 1e-3 * scale)
        nonzero = np.abs(np.concatenate([c.construction.ravel(), c.trained.ravel()]))
        nonzero = nonzero[nonzero > 0]
        top = float(nonzero.max()) if nonzero.size else 1.0
        # Six decades below the largest entry: on the signed log scale smaller ones are drawn at the floor.
        floor = max(float(nonzero.min()) if nonzero.size else 1.0, top * 1e-6)
        for j, (W, name) in enumerate(((c.construction, "construction"), (c.trained, "trained"))):
            sub = W[np.ix_(rows, cols)]
            both_scales = _circuit_scales(sub, floor)
            scales.append(both_scales)
            lin = both_scales["linear"]
            fig.add_trace(go.Heatmap(z=lin["z"], x=[labels[q] for q in cols], y=[labels[q] for q in rows],
                                     customdata=sub, colorscale="RdBu_r", zmid=0, zmin=lin["zmin"], zmax=lin["zmax"],
                                     visible=i == 0, showscale=True, name=name,
                                     colorbar=colorbar_beside(fig, 1, j + 1, 2, lin["title"]),
                                     hovertemplate="row %{y}, col %{x}<br>%{customdata:.4g}<extra></extra>"), 1, j + 1)
        shapes = []
        for xref, yref in (("x", "y"), ("x2", "y2")):
            shapes += _separators(cols, a.layout, "x", xref, yref) + _separators(rows, a.layout, "y", xref, yref)
        data.append(dict(rows=rows, cols=cols, floor=floor, shapes=shapes))
        buttons.append(dict(label=f"{BLOCK_NAMES[c.block]} {c.which}", method="update",
                            args=[{"visible": [t // 2 == i for t in range(n_traces)]}, {"shapes": shapes}]))
    scale_buttons = [dict(label=kind, method="restyle", args=[{
        "z": [s[kind]["z"] for s in scales], "zmin": [s[kind]["zmin"] for s in scales],
        "zmax": [s[kind]["zmax"] for s in scales], "colorbar.tickvals": [s[kind]["tickvals"] for s in scales],
        "colorbar.ticktext": [s[kind]["ticktext"] for s in scales],
        "colorbar.title.text": [s[kind]["title"] for s in scales]}]) for kind in ("linear", "signed log")]
    fig.update_yaxes(autorange="reversed")
    fig.update_layout(height=760, margin=dict(t=140),
                      title="Head circuits in the named residual basis (rows read by query/value, columns by key/written)",
                      shapes=data[0]["shapes"] if data else [],
                      updatemenus=[dict(buttons=buttons, x=0, y=1.06, xanchor="left", yanchor="bottom"),
                                   dict(type="buttons", direction="right", buttons=scale_buttons, active=0, x=1,
                                        y=1.06, xanchor="right", yanchor="bottom", showactive=True)])
    return View("drift-circuits", "circuits side by side", fig, {"circuits": data},
                notes=["Colour: linear, diverging at 0, each panel on its own bar from minus to plus its largest"
                       " magnitude (hover for the entry). The 'signed log' button draws each decade as one step"
                       " (entries more than six decades below the largest at the floor). Lines separate the residual"
                       " stream's named subspaces."])


def first_attended_step(p) -> int:
    """Index (into ``p.steps``) of the first step at which every panel (each model's assign and update head) has
    non-zero attention; 0 if none has."""
    for si in range(len(p.steps)):
        if all(float(np.max(m[si])) > 0 for heads in (p.assign, p.update) for m in heads.values()):
            return si
    return 0


def view_patterns(a: DriftAnalysis) -> View:
    """Assign and update patterns of one problem per step, every panel on its own colour bar from 0 to its own
    largest weight (the exact update head's 1 / cluster size would otherwise wash out a trained head's softer
    weights). The page opens at the first step with non-zero attention in every panel; at step 0 the update head
    has not run, which its panels say instead of drawing zeros."""
    p = a.patterns
    names = list(p.assign)
    cols = len(names)
    fig = make_subplots(rows=2, cols=cols, subplot_titles=[f"{name}: assign head, point -> centroid" for name in names]
                        + [f"{name}: update head, centroid -> point" for name in names], vertical_spacing=0.16,
                        horizontal_spacing=0.14)
    n_titles = len(fig.layout.annotations)
    steps_traces, notes, zmax = [], [], {f"{name} {head}": [] for name in names for head in ("assign", "update")}
    for si, t in enumerate(p.steps):
        idx = []
        for ci, name in enumerate(names):
            for row, head, z, colours in ((1, "assign", p.assign[name][si].T, "Viridis"),
                                          (2, "update", p.update[name][si], "Cividis")):
                top = float(np.max(z)) if z.size else 0.0
                zmax[f"{name} {head}"].append(top)
                if top <= 0:
                    notes.append((si, row, ci, f"{head} head: no attention at step {t}"
                                  + (" (it first runs at step 1)" if head == "update" and t == 0 else "")))
                    continue
                fig.add_trace(go.Heatmap(z=z, colorscale=colours, zmin=0, zmax=top, name=f"{name} {head}",
                                         colorbar=colorbar_beside(fig, row, ci + 1, cols, head),
                                         hovertemplate="point %{x}, centroid %{y}: %{z:.4g}<extra></extra>"),
                              row, ci + 1)
                idx.append(len(fig.data) - 1)
        steps_traces.append(idx)
    for si, row, ci, text in notes:
        axis = (row - 1) * cols + ci + 1
        suffix = "" if axis == 1 else str(axis)
        fig.add_annotation(text=text, x=0.5, y=0.5, xref=f"x{suffix} domain", yref=f"y{suffix} domain",
                           showarrow=False, font=dict(color="#555"), visible=False)
    active = first_attended_step(p)
    total = len(fig.data)
    for i, trace in enumerate(fig.data):
        trace.visible = i in steps_traces[active]
    for ni, (si, *_rest) in enumerate(notes):
        fig.layout.annotations[n_titles + ni].visible = si == active
    slider = dict(active=active, currentvalue=dict(prefix="step "), pad=dict(t=40), steps=[
        dict(label=str(t), method="update", args=[
            {"visible": [i in steps_traces[si] for i in range(total)]},
            {f"annotations[{n_titles + ni}].visible": note[0] == si for ni, note in enumerate(notes)}])
        for si, t in enumerate(p.steps)])
    bounds = np.flatnonzero(np.diff(p.components)) + 0.5
    for ci in range(cols):
        for b in bounds:
            fig.add_vline(x=float(b), line=dict(color="white", width=1), row=1, col=ci + 1)
            fig.add_vline(x=float(b), line=dict(color="white", width=1), row=2, col=ci + 1)
    fig.update_yaxes(title_text="centroid", autorange="reversed")
    # Only the bottom row gets an x-axis title: under the top row it would overprint the bottom row's titles.
    fig.update_xaxes(title_text="point (sorted by generating component)", row=2)
    fig.update_layout(height=680, sliders=[slider],
                      title="Attention on one held-out problem (HookedTransformer.run_with_cache); step 0 is the first"
                            " assignment; each panel has its own colour bar")
    return View("drift-patterns", "attention patterns", fig,
                {"steps": p.steps, "active_step": p.steps[active], "zmax": zmax})


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
                               error_y=dict(type="data", array=[r["ratio_std"] for r in a.sweep], thickness=1),
                               name="construction (untrained) at stiffness a (mean, bars: std over tasks)"))
    trained = a.behaviour.ratio["trained"][-1]
    trained_std = a.behaviour.spread["ratio"]["trained"][-1]
    # Labels are placed by hand on the log axis (annotation y is log10 there), each right on its line.
    for y, colour, dash, text in ((trained, "#d62728", "dash", f"trained model ({trained:.3g}, std {trained_std:.3g})"),
                                  (1.0, "#2ca02c", "dot", "Lloyd's (1)")):
        fig.add_hline(y=y, line=dict(color=colour, dash=dash))
        fig.add_annotation(x=1, xref="x domain", xanchor="right", y=float(np.log10(y)), yref="y",
                           yanchor="bottom" if y >= trained else "top", text=text, showarrow=False,
                           font=dict(color=colour))
    fig.update_xaxes(type="log", title_text="assignment stiffness a (unit-scaled)")
    fig.update_yaxes(type="log", title_text=f"objective / Lloyd's after {a.behaviour.steps} steps")
    fig.update_layout(height=380, title="Is it just the temperature? The construction swept over its stiffness")
    return View("drift-sweep", "stiffness sweep", fig, {"sweep": a.sweep})
