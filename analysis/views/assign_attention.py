"""Assignment heads: which centroid each point's attention picks, and by how much.

For every assign layer: the pattern of the point queries over the centroid keys (rows are points, ordered by the
centroid they attend to most, then by margin, so a hard assignment shows as one block per cluster), next to each
point's certificate: the margin (score of the chosen key minus the best other key, ``beta * gap`` plus the
tie-break) on a log axis, with the float64 underflow line beyond which the pattern is *exactly* one-hot.
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from analysis.capture import AssignAttention
from analysis.views._common import (
    View, as_capture, centroid_labels, drawn_rows, hooked_caveats, layer_title, point_labels,
)
from analysis.views.figure_parts import slider, visibility
from analysis.views.sampling import DEFAULT_MAX_POINTS, PointSample, head_layers, sample_notes
from circuits.blocks import ASSIGN
from circuits.sharpness import FLOAT64_UNDERFLOW

#: Margins are drawn on a log axis; smaller ones (exact ties without a tie-break, soft variants) sit here.
MARGIN_FLOOR = 1e-3


def display_order(pattern: np.ndarray, margin: np.ndarray) -> np.ndarray:
    """Points ordered by the centroid they attend to most, then by increasing margin (closest calls first)."""
    top = pattern.argmax(axis=-1)
    return np.lexsort((np.arange(len(top)), margin, top))


def assign_attention(obj, b: int = 0, sample: PointSample | None = None,
                     max_points: int | None = DEFAULT_MAX_POINTS) -> View:
    """Point queries x centroid keys of every assign layer, with each point's margin; a slider picks the layer."""
    cap, sample, layers = head_layers(obj, AssignAttention, b, sample, max_points)
    circ = cap.circuit
    data, keys = _assign_data(obj, layers, b, sample)
    fig = make_subplots(
        rows=1, cols=2, shared_yaxes=True, column_widths=[0.55, 0.45], horizontal_spacing=0.04,
        subplot_titles=("attention: point queries x centroid keys",
                        f"margin of the chosen key (dashed: {FLOAT64_UNDERFLOW:.0f}, exactly one-hot beyond)"),
    )
    drawn = np.isin(data["rows"], sample.indices)
    rules, row_orders = [], []
    for a, lc in enumerate(layers):
        order = data["order"][a]
        ylab, rule = _add_layer(fig, layer_title(circ, lc.layer), data, keys, a, order[drawn[order]])
        row_orders.append(ylab)
        rules.append(rule)
    masks = visibility(len(fig.data), [[3 * a, 3 * a + 1, 3 * a + 2] for a in range(len(layers))])
    _layer_slider(fig, circ, layers, masks, rules, row_orders, sample.drawn)
    notes, caveats = sample_notes(sample)
    notes.append(f"Green: the pattern is exactly one-hot (leak bound 0); red: some mass may sit off the chosen key. "
                 f"Margins below {MARGIN_FLOOR:g} are drawn at {MARGIN_FLOOR:g}.")
    return View("assign_attention", "Assignment heads", fig, data, notes, caveats + hooked_caveats(obj, ASSIGN))


def _assign_data(obj, layers: list, b: int, sample: PointSample) -> tuple[dict, np.ndarray]:
    """The view's data (float64) and each drawable row's keys: the centroids, and the sink if there is one.

    Every array covers the points ``rows``: every point, or the sample a lean capture kept."""
    rows, records = drawn_rows(as_capture(obj), layers)
    stacked = {name: np.stack([getattr(att, name)[b] for att in records])
               for name in ("pattern", "scores", "margin", "leak_bound")}
    pattern, margin = stacked["pattern"], stacked["margin"]
    # Variants with an attention sink (trimmed k-means) let a point put its mass nowhere: shown as a column.
    sinks = [getattr(att, "sink_mass", None) for att in records]
    sink = np.stack([s[b] for s in sinks]) if all(s is not None for s in sinks) else None
    # What each point attends to most: a centroid j, or k for the sink (a point the variant leaves out).
    keys = pattern if sink is None else np.concatenate([pattern, sink[..., None]], axis=-1)
    order = np.stack([display_order(p, m) for p, m in zip(keys, margin)])
    data = dict(
        layers=[lc.layer for lc in layers],
        point_labels=point_labels(obj),
        centroid_labels=centroid_labels(obj),
        **stacked,
        rows=rows,
        sink_mass=sink,
        attended=keys.argmax(axis=-1),
        order=order,
        drawn=sample.indices,
    )
    return data, keys


def _add_layer(fig: go.Figure, title: str, data: dict, keys: np.ndarray, a: int,
               rows: np.ndarray) -> tuple[list[str], list[dict]]:
    """Layer ``a``'s three traces (pattern, margins, underflow line) for the drawn ``rows`` (of ``data["rows"]``)
    in display order; returns the rows' labels and the horizontal rules between cluster blocks."""
    plabels, clabels, sink = data["point_labels"], data["centroid_labels"], data["sink_mass"]
    scores, margin, leak = data["scores"], data["margin"], data["leak_bound"]
    ylab = [plabels[i] for i in data["rows"][rows]]
    top = keys[a, rows].argmax(axis=-1)
    # Hover data is kept numeric and in float32 (display only; view.data keeps float64): a report draws
    # every assign layer, and strings per cell would dominate the file.
    # Clipped to float32's range first: with a huge beta (a subnormal tie-break) the gaps exceed it.
    f32 = float(np.finfo(np.float32).max)
    gap_to_top = np.clip(scores[a, rows] - scores[a, rows].max(axis=-1, keepdims=True), -f32, f32).astype(np.float32)
    z, xlab = data["pattern"][a, rows].astype(np.float32), clabels
    if sink is not None:
        z = np.concatenate([z, sink[a, rows][:, None].astype(np.float32)], axis=1)
        gap_to_top = np.concatenate([gap_to_top, np.full((len(rows), 1), np.nan, np.float32)], axis=1)
        xlab = [*clabels, "sink"]
    # Rows sit at integer positions 0..m-1 of a linear axis whose tick text is this layer's labels (set by
    # the slider): a categorical axis would keep the first layer's row order on every step.
    ypos = np.arange(len(rows))
    fig.add_trace(go.Heatmap(
        z=z, x=xlab, y=ypos, customdata=gap_to_top, zmin=0, zmax=1,
        # Object arrays, not nested lists: plotly validates a list element by element (0.16 s a report at 400 rows).
        hovertext=np.repeat(np.array(ylab, dtype=object)[:, None], z.shape[1], axis=1),
        colorscale="Blues", colorbar=dict(title=dict(text="weight"), x=1.02, len=0.5, y=0.75),
        hovertemplate="query %{hovertext} -> key %{x}<br>weight %{z:.6g}<br>score - top score %{customdata:.4g}"
                      "<extra></extra>",
        visible=a == 0, name=title,
    ), row=1, col=1)
    mg = margin[a, rows]
    finite = np.isfinite(mg)
    exact = leak[a, rows] == 0
    fig.add_trace(go.Scatter(
        x=np.where(finite, np.maximum(mg, MARGIN_FLOOR), np.nan), y=ypos, mode="markers", hovertext=ylab,
        marker=dict(size=5, color=np.where(exact, "#1b7837", "#d6604d")),
        text=np.array([*clabels, "sink"], dtype=object)[top], customdata=np.stack([mg, leak[a, rows]], axis=-1),
        hovertemplate="%{hovertext} picks %{text}<br>margin %{customdata[0]:.6g}<br>"
                      "leak bound %{customdata[1]:.3g}<extra></extra>",
        showlegend=False, visible=a == 0, name=f"{title} margin",
    ), row=1, col=2)
    fig.add_trace(go.Scatter(
        x=[FLOAT64_UNDERFLOW, FLOAT64_UNDERFLOW], y=[-0.5, len(rows) - 0.5], mode="lines",
        line=dict(dash="dash", color="#555"), hoverinfo="skip", visible=a == 0, showlegend=False,
        name=f"margin {FLOAT64_UNDERFLOW:.0f}: exactly one-hot beyond",
    ), row=1, col=2)
    bounds = np.flatnonzero(np.diff(top)) + 0.5
    rules = [dict(type="line", xref="paper", x0=0, x1=1, yref="y", y0=y, y1=y, line=dict(color="#444", width=1))
             for y in bounds]
    return ylab, rules


def _layer_slider(fig: go.Figure, circ, layers: list, masks: list, rules: list, row_orders: list, m: int) -> None:
    """The slider over assign layers (each step shows its traces, rules and row labels) and the axes."""
    height = max(420, min(900, 120 + 3 * m))
    # Label every row while they fit (about 16 px each in the ~height-230 px the sliders and titles leave), else
    # every few rows: tick labels must not overprint.
    every = max(1, int(np.ceil(m / max(1, (height - 230) // 16))))
    ticks = list(range(0, m, every))
    steps = []
    for a, lc in enumerate(layers):
        it = circ.assignment_layers.index(lc.layer) if lc.layer in circ.assignment_layers else a
        # Each step writes its own layer's row labels on the integer row positions.
        steps.append(dict(label=f"L{lc.layer}: C({it})",
                          args=[{"visible": masks[a]}, {"shapes": rules[a],
                                                        "yaxis.ticktext": row_orders[a][::every]}]))
    fig.update_layout(
        shapes=rules[0],
        sliders=[slider(steps, "assign layer (assigning to the centroids of iteration t): ")],
        height=height,
        margin=dict(l=70, r=20, t=60, b=40),
        xaxis=dict(title=dict(text="centroid key"), side="bottom"),
        xaxis2=dict(type="log", title=dict(text="margin = score(chosen) - score(runner-up), log scale")),
        yaxis=dict(title=dict(text="point query (ordered by attended centroid, then margin)"),
                   autorange="reversed", type="linear", tickmode="array", tickvals=ticks,
                   ticktext=row_orders[0][::every], showgrid=False, zeroline=False),
    )
