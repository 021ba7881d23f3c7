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
    DEFAULT_MAX_POINTS,
    PointSample,
    View,
    as_capture,
    below_plot,
    cluster_colour,
    layer_title,
    per_layer,
    point_sample,
    slider,
    soft_clusters,
    visibility,
)


def update_attention(obj, b: int = 0, sample: PointSample | None = None,
                     max_points: int | None = DEFAULT_MAX_POINTS) -> View:
    """Centroid queries x (BOS, point, centroid) keys of every update layer; a slider picks the layer."""
    cap = as_capture(obj)
    circ, seq = cap.circuit, cap.encoded.sequence
    sample = sample if sample is not None else point_sample(obj, max_points, b=b)
    layers = [lc for lc in cap.layers if isinstance(lc.attention, UpdateAttention)]
    tokens = seq.token_labels
    clabels = tokens[seq.centroids]
    k = seq.k

    stacked = per_layer(layers, b, "pattern", "margin", "leak_bound")
    pattern = stacked["pattern"]  # [U, k, pos]
    members = np.stack([lc.pre.assignments[b] for lc in layers])  # [U, n, k]: soft membership read by the block
    size = members.sum(axis=1)  # [U, k]
    on_members = einsum(pattern[:, :, seq.points], members, "layer centroid point, layer point centroid -> layer centroid")
    on_self = np.stack([np.diagonal(p[:, seq.centroids]) for p in pattern])
    data = dict(
        layers=[lc.layer for lc in layers],
        key_labels=tokens,
        centroid_labels=clabels,
        **stacked,
        cluster_size=size,
        weight_on_members=on_members,
        weight_on_self=on_self,
        drawn=sample.indices,
    )

    fig = make_subplots(
        rows=1, cols=2, column_widths=[0.75, 0.25], horizontal_spacing=0.08,
        subplot_titles=("attention: centroid queries x keys", "cluster size (all points)"),
    )
    groups, rules = [], []
    for u, lc in enumerate(layers):
        cluster, _ = soft_clusters(members[u][sample.indices])
        pts = sample.indices[np.lexsort((sample.indices, cluster))]
        keys = [seq.bos, *(seq.point(int(i)) for i in pts), *range(seq.centroids.start, seq.centroids.stop)]
        xlab = [tokens[p] for p in keys]
        z = pattern[u][:, keys].astype(np.float32)  # display only; view.data keeps float64
        fig.add_trace(go.Heatmap(
            z=z, x=xlab, y=clabels, zmin=0, colorscale="Blues",
            colorbar=dict(title=dict(text="weight"), x=1.02, len=0.9),
            hovertemplate="query %{y} -> key %{x}<br>weight %{z:.6g}<extra></extra>",
            visible=u == 0, name=layer_title(circ, lc.layer),
        ), row=1, col=1)
        expected = np.where(size[u] > 0, 1.0 / np.maximum(size[u], 1e-300), np.nan)
        fig.add_trace(go.Bar(
            x=size[u], y=clabels, orientation="h", marker_color=[cluster_colour(j) for j in range(k)],
            customdata=np.stack([on_members[u].astype(str), on_self[u].astype(str), expected.astype(str),
                                 data["margin"][u].astype(str), data["leak_bound"][u].astype(str)], axis=-1),
            hovertemplate="%{y}: %{x:.6g} members<br>weight on members %{customdata[0]}<br>"
                          "weight on itself %{customdata[1]}<br>uniform weight 1/size %{customdata[2]}<br>"
                          "margin %{customdata[3]}, leak bound %{customdata[4]}<extra></extra>",
            showlegend=False, visible=u == 0, name=f"{layer_title(circ, lc.layer)} sizes",
        ), row=1, col=2)
        groups.append([2 * u, 2 * u + 1])
        # Vertical rules around each cluster's block of point keys (category positions: BOS is 0).
        bounds = [0.5, *(np.flatnonzero(np.diff(np.sort(cluster))) + 1.5), len(pts) + 0.5]
        rules.append([dict(type="line", xref="x", x0=x, x1=x, yref="y domain", y0=0, y1=1,
                           line=dict(color="#444", width=1)) for x in bounds])
    masks = visibility(len(fig.data), groups)
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
    notes = [sample.note(), "Weights on points that are not drawn are not shown in the heatmap; the bar chart's "
             "hover gives each centroid's total weight on its members over all points."]
    return View("update_attention", "Update heads", fig, data, notes)
