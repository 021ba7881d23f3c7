"""QK and OV circuits of every head, in the layout's named residual basis.

TransformerLens gives a head's circuits as low-rank :class:`~transformer_lens.FactoredMatrix` objects:
``attn.QK[h]`` is ``W_Q W_K^T`` (``score = resid_query @ W_QK @ resid_key``) and ``attn.OV[h]`` is ``W_V W_O``
(a key's residual times ``W_OV`` is what it writes into the query's residual). Both are ``d_model x d_model``
matrices whose rows and columns are the layout's labelled dimensions, so they read directly as sentences:

* QK, row ``X[0]`` column ``C[0]`` = ``2 beta``: the query *reads* ``X``, the key *reads* ``C``;
* OV, row ``ID[j]`` column ``Y_stage[j]`` = 1: the key's ``ID`` is *written* into the query's ``Y_stage``.

Each figure has two panels: the matrix grouped by subspace (for each pair of subspaces the entry of largest
magnitude, with its sign) and the full matrix restricted to the dimensions any entry touches. Entries span
many decades (``beta = 1e14`` beside 1), so colours use a signed log scale; hover gives exact values.
Layers whose matrices are identical (the construction ties weights across layers) are shown once; a menu
picks among the distinct ones. Biases (``b_Q``, ``b_K``, ``b_V``) are not part of these bilinear maps; a note
says when a head has non-zero ones.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from analysis.views._common import View, alteration_caveats, as_circuit
from analysis.views.figure_parts import dropdown, signed_log, signed_log_ticks, visibility

#: Above this ratio of largest to smallest non-zero magnitude a head is coloured on a signed log scale.
LOG_RANGE = 100.0

KINDS = {
    "QK": dict(rows="query reads", cols="key reads", what="attention score",
               bias=("b_Q", "b_K")),
    "OV": dict(rows="value reads (key token)", cols="writes (query token)", what="output",
               bias=("b_V",)),
}


@dataclass
class HeadGroup:
    """Heads (layer, head) that share one matrix."""

    heads: list[tuple[int, int]]
    matrix: np.ndarray

    def title(self, circuit) -> str:
        kinds = sorted({circuit.schedule[layer] for layer, _ in self.heads})
        layers = ", ".join(str(layer) for layer, _ in self.heads)
        heads = sorted({h for _, h in self.heads})
        head = f" head {heads[0]}" if len(heads) == 1 and circuit.model.cfg.n_heads > 1 else ""
        return f"{'/'.join(kinds)} head{head}: layer{'s' if len(self.heads) > 1 else ''} {layers}"


def head_matrices(obj, which: str = "QK") -> list[HeadGroup]:
    """``which`` ("QK" or "OV") of every head as a numpy matrix, grouped by exact equality."""
    if which not in KINDS:
        raise ValueError(f"which must be one of {tuple(KINDS)}, got {which!r}")
    model = as_circuit(obj).model
    groups: list[HeadGroup] = []
    for layer, block in enumerate(model.blocks):
        factored = getattr(block.attn, which)  # FactoredMatrix [n_heads, d_model, d_model]
        for h in range(model.cfg.n_heads):
            mat = factored[h].AB.detach().cpu().double().numpy()
            for g in groups:
                if g.matrix.shape == mat.shape and np.array_equal(g.matrix, mat):
                    g.heads.append((layer, h))
                    break
            else:
                groups.append(HeadGroup([(layer, h)], mat))
    return groups


def subspace_blocks(matrix: np.ndarray, layout) -> tuple[np.ndarray, np.ndarray]:
    """For every (row subspace, column subspace): the entry of largest magnitude (signed) and the block's
    Frobenius norm."""
    names = layout.names
    peak = np.zeros((len(names), len(names)))
    frob = np.zeros_like(peak)
    for i, a in enumerate(names):
        for j, c in enumerate(names):
            block = matrix[layout[a], layout[c]]
            flat = block.ravel()
            if flat.size:
                peak[i, j] = flat[np.abs(flat).argmax()]
                # Scaled by the peak first, so that entries near float64's largest (beta) do not overflow.
                scale = float(np.abs(flat).max())
                frob[i, j] = scale * np.linalg.norm(flat / scale) if scale > 0 else 0.0
    return peak, frob


def colour_scale(matrix: np.ndarray, title: str):
    """How to colour one head: (transform, zmax, colorbar, log floor or None).

    Entries spanning more than :data:`LOG_RANGE` are put on a signed log scale whose smallest non-zero
    magnitude maps to +-1; otherwise the values are drawn as they are.
    """
    nonzero = np.abs(matrix[matrix != 0])
    floor = float(nonzero.min()) if nonzero.size else 1.0
    top = float(nonzero.max()) if nonzero.size else 1.0
    if top / floor <= LOG_RANGE:
        return (lambda m: m), top, dict(title=dict(text=title), exponentformat="e"), None
    tickvals, ticktext = signed_log_ticks(floor, top)
    colorbar = dict(title=dict(text=f"{title}<br>(signed log)"), tickvals=tickvals, ticktext=ticktext)
    return (lambda m: signed_log(m, floor)), float(signed_log(np.array([top]), floor)[0]), colorbar, floor


def _nonzero_bias(model, which: str) -> list[str]:
    out = []
    for layer, block in enumerate(model.blocks):
        for name in KINDS[which]["bias"]:
            bias = getattr(block.attn, name, None)
            if bias is not None and bool((bias != 0).any()):
                out.append(f"layer {layer} {name}")
    return out


def _add_head(fig: go.Figure, circ, which: str, g, block: tuple[np.ndarray, np.ndarray], gi: int) -> float | None:
    """Head group ``gi``'s two heatmaps (by subspace; every touched dimension); returns its colour floor."""
    spec, names, labels = KINDS[which], list(circ.layout.names), circ.layout.labels
    peak, frob = block
    colour, zmax, colorbar, floor = colour_scale(g.matrix, f"W_{which}")
    scale = dict(colorscale="RdBu_r", zmin=-zmax, zmax=zmax, zmid=0)
    # Non-zero rows and columns (a sum of |entries| would overflow, with numpy's warning, at knobs near 1e308).
    used_r = np.flatnonzero((g.matrix != 0).any(axis=1))
    used_c = np.flatnonzero((g.matrix != 0).any(axis=0))
    if used_r.size == 0 or used_c.size == 0:  # an all-zero head: show its first row and column
        used_r, used_c = np.arange(1), np.arange(1)
    sub = g.matrix[np.ix_(used_r, used_c)]
    fig.add_trace(go.Heatmap(
        z=colour(peak), x=names, y=names, showscale=False, **scale,
        customdata=np.stack([peak.astype(str), frob.astype(str)], axis=-1),
        hovertemplate=f"{spec['rows']} %{{y}}, {spec['cols']} %{{x}}<br>largest entry %{{customdata[0]}}"
                      "<br>block norm %{customdata[1]}<extra></extra>",
        visible=gi == 0, name=g.title(circ),
    ), row=1, col=1)
    fig.add_trace(go.Heatmap(
        z=colour(sub), x=[labels[c] for c in used_c], y=[labels[r] for r in used_r], **scale,
        colorbar=colorbar,
        customdata=sub.astype(str),
        hovertemplate=f"W_{which}[%{{y}}, %{{x}}] = %{{customdata}}<extra></extra>",
        visible=gi == 0, name=f"{g.title(circ)} (full)",
    ), row=1, col=2)
    return floor


def head_circuit(obj, which: str = "QK") -> View:
    """The ``which`` ("QK" or "OV") circuit of every distinct head, in the named basis."""
    circ = as_circuit(obj)
    layout = circ.layout
    spec = KINDS[which]
    groups = head_matrices(circ, which)
    names = list(layout.names)
    labels = layout.labels
    blocks = [subspace_blocks(g.matrix, layout) for g in groups]
    data = dict(
        which=which,
        labels=labels,
        subspaces=names,
        groups=[dict(heads=g.heads, title=g.title(circ), matrix=g.matrix, block_peak=p, block_norm=f)
                for g, (p, f) in zip(groups, blocks)],
    )
    fig = make_subplots(rows=1, cols=2, column_widths=[0.42, 0.58], horizontal_spacing=0.12,
                        subplot_titles=("grouped by subspace (largest entry)", "every touched dimension"))
    floors = [_add_head(fig, circ, which, g, block, gi) for gi, (g, block) in enumerate(zip(groups, blocks))]
    data["colour_floor"] = floors
    masks = visibility(len(fig.data), [[2 * i, 2 * i + 1] for i in range(len(groups))])
    buttons = [dict(label=g.title(circ), args=[{"visible": masks[i]}, {}]) for i, g in enumerate(groups)]
    n_dims = max(len(np.flatnonzero(np.abs(g.matrix).sum(axis=1) > 0)) for g in groups) if groups else 1
    fig.update_layout(
        updatemenus=[dropdown(buttons, x=0.0, y=1.08)] if len(groups) > 1 else [],
        height=max(500, min(1000, 240 + 14 * n_dims)),
        margin=dict(l=110, r=20, t=110, b=110),
    )
    if len(groups) == 1:
        fig.update_layout(title=dict(text=groups[0].title(circ), x=0.0, font=dict(size=14)))
    for col in (1, 2):
        fig.update_xaxes(type="category", tickangle=-60, title=dict(text=spec["cols"]), row=1, col=col)
        fig.update_yaxes(type="category", autorange="reversed", title=dict(text=spec["rows"]), row=1, col=col)
    notes = [f"{len(groups)} distinct {which} matri{'ces' if len(groups) != 1 else 'x'} over "
             f"{sum(len(g.heads) for g in groups)} heads (identical layers are shown once; the menu picks one). "
             f"Heads whose entries span more than {LOG_RANGE:.0f}x are coloured by sign(w) * (1 + log10(|w| / w_min)), "
             "w_min the head's smallest non-zero magnitude; hover for exact values."]
    biased = _nonzero_bias(circ.model, which)
    if biased:
        notes.append(f"non-zero biases not shown in W_{which}: {', '.join(biased)}")
    titles = {"QK": "QK circuits (what each head compares)", "OV": "OV circuits (what each head moves)"}
    return View(f"{which.lower()}_circuit", titles[which], fig, data, notes, alteration_caveats(obj))


def qk_circuit(obj) -> View:
    return head_circuit(obj, "QK")


def ov_circuit(obj) -> View:
    return head_circuit(obj, "OV")
