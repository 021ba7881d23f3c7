"""The finite-temperature sweep's figures: heatmaps of the gap to Lloyd's and the self-contained sweep page."""

from __future__ import annotations

import math

from analysis.sweep.core import GAP_FLOOR, PAIRS, SweepGrid, SweepRow, TrendCheck, aggregate, log_gap, summary_lines
from analysis.wording import count


def heatmaps(rows: list[SweepRow], title: str = ""):
    """A plotly figure: one heatmap of log10 |gap| per (grid pair, beta); rows of the figure are the pairs."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    from analysis.views._common import colorbar_beside

    agg = aggregate(rows)
    betas = sorted({r.beta for r in rows})
    pairs = [p for p in PAIRS if any(r.grid == f"{p[0]}-{p[1]}" for r in rows)]
    fields = ("grid", "d", "k", "n", "scale")
    fig = make_subplots(rows=len(pairs), cols=len(betas), horizontal_spacing=0.16, vertical_spacing=0.08,
                        subplot_titles=[f"{y} vs {x}, beta = {b:g}" for y, x in pairs for b in betas])
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
            # Each panel on its own colour bar, from its own smallest to its largest log gap: on one bar for all
            # panels the small-beta panels, decades above the rest, were one flat colour (the cells print the gaps).
            values = [v for row in z for v in row if v is not None]
            lo, hi = (min(values), max(values)) if values else (math.log10(GAP_FLOOR), 0.0)
            lo, hi = (lo - 0.5, hi + 0.5) if hi == lo else (lo, hi)
            fig.add_trace(go.Heatmap(
                z=z, x=[f"{v:g}" for v in xs], y=[f"{v:g}" for v in ys], text=text, texttemplate="%{text}",
                zmin=lo, zmax=hi, colorscale="Viridis",
                colorbar=colorbar_beside(fig, i, j, len(betas), "log10 gap"),
                hovertemplate=f"{y}=%{{y}}<br>{x}=%{{x}}<br>log10 gap=%{{z:.2f}}<br>gap=%{{text}}<extra>beta {beta:g}</extra>",
            ), row=i, col=j)
            fig.update_xaxes(title_text=x, type="category", row=i, col=j)
            fig.update_yaxes(title_text=y, type="category", row=i, col=j)
    fig.update_layout(height=300 * len(pairs) + 120, width=420 * len(betas) + 140,
                      title=title or "Soft k-means circuit: log10 relative objective gap to Lloyd's (floor 1e-12;"
                                     " each panel on its own colour bar)")
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
