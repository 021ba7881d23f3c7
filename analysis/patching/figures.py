"""Plotly heatmaps of patching sweeps, and one self-contained HTML page that holds them (plotly.js embedded).

Axes carry the layouts' own labels: rows ``pre L3 A1`` (the residual entering layer 3, the assign block of
iteration 1), columns token labels (``BOS``, ``x0``.., ``c0``.., a ``*`` marks the placeholder slot) or subspace
names. Fractions restored use a diverging scale centred on 0 and clipped to [-1, 1] (1 = clean readout back,
0 = no effect, below 0 = further from clean); cells where the fraction is 0/0 are left blank.
"""

from __future__ import annotations

import html

import numpy as np

from analysis.patching.sweeps import SweepResult

#: Human titles of the metrics.
METRIC_TITLES = {
    "restored": "fraction of clean behaviour restored",
    "restored_labels": "fraction of clean labels restored",
    "restored_centroids": "fraction of clean centroids restored",
    "label_flips": "labels flipped by the patch",
    "label_mismatch": "labels still differing from clean",
    "max_centroid_displacement": "largest centroid displacement by the patch",
    "centroid_error": "|C - C_clean| after the patch",
    "objective_change": "k-means objective change by the patch",
}


def heatmap(sweep: SweepResult, metric: str = "restored", title: str | None = None):
    """A plotly ``Figure``: ``metric`` per (row, col) of ``sweep``, with label flips and centroid error on hover."""
    import plotly.graph_objects as go

    z = sweep.values[metric].numpy().astype(float)
    flips = sweep.values["label_flips"].numpy()
    err = sweep.values["centroid_error"].numpy()
    rest = sweep.values["restored"].numpy()
    hover = [[f"{sweep.row_labels[r]} / {sweep.col_labels[c]}<br>restored {_fmt(rest[r, c])}"
              f"<br>label flips {int(flips[r, c])}<br>|C - C_clean| {err[r, c]:.3g}"
              for c in range(z.shape[1])] for r in range(z.shape[0])]
    fraction = metric.startswith("restored")
    trace = go.Heatmap(
        z=np.where(np.isnan(z), None, z).tolist(), x=sweep.col_labels, y=sweep.row_labels, text=hover,
        hoverinfo="text", colorscale="RdBu", zmid=0 if fraction else None,
        zmin=-1 if fraction else None, zmax=1 if fraction else None,
        colorbar={"title": {"text": metric}},
    )
    fig = go.Figure(trace)
    height = max(320, 22 * len(sweep.row_labels) + 160)
    fig.update_layout(
        title={"text": html.escape(title or f"{sweep.title}: {METRIC_TITLES.get(metric, metric)}"
                                   f" (read after {sweep.read_label or sweep.read_layer})")},
        height=height, xaxis={"title": "patched", "type": "category", "tickangle": -60 if len(sweep.col_labels) > 12 else 0},
        yaxis={"title": "patched at", "type": "category", "autorange": "reversed"},
        margin={"l": 120, "r": 40, "t": 70, "b": 90},
    )
    return fig


def _fmt(v: float) -> str:
    return "0/0 (nothing to restore)" if np.isnan(v) else f"{v:.3f}"


def figures_div(figures, include_plotlyjs: bool | str = True) -> str:
    """HTML fragments of ``figures``; plotly.js is embedded (once) when ``include_plotlyjs`` is True."""
    parts = []
    for i, fig in enumerate(figures):
        parts.append(fig.to_html(full_html=False, include_plotlyjs=include_plotlyjs if i == 0 else False,
                                 config={"responsive": True}))
    return "\n".join(parts)


def page(title: str, intro_html: str, figures) -> str:
    """One HTML file that opens offline: plotly.js inline, no external URL."""
    return (
        "<!DOCTYPE html>\n<html><head><meta charset='utf-8'>"
        f"<title>{html.escape(title)}</title>"
        "<style>body{font-family:sans-serif;max-width:1400px;margin:1em auto;padding:0 1em}"
        "code{background:#f3f3f3;padding:0 .2em}</style></head><body>"
        f"<h1>{html.escape(title)}</h1>{intro_html}{figures_div(figures)}</body></html>\n"
    )
