"""The finite-temperature sweep's figures: heatmaps of the gap to Lloyd's and the self-contained sweep page."""

from __future__ import annotations

import math

from analysis.sweep.core import GAP_FLOOR, PAIRS, SweepGrid, SweepRow, TrendCheck, aggregate, log_gap, summary_lines
from analysis.wording import count


def heatmaps(rows: list[SweepRow], title: str = ""):
    """A plotly figure: one heatmap of log10 |gap| per (grid pair, beta); rows of the figure are the pairs, columns
    the betas. Every panel is coloured on one scale (one colour axis, from the smallest to the largest log gap of
    the sweep): the comparison across betas, which the sweep exists to show, is read off the colours; each cell
    also prints its gap."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    agg = aggregate(rows)
    betas = sorted({r.beta for r in rows})
    pairs = [p for p in PAIRS if any(r.grid == f"{p[0]}-{p[1]}" for r in rows)]
    fields = ("grid", "d", "k", "n", "scale")
    fig = make_subplots(rows=len(pairs), cols=len(betas), horizontal_spacing=0.08, vertical_spacing=0.08,
                        subplot_titles=[f"{y} vs {x}, beta = {b:g}" for y, x in pairs for b in betas])
    values = [log_gap(v) for v in agg.values()]
    lo, hi = (min(values), max(values)) if values else (math.log10(GAP_FLOOR), 0.0)
    lo, hi = (lo - 0.5, hi + 0.5) if hi == lo else (lo, hi)
    for i, (y, x) in enumerate(pairs, start=1):
        grid_name = f"{y}-{x}"
        keys = [key for key in agg if key[0] == grid_name]
        ys = sorted({key[fields.index(y)] for key in keys})
        xs = sorted({key[fields.index(x)] for key in keys})
        for j, beta in enumerate(betas, start=1):
            z = [[None] * len(xs) for _ in ys]
            text = [[""] * len(xs) for _ in ys]
            for key in keys:
                if key[5] != beta:
                    continue
                a, b = ys.index(key[fields.index(y)]), xs.index(key[fields.index(x)])
                z[a][b] = log_gap(agg[key])
                text[a][b] = f"{agg[key]:.2g}"
            fig.add_trace(go.Heatmap(
                z=z, x=[f"{v:g}" for v in xs], y=[f"{v:g}" for v in ys], text=text, texttemplate="%{text}",
                coloraxis="coloraxis",
                hovertemplate=f"{y}=%{{y}}<br>{x}=%{{x}}<br>log10 gap=%{{z:.2f}}<br>gap=%{{text}}<extra>beta {beta:g}</extra>",
            ), row=i, col=j)
            fig.update_xaxes(title_text=x, type="category", row=i, col=j)
            fig.update_yaxes(title_text=y, type="category", row=i, col=j)
    fig.update_layout(height=300 * len(pairs) + 120, width=380 * len(betas) + 200,
                      coloraxis=dict(colorscale="Viridis", cmin=lo, cmax=hi, colorbar=dict(
                          title=dict(text="|gap| (log scale)", side="right"),
                          tickvals=list(range(math.ceil(lo), math.floor(hi) + 1)),
                          ticktext=[f"1e{e}" if e else "1" for e in range(math.ceil(lo), math.floor(hi) + 1)])),
                      title=title or "Soft k-means circuit: log10 relative objective gap to Lloyd's (floor 1e-12;"
                                     " one colour scale for every panel)")
    return fig


def sweep_html(rows: list[SweepRow], checks: list[TrendCheck], grid: SweepGrid, runner_name: str) -> str:
    """One self-contained page of the document engine (plotly.js embedded): the heatmaps and the verdict."""
    import html

    from analysis.report.document import page

    summary = "\n".join(summary_lines(rows, checks, max_listed=200))
    settings = html.escape(
        f"runner: {runner_name}; betas {list(grid.betas)}; d {list(grid.d)}; k {list(grid.k)}; n {list(grid.n)};"
        f" scale {list(grid.scale)}; base {grid.base}; {count(grid.seeds, 'seed')} per cell;"
        f" {count(grid.iterations, 'iteration')}; {count(len(rows), 'run')}")
    intro = (f"<p>{settings}</p><p>gap = (J_soft - J_lloyd) / J_lloyd of the final centroids (each point to its"
             " nearest centroid); cells show the mean |gap| over seeds.</p>"
             f"<pre>{html.escape(summary)}</pre>")
    return page("Finite-temperature sweep: soft k-means circuit vs Lloyd's", intro, [heatmaps(rows)])
