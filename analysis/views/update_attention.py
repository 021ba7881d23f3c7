"""Update heads: who is averaged into which centroid.

For every update layer: the pattern of the centroid queries over all keys (the BOS sink, the points ordered by
the cluster they belonged to when the block read them, the centroid tokens). Lloyd's update is a uniform
average over the members, so each row should carry ``1 / |members|`` on its members and nothing elsewhere; a
centroid with no members attends to itself and stays put. Next to it: the size of each cluster and the weight
the row actually put on it, over *all* points.
"""

from __future__ import annotations

import numpy as np
from einops import einsum
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from analysis.capture import UpdateAttention
from analysis.views._common import (
    View, assignment_rows, cluster_sizes, hooked_caveats, layer_title, per_layer, require_rows, soft_clusters,
    token_labels,
)
from analysis.views.figure_parts import below_plot, cluster_colour, slider, visibility
from analysis.views.sampling import DEFAULT_MAX_POINTS, PointSample, head_layers, sample_notes
from circuits.blocks import UPDATE


def update_attention(obj, b: int = 0, sample: PointSample | None = None,
                     max_points: int | None = DEFAULT_MAX_POINTS) -> View:
    """Centroid queries x (BOS, point, centroid) keys of every update layer; a slider picks the layer."""
    cap, sample, layers = head_layers(obj, UpdateAttention, b, sample, max_points)
    circ = cap.circuit
    data = _update_data(cap, layers, b, sample)
    fig = make_subplots(
        rows=1, cols=2, column_widths=[0.75, 0.25], horizontal_spacing=0.08,
        subplot_titles=("attention: centroid queries x keys", "cluster size (all points)"),
    )
    rules = [_add_layer(fig, layer_title(circ, lc.layer), data, cap.encoded.sequence, u,
                        soft_clusters(assignment_rows(lc.pre.assignments, b, sample.indices))[0])
             for u, lc in enumerate(layers)]
    masks = visibility(len(fig.data), [[2 * u, 2 * u + 1] for u in range(len(layers))])
    _layer_slider(fig, circ, layers, masks, rules, cap.encoded.sequence.k)
    notes, caveats = sample_notes(sample)
    if cap.sampled is None:
        notes.append("Weights on points that are not drawn are not shown in the heatmap; the bar chart's hover gives"
                     " each centroid's total weight on its members over all points.")
    else:
        caveats.append(f"This run kept each update row's weights on the {sample.drawn:,} drawn points alone, not on"
                       f" all {cap.encoded.n:,}: the bar chart's hover gives the certificate's weight off each"
                       " centroid's members (its observed leak, over all points) in place of the weight on them.")
    return View("update_attention", "Update heads", fig, data, notes, caveats + hooked_caveats(obj, UPDATE))


def _update_data(cap, layers: list, b: int, sample: PointSample) -> dict:
    """The view's data (float64): ``pattern`` over the key positions ``keys`` (every key, or BOS, the sampled
    points and the centroids of a lean capture), the certificate, and the cluster sizes and weights of all points."""
    require_rows(cap)
    seq = cap.encoded.sequence
    tokens = token_labels(cap)
    stacked = per_layer(layers, b, "margin", "leak_bound", "leak_observed")
    if cap.sampled is None:
        stacked["pattern"] = per_layer(layers, b, "pattern")["pattern"]  # [U, k, pos]
        keys = np.arange(seq.n_tokens)
    else:
        stacked["pattern"] = np.stack([cap.sampled.attention[lc.layer].pattern[b] for lc in layers])
        keys = cap.sampled.positions
    pattern = stacked["pattern"]
    if cap.sampled is None:
        members = np.stack([lc.pre.assignments[b] for lc in layers])  # [U, n, k]: soft membership read by the block
        size = members.sum(axis=1)  # [U, k]
        on_members = einsum(pattern[:, :, seq.points], members,
                            "layer centroid point, layer point centroid -> layer centroid")
    else:
        size = np.stack([cluster_sizes(lc.pre.assignments, b) for lc in layers])  # without an n x k per layer
        on_members = None  # the weights on points not sampled are not kept
    on_self = np.stack([np.diagonal(p[:, np.searchsorted(keys, np.arange(seq.n_tokens)[seq.centroids])])
                        for p in pattern])
    data = dict(
        layers=[lc.layer for lc in layers],
        key_labels=tokens,
        centroid_labels=list(tokens[seq.centroids]),
        **stacked,
        keys=keys,
        cluster_size=size,
        weight_on_members=on_members,
        weight_on_self=on_self,
        drawn=sample.indices,
    )
    return data


def _add_layer(fig: go.Figure, title: str, data: dict, seq, u: int, cluster: np.ndarray) -> list[dict]:
    """Layer ``u``'s heatmap (drawn points grouped by ``cluster``, their cluster read by the block) and size bars;
    returns the vertical rules around each cluster's block of point keys."""
    tokens, clabels, drawn = data["key_labels"], data["centroid_labels"], data["drawn"]
    size, on_members, on_self = data["cluster_size"], data["weight_on_members"], data["weight_on_self"]
    pts = drawn[np.lexsort((drawn, cluster))]
    keys = [seq.bos, *(seq.point(int(i)) for i in pts), *range(seq.centroids.start, seq.centroids.stop)]
    xlab = [tokens[p] for p in keys]
    columns = np.searchsorted(data["keys"], keys)  # where each key's weights sit in data["pattern"]
    z = data["pattern"][u][:, columns].astype(np.float32)  # display only; view.data keeps float64
    fig.add_trace(go.Heatmap(
        z=z, x=xlab, y=clabels, zmin=0, colorscale="Blues",
        colorbar=dict(title=dict(text="weight"), x=1.02, len=0.9),
        hovertemplate="query %{y} -> key %{x}<br>weight %{z:.6g}<extra></extra>",
        visible=u == 0, name=title,
    ), row=1, col=1)
    expected = np.where(size[u] > 0, 1.0 / np.maximum(size[u], 1e-300), np.nan)
    # A lean capture kept no weights on the points it did not sample: the certificate's weight off the members.
    members, said = ((on_members[u], "weight on members") if on_members is not None else
                     (data["leak_observed"][u], "weight off its members (observed leak)"))
    fig.add_trace(go.Bar(
        x=size[u], y=clabels, orientation="h", marker_color=[cluster_colour(j) for j in range(seq.k)],
        customdata=np.stack([members.astype(str), on_self[u].astype(str), expected.astype(str),
                             data["margin"][u].astype(str), data["leak_bound"][u].astype(str)], axis=-1),
        hovertemplate=f"%{{y}}: %{{x:.6g}} members<br>{said} %{{customdata[0]}}<br>"
                      "weight on itself %{customdata[1]}<br>uniform weight 1/size %{customdata[2]}<br>"
                      "margin %{customdata[3]}, leak bound %{customdata[4]}<extra></extra>",
        showlegend=False, visible=u == 0, name=f"{title} sizes",
    ), row=1, col=2)
    # Vertical rules around each cluster's block of point keys (category positions: BOS is 0).
    bounds = [0.5, *(np.flatnonzero(np.diff(np.sort(cluster))) + 1.5), len(pts) + 0.5]
    return [dict(type="line", xref="x", x0=x, x1=x, yref="y domain", y0=0, y1=1, line=dict(color="#444", width=1))
            for x in bounds]


def _layer_slider(fig: go.Figure, circ, layers: list, masks: list, rules: list, k: int) -> None:
    """The slider over update layers, starting at the first that averages members, and the axes."""
    steps = []
    for u, lc in enumerate(layers):
        it = circ.centroid_layers.index(lc.layer) if lc.layer in circ.centroid_layers else u
        what = "C0" if it == 0 else f"C({it})"
        steps.append(dict(label=f"L{lc.layer}: {what}", args=[{"visible": masks[u]}, {"shapes": rules[u]}]))
    # Start at the first update that averages members (the first one only commits the initial centroids).
    active = 1 if len(layers) > 1 else 0
    height, top, bottom = max(420, 250 + 28 * k), 60, 190
    for i, trace in enumerate(fig.data):
        trace.visible = masks[active][i]
    fig.update_layout(
        shapes=rules[active] if rules else [],
        sliders=[slider(steps, "update layer (writing the centroids of iteration t; C0: commit the initial ones): ",
                        active=active, y=below_plot(125, height, top, bottom))],
        height=height,
        margin=dict(l=70, r=20, t=top, b=bottom),
        xaxis=dict(title=dict(text="key (BOS, points grouped by cluster read from Y, centroids)"), type="category"),
        yaxis=dict(title=dict(text="centroid query"), autorange="reversed", type="category"),
        xaxis2=dict(title=dict(text="members (soft count)")),
        yaxis2=dict(autorange="reversed", type="category"),
    )
