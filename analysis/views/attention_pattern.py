"""The full attention pattern of every block: each query token x each key token (BOS, points, centroids).

The assign and update views show the part of a head that carries the algorithm (point queries x centroid keys,
centroid queries x point keys). This one shows the whole ``hook_pattern`` of the head, as TransformerLens computes
it, with every row and column named by its token (``BOS``, ``x0``, ``c0``, ...): where the BOS sink takes the queries
that have nothing to do, and that point keys are masked for point queries. It is drawn with plotly alone, so the
page works offline (CircuitsVis loads its code from a CDN).

The pattern is read from the run as it ran (:func:`analysis.views._common.run_activations`): a user's cache, hooks
and all, or a re-run of the circuit on the capture's own input (one problem of the batch) along the capture's
execution path (:func:`analysis.capture.stream_activations`; the structured path expands its grouped attention to
the same every-query x every-key pattern); the figure draws the BOS token, a sample of the points (:func:`analysis.views.point_sample`) and every centroid, while
``data["pattern"]`` holds every token.
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
import torch

from analysis.views._common import View, as_capture, layer_title, run_activations
from analysis.views.figure_parts import slider, visibility
from analysis.views.sampling import DEFAULT_MAX_POINTS, PointSample, point_sample
from circuits import hook_names

#: Above this many tokens the pattern (tokens^2 per layer) is not recomputed for a view.
MAX_TOKENS = 4000


def attention_pattern(obj, b: int = 0, sample: PointSample | None = None,
                      max_points: int | None = DEFAULT_MAX_POINTS) -> View:
    """Every block's attention pattern, query tokens x key tokens, labelled; a slider picks the block."""
    cap = as_capture(obj)
    circ, seq = cap.circuit, cap.encoded.sequence
    if seq.n_tokens > MAX_TOKENS:
        raise ValueError(f"{seq.n_tokens} tokens: the full pattern is drawn for at most {MAX_TOKENS} tokens"
                         " (the assign and update views cover any size)")
    sample = sample if sample is not None else point_sample(obj, max_points, b=b)
    names = [hook_names.pattern(layer) for layer in range(circ.n_layers)]
    # [layer, query, key]: head 0 (every block of the construction has one head).
    pattern = np.zeros((circ.n_layers, seq.n_tokens, seq.n_tokens))
    held = []

    def take(name: str, value: torch.Tensor) -> None:
        pattern[names.index(name)] = value[0, 0].detach().cpu().double().numpy()
        held.append(names.index(name))

    caveats = run_activations(obj, names, take, b)
    layers = sorted(held)
    labels = list(seq.token_labels)
    drawn = [seq.bos, *(seq.point(int(i)) for i in sample.indices), *range(seq.centroids.start, seq.centroids.stop)]
    data = dict(layers=layers, token_labels=labels, pattern=pattern[layers], drawn_tokens=drawn)

    fig = go.Figure()
    shown = [labels[t] for t in drawn]
    for layer in layers:
        z = pattern[layer][np.ix_(drawn, drawn)].astype(np.float32)  # display only; data keeps float64
        fig.add_trace(go.Heatmap(
            z=z, x=shown, y=shown, zmin=0, zmax=1, colorscale="Blues", colorbar=dict(title=dict(text="weight")),
            hovertemplate="query %{y} -> key %{x}<br>weight %{z:.6g}<extra></extra>",
            visible=layer == layers[0], name=layer_title(circ, layer)))
    masks = visibility(len(fig.data), [[i] for i in range(len(layers))])
    steps = [dict(label=layer_title(circ, layer), args=[{"visible": masks[i]}]) for i, layer in enumerate(layers)]
    # Lines between the token types: BOS | points | centroids.
    edges = [0.5, len(drawn) - seq.k - 0.5]
    rules = [dict(type="line", xref="x", x0=e, x1=e, yref="paper", y0=0, y1=1, line=dict(color="#444", width=1))
             for e in edges]
    rules += [dict(type="line", yref="y", y0=e, y1=e, xref="paper", x0=0, x1=1, line=dict(color="#444", width=1))
              for e in edges]
    size = max(480, 14 * len(drawn) + 200)
    fig.update_layout(
        height=size, shapes=rules, margin=dict(l=70, r=20, t=40, b=150),
        sliders=[slider(steps, "block: ", y=-0.12)],
        xaxis=dict(title=dict(text="key token"), type="category"),
        yaxis=dict(title=dict(text="query token"), type="category", autorange="reversed"),
    )
    sums = pattern[layers].sum(axis=-1)
    off = [layer_title(circ, layer) for layer, row in zip(layers, sums) if not np.allclose(row, 1.0, rtol=0, atol=1e-9)]
    hooked = [layer_title(circ, layer) for layer in sorted(cap.hooked_patterns)]
    rows = ("Each row sums to 1 over all keys, drawn or not" if not off else
            f"Rows of {', '.join(off)} do not sum to 1 over the keys"
            + (f" (a hook of this run replaced rows of {', '.join(hooked)})" if hooked else ""))
    notes = [sample.note(), rows + "; lines separate BOS, points and centroids."]
    return View("attention_pattern", "Full attention patterns", fig, data, notes, caveats)
