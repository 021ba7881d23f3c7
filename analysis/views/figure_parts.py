"""The parts every view's figure is made of: the clusters' colours, the signed-log colour scale for values over many
decades, sliders, dropdowns and colour bars, and the visibility masks of slider steps."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from plotly.colors import qualitative

PALETTE: tuple[str, ...] = tuple(qualitative.Plotly) + tuple(qualitative.Dark24)


def cluster_colour(j: int) -> str:
    """Colour of centroid ``j`` (and of the points assigned to it) in every view; grey for 'unassigned'."""
    return "#9e9e9e" if j < 0 else PALETTE[j % len(PALETTE)]


def signed_log(values: np.ndarray, floor: float) -> np.ndarray:
    """``sign(v) * (1 + log10(|v| / floor))`` for ``|v| >= floor``, 0 for exact zeros.

    A colour scale for weights spanning many decades (``beta = 1e14`` next to entries of 1): the smallest
    non-zero magnitude maps to +-1, each decade above it adds 1, and zero stays zero.
    """
    mag = np.abs(values)
    out = np.zeros_like(values, dtype=float)
    nz = mag > 0
    # A difference of logarithms, not the log of a ratio: a subnormal floor (a tie-break of 5e-324 beside beta)
    # would overflow the ratio to inf.
    out[nz] = np.sign(values[nz]) * (1.0 + np.log10(np.maximum(mag[nz], floor)) - np.log10(floor))
    return out


def signed_log_ticks(floor: float, top: float) -> tuple[list[float], list[str]]:
    """Colour-bar ticks (positions on the :func:`signed_log` scale, and the values they stand for)."""
    decades = int(np.ceil(np.log10(top) - np.log10(floor))) if top > floor else 0
    step = max(1, int(np.ceil((decades + 1) / 6)))
    vals, text = [0.0], ["0"]
    for e in range(0, decades + 1, step):
        v = 10.0 ** (np.log10(floor) + e)  # floor * 10**e, which overflows for a subnormal floor's decades
        vals = [-(1.0 + e)] + vals + [1.0 + e]
        text = [f"-{v:.0e}"] + text + [f"{v:.0e}"]
    return vals, text


def slider(steps: list[dict], prefix: str, active: int = 0, y: float = -0.08) -> dict:
    """A plotly slider whose step ``i`` applies ``steps[i]["args"]`` with ``Plotly.update``."""
    return dict(
        active=active,
        currentvalue=dict(prefix=prefix, font=dict(size=13)),
        pad=dict(t=40, b=10),
        y=y,
        x=0.03,
        len=0.94,
        steps=[dict(method="update", label=s["label"], args=s["args"]) for s in steps],
    )


def below_plot(pixels: float, height: float, margin_top: float, margin_bottom: float) -> float:
    """Paper y coordinate ``pixels`` below the plot area (for sliders under rotated tick labels)."""
    return -pixels / max(1.0, height - margin_top - margin_bottom)


def dropdown(buttons: list[dict], x: float = 0.0, y: float = 1.12) -> dict:
    """A plotly dropdown whose button ``i`` applies ``buttons[i]["args"]`` with ``Plotly.update``."""
    return dict(type="dropdown", direction="down", x=x, y=y, xanchor="left", yanchor="bottom", showactive=True,
                buttons=[dict(method="update", label=b["label"], args=b["args"]) for b in buttons])


def colorbar_beside(fig: go.Figure, row: int, col: int, cols: int, title: str, **extra) -> dict:
    """A colour bar just right of subplot (row, col) and as tall as it: every panel carries its own bar."""
    axis = (row - 1) * cols + col
    xdom = fig.layout[f"xaxis{'' if axis == 1 else axis}"].domain
    ydom = fig.layout[f"yaxis{'' if axis == 1 else axis}"].domain
    return dict(title=dict(text=title, side="right"), x=xdom[1] + 0.01, xanchor="left", y=(ydom[0] + ydom[1]) / 2,
                len=ydom[1] - ydom[0], thickness=12, **extra)


def visibility(n_traces: int, groups: list[list[int]], always: list[int] = ()) -> list[list[bool]]:
    """One visibility mask per slider step: the traces of ``groups[i]`` plus ``always``."""
    masks = []
    for g in groups:
        mask = [False] * n_traces
        for i in (*g, *always):
            mask[i] = True
        masks.append(mask)
    return masks
