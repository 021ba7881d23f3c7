"""Sweeps: one patched run per cell of a (layer x position), (layer x subspace) or (component x position) grid.

Rows are the places in the network a patch is applied, columns what is patched there:

* :func:`sweep_layer_position` — rows: the residual stream entering every block (``resid_pre``) and leaving the
  last one (``resid_post``), up to the read layer; columns: single token positions (labelled by the
  :class:`~circuits.layout.SequenceLayout`: ``BOS``, ``x0``.., ``c0``..) and whole token types. The full residual
  vector of those tokens is patched (or only ``subspaces``).
* :func:`sweep_layer_subspace` — same rows; columns: named subspaces of the
  :class:`~circuits.layout.ResidualLayout` (``X``, ``C``, ``N``, ``Y`` ...), patched on every token (or on
  ``positions``).
* :func:`sweep_components` — rows: the head output (``attn_out``, or per-head ``z``) and the MLP output of every
  block; columns: positions. It says which block *writes* the difference, where the residual sweeps say where
  it *lives*.

Each returns a :class:`SweepResult`: every metric of :class:`~analysis.patching.metrics.PatchMetrics` as a
``(row, col)`` torch tensor, per-point label flips ``(row, col, m)`` and per-centroid displacement
``(row, col, k)``, the axis labels, and :meth:`SweepResult.figure` for a plotly heatmap (:func:`heatmap`).

Heatmap axes carry the layouts' own labels: rows ``pre L3 A1`` (the residual entering layer 3, the assign block of
iteration 1), columns token labels (``BOS``, ``x0``.., ``c0``.., a ``*`` marks the placeholder slot) or subspace
names. Fractions restored use a diverging scale centred on 0 and clipped to [-1, 1] (1 = clean readout back,
0 = no effect, below 0 = further from clean); cells where the fraction is 0/0 are grey, unlike the white of 0.
:func:`heatmap_pair` draws a sweep read right after each patched block beside the same sweep read at the end.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from collections.abc import Sequence

import numpy as np
import torch
from jaxtyping import Bool, Float

from analysis.patching.experiment import Patch, PatchingExperiment, positions_of
from analysis.patching.metrics import PatchMetrics

#: Above this many tokens a layer x position sweep shows the token types and the notable tokens only.
MAX_POSITION_COLUMNS = 64

#: Restored fractions at least this high count as "restores the clean behaviour" in summaries.
RESTORED = 1.0 - 1e-9


@dataclass
class SweepResult:
    """Metrics of one patched run per (row, col) cell, with labelled axes."""

    name: str
    title: str
    row_labels: list[str]
    col_labels: list[str]
    rows: list[dict]
    cols: list[dict]
    values: dict[str, Float[torch.Tensor, "row col"]]
    flipped: Bool[torch.Tensor, "row col m"]
    displacement: Float[torch.Tensor, "row col k"]
    read_layer: int
    read_label: str = ""
    note: str = ""
    extra: dict = field(default_factory=dict)
    #: Columns that patch every token's whole residual vector: a sanity check (always 1), left out of summaries.
    control_cols: tuple[str, ...] = ()

    @property
    def shape(self) -> tuple[int, int]:
        return len(self.row_labels), len(self.col_labels)

    def __getitem__(self, metric: str) -> torch.Tensor:
        return self.values[metric]

    def restoring_cells(self, metric: str = "restored", threshold: float = RESTORED) -> list[dict]:
        """Cells whose ``metric`` reaches ``threshold``: the patches that bring the clean readout back."""
        v = self.values[metric]
        hits = torch.nonzero(v >= threshold).tolist()
        return [{"row": self.row_labels[r], "col": self.col_labels[c], metric: float(v[r, c])} for r, c in hits
                if self.col_labels[c] not in self.control_cols]

    def restoring_rows(self, metric: str = "restored", threshold: float = RESTORED) -> list[str]:
        """Rows (layers) where some column (other than the control columns) restores the clean readout."""
        rows = {cell["row"] for cell in self.restoring_cells(metric, threshold)}
        return [label for label in self.row_labels if label in rows]

    def figure(self, metric: str = "restored"):
        return heatmap(self, metric)

    def to_dict(self) -> dict:
        """JSON-ready: every metric as nested lists (NaN as null), axes, and the restoring cells."""
        def lists(t: torch.Tensor):
            return [[None if np.isnan(v) else float(v) for v in row] for row in t.tolist()]

        return {
            "name": self.name,
            "title": self.title,
            "read_layer": self.read_layer,
            "read_label": self.read_label,
            "rows": self.row_labels,
            "cols": self.col_labels,
            "row_sites": self.rows,
            "col_sites": self.cols,
            "note": self.note,
            "values": {name: lists(t) for name, t in self.values.items()},
            "control_cols": list(self.control_cols),
            "restoring_rows": self.restoring_rows(),
            "restoring_cells": self.restoring_cells(),
        }


def _collect(exp: PatchingExperiment, grid: list[list[Patch]], read: int) -> tuple[dict, torch.Tensor, torch.Tensor]:
    R, C = len(grid), len(grid[0]) if grid else 0
    flat = [p for row in grid for p in row]
    metrics: PatchMetrics = exp.measure(flat, read)
    values = {name: torch.as_tensor(metrics.scalar(name)).reshape(R, C) for name in PatchMetrics.SCALARS}
    flipped = torch.as_tensor(metrics.flipped).reshape(R, C, -1)
    displacement = torch.as_tensor(metrics.centroid_displacement).reshape(R, C, -1)
    return values, flipped, displacement


def residual_rows(exp: PatchingExperiment, read: int) -> list[tuple[str, int, str]]:
    """(component, layer, label): the residual entering every block up to ``read``, and leaving block ``read``."""
    rows = [("resid_pre", L, f"pre {exp.layer_label(L)}") for L in range(read + 1)]
    return rows + [("resid_post", read, f"post {exp.layer_label(read)}")]


def default_position_columns(exp: PatchingExperiment, each_token: bool | None = None) -> list[tuple[str, tuple[int, ...]]]:
    """Every token, then each token type and all tokens together.

    With ``each_token`` False (default: when the sequence is longer than :data:`MAX_POSITION_COLUMNS`) only BOS,
    every centroid and the point slots the corruption touches get a column of their own.
    """
    seq, labels = exp.sequence, exp.token_labels
    if each_token is None:
        each_token = seq.n_tokens <= MAX_POSITION_COLUMNS
    if each_token:
        singles = list(range(seq.n_tokens))
    else:
        touched = [exp.pair.details[key] for key in ("point",) if key in exp.pair.details]
        singles = [seq.bos, *(seq.point(i) for i in touched), *range(seq.n_tokens)[seq.centroids]]
    cols = [(labels[p], (p,)) for p in singles]
    cols += [("points", positions_of(seq, "point")), ("centroids", positions_of(seq, "centroid")),
             ("all", positions_of(seq, "all"))]
    return cols


def _resolve_columns(exp: PatchingExperiment, columns) -> list[tuple[str, tuple[int, ...]]]:
    if columns is None:
        return default_position_columns(exp)
    out = []
    for col in columns:
        if isinstance(col, tuple) and len(col) == 2 and isinstance(col[0], str) and not isinstance(col[1], str):
            out.append((col[0], positions_of(exp.sequence, col[1])))
        else:
            out.append((str(col), positions_of(exp.sequence, col)))
    return out


def sweep_layer_position(exp: PatchingExperiment, columns=None, subspaces: Sequence[str] | None = None,
                         read_layer: int | None = None) -> SweepResult:
    """Patch the residual stream of each column's tokens (all of it, or ``subspaces``) entering each block.

    ``columns``: position specs (see :func:`~analysis.patching.experiment.positions_of`), or ``(label, spec)``
    pairs; default :func:`default_position_columns`.
    """
    read = exp.check_read_layer(read_layer)
    rows = residual_rows(exp, read)
    cols = _resolve_columns(exp, columns)
    grid = [[Patch.of(exp.site(comp, layer, list(pos), subspaces), label=f"{rlabel} / {clabel}")
             for clabel, pos in cols] for comp, layer, rlabel in rows]
    values, flipped, disp = _collect(exp, grid, read)
    what = "the residual stream" if subspaces is None else "+".join(subspaces)
    everything = positions_of(exp.sequence, "all")
    control = tuple(label for label, pos in cols if pos == everything and subspaces is None)
    return SweepResult(
        "layer_position", f"Patching {what} by layer and position", [r[2] for r in rows], [c[0] for c in cols],
        [{"component": c, "layer": L} for c, L, _ in rows], [{"positions": list(p)} for _, p in cols],
        values, flipped, disp, read, exp.layer_label(read),
        extra={"subspaces": list(subspaces) if subspaces else None}, control_cols=control)


def sweep_layer_subspace(exp: PatchingExperiment, subspaces=None, positions="all",
                         read_layer: int | None = None) -> SweepResult:
    """Patch each named subspace (or group of subspaces) on ``positions`` entering each block.

    ``subspaces``: names or tuples of names of the layout (default: every subspace alone, then ``C+N``, the pair
    an assign block's keys read: neither alone determines the score ``2 beta x.c - beta |c|^2``).
    """
    read = exp.check_read_layer(read_layer)
    rows = residual_rows(exp, read)
    if subspaces is None:
        subspaces = [*exp.layout.names, ("C", "N")]
    groups = [(s,) if isinstance(s, str) else tuple(s) for s in subspaces]
    pos = positions_of(exp.sequence, positions)
    grid = [[Patch.of(exp.site(comp, layer, list(pos), list(g)), label=f"{rlabel} / {'+'.join(g)}")
             for g in groups] for comp, layer, rlabel in rows]
    values, flipped, disp = _collect(exp, grid, read)
    where = positions if isinstance(positions, str) else f"positions {list(pos)}"
    return SweepResult(
        "layer_subspace", f"Patching named subspaces ({where}) by layer", [r[2] for r in rows],
        ["+".join(g) for g in groups], [{"component": c, "layer": L} for c, L, _ in rows],
        [{"subspaces": list(g), "positions": list(pos)} for g in groups], values, flipped, disp, read,
        exp.layer_label(read))


def sweep_components(exp: PatchingExperiment, components: Sequence[str] = ("attn_out", "mlp_out"), columns=None,
                     read_layer: int | None = None) -> SweepResult:
    """Patch what each block's head (``attn_out`` or per-head ``z``) and MLP (``mlp_out``) wrote, by position."""
    read = exp.check_read_layer(read_layer)
    rows = [(comp, L, f"{exp.layer_label(L)} {comp}") for L in range(read + 1) for comp in components]
    cols = _resolve_columns(exp, columns)
    grid = [[Patch.of(exp.site(comp, layer, list(pos)), label=f"{rlabel} / {clabel}") for clabel, pos in cols]
            for comp, layer, rlabel in rows]
    values, flipped, disp = _collect(exp, grid, read)
    return SweepResult(
        "components", f"Patching block outputs ({', '.join(components)}) by position", [r[2] for r in rows],
        [c[0] for c in cols], [{"component": c, "layer": L} for c, L, _ in rows],
        [{"positions": list(p)} for _, p in cols], values, flipped, disp, read, exp.layer_label(read))


#: Sweep names accepted by :func:`run_sweeps` and the command line.
SWEEPS = ("layer-position", "layer-subspace", "components")


def run_sweeps(exp: PatchingExperiment, names: Sequence[str] = SWEEPS, read_layer: int | None = None) -> list[SweepResult]:
    out = []
    for name in names:
        if name == "layer-position":
            out.append(sweep_layer_position(exp, read_layer=read_layer))
        elif name == "layer-subspace":
            out.append(sweep_layer_subspace(exp, read_layer=read_layer))
        elif name == "components":
            out.append(sweep_components(exp, read_layer=read_layer))
        else:
            raise ValueError(f"unknown sweep {name!r}; expected one of {SWEEPS}")
    return out


# ----------------------------------------------------------------------------------------------- heatmaps
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


#: Colour of cells whose fraction restored is 0/0 (the corruption does not change that readout): not 0.
NAN_COLOUR = "#8c8c8c"


def _heat_traces(sweep: SweepResult, z: np.ndarray, metric: str, showscale: bool = True,
                 colorbar: dict | None = None) -> list:
    """The heatmap of ``z`` over the sweep's axes, and a grey overlay on its NaN (0/0) cells."""
    import plotly.graph_objects as go

    flips = sweep.values["label_flips"].numpy()
    err = sweep.values["centroid_error"].numpy()
    hover = [[f"{sweep.row_labels[r]} / {sweep.col_labels[c]}<br>{metric} {_fraction_text(z[r, c])}"
              f"<br>label flips {int(flips[r, c])}<br>|C - C_clean| {err[r, c]:.3g} (at the read layer)"
              for c in range(z.shape[1])] for r in range(z.shape[0])]
    fraction = metric.startswith("restored")
    nan = np.isnan(z)
    # A fraction's bar spans -1..1, widened to the data where a patch overshoots (a fraction below -1: the patch
    # made the readout worse than the corruption did), so that no cell is clipped to the bar's end.
    reach = max(1.0, float(np.abs(z[~nan]).max())) if (~nan).any() else 1.0
    main = go.Heatmap(
        z=np.where(nan, None, z).tolist(), x=sweep.col_labels, y=sweep.row_labels, text=hover,
        hoverinfo="text", colorscale="RdBu", zmid=0 if fraction else None,
        zmin=-reach if fraction else None, zmax=reach if fraction else None, showscale=showscale,
        colorbar=colorbar or {"title": {"text": metric}}, name=metric,
    )
    if not nan.any():
        return [main]
    # 0/0 cells would otherwise show the background, which reads like the white of 0 on RdBu.
    blank = go.Heatmap(
        z=np.where(nan, 1.0, None).tolist(), x=sweep.col_labels, y=sweep.row_labels, showscale=False,
        colorscale=[[0, NAN_COLOUR], [1, NAN_COLOUR]], zmin=0, zmax=1, name="0/0",
        hovertemplate="%{y} / %{x}<br>0/0: the corruption does not change this readout<extra></extra>",
    )
    return [main, blank]


def _layout(fig, sweep: SweepResult, title: str, rows: int, panels: int = 1):
    fig.update_layout(
        title={"text": html.escape(title)}, height=max(320, 22 * rows + 180),
        margin={"l": 120, "r": 40, "t": 90, "b": 90}, plot_bgcolor="white",
    )
    fig.update_xaxes(title="patched", type="category", tickangle=-60 if len(sweep.col_labels) * panels > 12 else 0)
    fig.update_yaxes(type="category", autorange="reversed")
    fig.update_layout(yaxis_title="patched at")


def heatmap(sweep: SweepResult, metric: str = "restored", title: str | None = None):
    """A plotly ``Figure``: ``metric`` per (row, col) of ``sweep``, with label flips and centroid error on hover;
    0/0 cells in grey."""
    import plotly.graph_objects as go

    z = sweep.values[metric].numpy().astype(float)
    fig = go.Figure(_heat_traces(sweep, z, metric))
    _layout(fig, sweep, (title or f"{sweep.title}: {METRIC_TITLES.get(metric, metric)}"
                         f" (read after {sweep.read_label or sweep.read_layer}; grey: 0/0)"), len(sweep.row_labels))
    return fig


def heatmap_pair(sweep: SweepResult, local: np.ndarray, metric: str = "restored"):
    """Two heatmaps side by side, each on its own colour bar (the same -1..1 unless a panel's data reaches
    beyond): ``metric`` read right after the block each row patches (``local``, see
    :func:`analysis.patching.report.local_readout`) and at the sweep's read layer."""
    from plotly.subplots import make_subplots

    from analysis.views.figure_parts import colorbar_beside

    final = sweep.values[metric].numpy().astype(float)
    fig = make_subplots(rows=1, cols=2, shared_yaxes=True, horizontal_spacing=0.12, subplot_titles=(
        "read right after the patched block", f"read after {sweep.read_label or sweep.read_layer} (final)"))
    for col, z in ((1, np.asarray(local, dtype=float)), (2, final)):
        for trace in _heat_traces(sweep, z, metric, colorbar=colorbar_beside(fig, 1, col, 2, metric)):
            fig.add_trace(trace, row=1, col=col)
    _layout(fig, sweep, f"{sweep.title}: {METRIC_TITLES.get(metric, metric)} (grey: 0/0, nothing to restore)",
            len(sweep.row_labels), panels=2)
    return fig


def _fraction_text(v: float) -> str:
    return "0/0 (nothing to restore)" if np.isnan(v) else f"{v:.3f}"
