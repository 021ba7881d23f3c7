"""The residual stream, layer by layer, in the layout's named basis.

:func:`residual_streams` reads the residual at the input and after the attention (``resid_mid``) and the MLP
(``resid_post``) of every block, from the run as it ran (:func:`analysis.views._common.run_activations`: a user's
cache where the run was read from one, hooks and all, else a re-run). Reading both halves of a block is what makes the
staging slots visible: a head writes ``Y_stage`` (or ``C_stage``), and the MLP of the same block commits it to
``Y`` (or ``C``) and empties the slot, so at ``resid_post`` the slots are always empty.

* :func:`residual_norms`: for every read-out position, (token type x named subspace) maps of the mean norm of the
  subspace over the tokens of that type — which slot holds something, on which tokens, when.
* :func:`residual_tokens`: the full residual vector of a few chosen tokens, every dimension labelled by the
  layout (``X[0]``, ``C_stage[1]``, ``IS_POINT`` ...), with a slider over the read-out positions.

Values are in the circuit's unit-scaled coordinates (the encoder centres the data and scales it into the unit
ball; see :mod:`circuits.encoding`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import plotly.graph_objects as go
import torch
from plotly.subplots import make_subplots

from analysis.capture import ExecutionPath
from analysis.views._common import View, as_capture, display_clusters, layer_title, run_activations, token_labels
from analysis.views.figure_parts import below_plot, slider
from analysis.views.sampling import min_assign_margin
from circuits import hook_names
from circuits.encoding import UnitScaling, decode
from circuits.layout import TOKEN_TYPES


#: Why a structured re-run can differ from its capture (tests/unit/test_views.py reproduces it: a capture that keeps
#: each block's input, as the re-run does, equals the re-run bit for bit).
_STRUCTURED_ORDER = (": the verified run updated each block's residual in place, a chunk of positions at a time;"
                     " the re-run keeps each block's input to draw it, so it evaluates each block whole and its"
                     " float64 sums round in another order.")

#: Up to this many tokens the streams keep every token's full residual; beyond it, only the chosen tokens'.
ALL_TOKENS_LIMIT = 2000


@dataclass
class ResidualStreams:
    """The residual of one problem at every read-out position ``p``.

    ``values[p]`` holds the full vectors of the tokens ``token_positions`` (every token for small problems);
    ``mean_norm[p, t, s]`` / ``max_norm[p, t, s]`` aggregate the norm of subspace ``s`` over *all* tokens of type
    ``t``, so the norms view covers every token even when only a few are kept in full.
    """

    labels: list[str]
    hooks: list[str]
    token_positions: list[int]
    values: np.ndarray
    mean_norm: np.ndarray
    max_norm: np.ndarray
    notes: list[str] = field(default_factory=list)
    #: What the streams cannot show of the run (read-out positions a hooked run's cache lacks), for above a figure.
    caveats: list[str] = field(default_factory=list)


def read_positions(circuit) -> list[tuple[str, str]]:
    """(label, hook name): the input, then after the attention and after the MLP of every block."""
    out = [("input", hook_names.resid_pre(0))]
    for layer in range(circuit.n_layers):
        out.append((f"{layer_title(circuit, layer)}, after attn", hook_names.resid_mid(layer)))
        out.append((f"{layer_title(circuit, layer)}, after MLP", hook_names.resid_post(layer)))
    return out


def residual_streams(obj, b: int = 0, tokens: list[int] | None = None) -> ResidualStreams:
    """The residual of problem ``b`` at every read-out position, from the run as it ran.

    The capture keeps only ``resid_pre``/``resid_post`` decoded, so the streams come from
    :func:`~analysis.views._common.run_activations`: a user's cache, read as it ran (hooks and all), or a re-run of
    the circuit on the same input along the capture's execution path. A re-run's final state is compared with the
    verified capture and any difference is reported in ``notes`` (a deterministic circuit reproduces it bit for
    bit); read-out positions a hooked run's cache lacks are left out and named in ``caveats``. ``tokens``: the
    positions kept in full (default: every token up to :data:`ALL_TOKENS_LIMIT`, else :func:`default_tokens`).
    """
    cap = as_capture(obj)
    if cap.sampled is not None:
        return sampled_streams(cap, b, tokens)
    circ, enc = cap.circuit, cap.encoded
    seq, layout = enc.sequence, circ.layout
    positions = read_positions(circ)
    if tokens is None:
        tokens = list(range(seq.n_tokens)) if seq.n_tokens <= ALL_TOKENS_LIMIT else default_tokens(cap, b)
    names = list(layout.names)
    P = len(positions)
    values = np.zeros((P, len(tokens), layout.d_model))
    mean = np.zeros((P, len(TOKEN_TYPES), len(names)))
    peak = np.zeros_like(mean)
    hooks = [hook for _, hook in positions]
    slot = {hook: p for p, hook in enumerate(hooks)}
    filled, last = [], None

    def take(hook: str, resid: torch.Tensor) -> None:
        nonlocal last
        p, r = slot[hook], resid[0].detach().cpu().to(torch.float64)
        values[p] = r[tokens].numpy()
        for t, ttype in enumerate(TOKEN_TYPES):
            tok = r[seq.positions(ttype)]
            for s, name in enumerate(names):
                norms = torch.linalg.vector_norm(tok[:, layout[name]], dim=-1)
                mean[p, t, s], peak[p, t, s] = float(norms.mean()), float(norms.max())
        filled.append(p)
        last = resid

    caveats = run_activations(obj, hooks, take, b)
    notes = []
    if not cap.from_user_cache:
        final_state = decode(layout, last, seq, _scaling_of(enc.scaling, b))
        final = cap.final
        dc = float(np.abs(final_state.unit_centroids[0] - final.unit_centroids[b]).max())
        dy = float(np.abs(final_state.assignments[0] - final.assignments[b]).max())
        if dc or dy:
            notes.append(f"These figures are drawn from a re-run of the circuit on the same input, whose final state"
                         f" differs from the verified run's by {dc:.3g} in the centroids and {dy:.3g} in the"
                         " assignments (unit-scaled)" + (_STRUCTURED_ORDER if cap.path == ExecutionPath.STRUCTURED
                                                         else "."))
    kept = sorted(set(filled))
    return ResidualStreams([positions[p][0] for p in kept], [hooks[p] for p in kept], list(tokens), values[kept],
                           mean[kept], peak[kept], notes, caveats)


def sampled_streams(cap, b: int = 0, tokens: list[int] | None = None) -> ResidualStreams:
    """:func:`residual_streams` of a lean capture: the residual it kept of BOS, its sampled points and the centroids
    (:mod:`analysis.capture.sampled`), as the verified run made it, entering the first block and after every block's
    MLP; norms over those tokens. ``tokens``: positions among them kept in full (default: :func:`default_tokens`)."""
    sampled, seq, layout = cap.sampled, cap.encoded.sequence, cap.circuit.layout
    positions = [(label, hook) for label, hook in read_positions(cap.circuit) if hook in sampled.resid]
    held = [int(p) for p in sampled.positions]
    tokens = default_tokens(cap, b) if tokens is None else list(tokens)
    if not set(tokens) <= set(held):
        raise ValueError(f"this run kept the residual of {len(held):,} tokens (BOS, its sampled points, the"
                         " centroids) alone: choose tokens among them (capture.sampled.positions)")
    names = list(layout.names)
    columns = np.searchsorted(sampled.positions, tokens)
    values = np.stack([sampled.resid[hook][b][columns] for _, hook in positions])
    mean = np.zeros((len(positions), len(TOKEN_TYPES), len(names)))
    peak = np.zeros_like(mean)
    every = np.arange(seq.n_tokens)
    types = [np.flatnonzero(np.isin(sampled.positions, every[seq.positions(ttype)])) for ttype in TOKEN_TYPES]
    for p, (_, hook) in enumerate(positions):
        r = torch.from_numpy(sampled.resid[hook][b])
        for t, rows in enumerate(types):
            for s, name in enumerate(names):
                norms = torch.linalg.vector_norm(r[rows][:, layout[name]], dim=-1)
                mean[p, t, s], peak[p, t, s] = float(norms.mean()), float(norms.max())
    m = len(sampled.points)
    caveat = (f"This run is at scale ({seq.n:,} points): it kept the residual of BOS, the {m:,} sampled points and"
              f" the {seq.k} centroids alone, as it ran, entering the first block and after each block's MLP. Point"
              f" norms are over those {m:,} points, not all {seq.n:,}; the run updated each block in place, so the"
              " residual between a block's attention and its MLP (where the staging slots are full) was not kept.")
    return ResidualStreams([label for label, _ in positions], [hook for _, hook in positions], tokens, values, mean,
                           peak, [], [caveat])


def _scaling_of(scaling: UnitScaling, b: int) -> UnitScaling:
    return UnitScaling(scaling.offset[b : b + 1], scaling.scale[b : b + 1])


def residual_norms(obj, b: int = 0, streams: ResidualStreams | None = None) -> View:
    """Mean norm of every named subspace on every token type, at every read-out position."""
    cap = as_capture(obj)
    seq, layout = cap.encoded.sequence, cap.circuit.layout
    streams = streams if streams is not None else residual_streams(obj, b)
    names = list(layout.names)
    P = len(streams.labels)
    mean, peak = streams.mean_norm, streams.max_norm
    data = dict(positions=streams.labels, token_types=list(TOKEN_TYPES), subspaces=names, mean_norm=mean,
                max_norm=peak)
    counts = {"bos": "1", "point": f"{seq.n:,}", "centroid": f"{seq.k:,}"}
    if cap.sampled is not None:  # the norms of a lean capture's points are over its sample
        counts["point"] = f"{len(cap.sampled.points):,} sampled of {seq.n:,}"
    fig = make_subplots(rows=1, cols=len(TOKEN_TYPES), shared_yaxes=True, horizontal_spacing=0.02,
                        subplot_titles=[f"{t} tokens ({counts[t]})" for t in TOKEN_TYPES])
    zmax = float(mean.max()) if mean.size and mean.max() > 0 else 1.0
    for t, ttype in enumerate(TOKEN_TYPES):
        custom = np.stack([peak[:, t, :].astype(str)], axis=-1)
        fig.add_trace(go.Heatmap(
            z=mean[:, t, :], x=names, y=streams.labels, customdata=custom, coloraxis="coloraxis",
            hovertemplate=f"{ttype} tokens, %{{x}} at %{{y}}<br>mean norm %{{z:.6g}}<br>"
                          "max norm %{customdata[0]}<extra></extra>",
            name=f"{ttype} tokens",
        ), row=1, col=t + 1)
        fig.update_xaxes(type="category", tickangle=-60, row=1, col=t + 1)
    fig.update_yaxes(type="category", autorange="reversed")
    fig.update_yaxes(title=dict(text="read-out position"), row=1, col=1)
    fig.update_layout(
        coloraxis=dict(colorscale="Viridis", cmin=0, cmax=zmax, colorbar=dict(title=dict(text="mean |v|"))),
        height=max(380, 110 + 16 * P), margin=dict(l=170, r=20, t=60, b=90),
    )
    notes = list(streams.notes) + [
        f"Each cell is the mean Euclidean norm of one named subspace over {'all' if cap.sampled is None else 'the kept'}"
        " tokens of one type (hover for the maximum), unit-scaled. " + _staging_sentence(streams, names, cap.circuit)]
    return View("residual_norms", "Residual stream by subspace", fig, data, notes, list(streams.caveats))


#: The layout's staging slots: a head writes them, the MLP of its block commits and empties them.
STAGING = ("C_stage", "Y_stage")


def _staging_sentence(streams: ResidualStreams, names: list[str], circuit) -> str:
    """What the staging slots do in this run: empty after every block's MLP, or where they are not."""
    posts = {hook_names.resid_post(layer) for layer in range(circuit.n_layers)}
    held = []
    for p, hook in enumerate(streams.hooks):
        for slot in STAGING:
            if hook in posts and slot in names and streams.max_norm[p, :, names.index(slot)].max() > 0:
                t = int(streams.mean_norm[p, :, names.index(slot)].argmax())
                held.append(f"{slot} at {streams.labels[p]} (mean norm {streams.mean_norm[p, t, names.index(slot)]:.3g}"
                            f" on {TOKEN_TYPES[t]} tokens)")
    if not held:
        return ("Staging slots light up only after the attention of their block: the MLP commits them and empties "
                "them.")
    return (f"Staging slots are written by the attention of a block and, in the construction, committed and emptied"
            f" by its MLP; in this run {len(held)} read-out(s) after an MLP still hold one: {'; '.join(held[:6])}"
            + (" ..." if len(held) > 6 else "") + ".")


def default_tokens(obj, b: int = 0, per_cluster: int = 1, max_centroids: int = 12) -> list[int]:
    """Sequence positions worth reading in full: the BOS sink, in each final cluster the point with the
    smallest assignment margin (the closest call), and the first centroid tokens."""
    cap = as_capture(obj)
    seq = cap.encoded.sequence
    cluster, _ = display_clusters(cap.final.assignments, b)
    margin = min_assign_margin(cap, b)
    # A lean capture holds the residual of its sampled points alone: the picks are among them.
    among = np.arange(seq.n) if cap.sampled is None else cap.sampled.points
    picks = []
    for c in np.unique(cluster[among]):
        members = among[cluster[among] == c]
        picks.extend(int(i) for i in members[np.argsort(margin[members], kind="stable")[:per_cluster]])
    return [seq.bos, *(seq.point(i) for i in sorted(picks)),
            *range(seq.centroids.start, seq.centroids.start + min(seq.k, max_centroids))]


def residual_tokens(obj, tokens: list[int] | list[str] | None = None, b: int = 0,
                    streams: ResidualStreams | None = None) -> View:
    """The whole residual of chosen tokens (positions or labels such as ``"x3"``, ``"c0"``), every dimension
    labelled by the layout, with a slider over the read-out positions."""
    cap = as_capture(obj)
    seq, layout = cap.encoded.sequence, cap.circuit.layout
    labels = token_labels(cap)
    if tokens is None:
        tokens = default_tokens(obj, b)
    positions = [labels.index(t) if isinstance(t, str) else int(t) for t in tokens]
    if streams is None or not set(positions) <= set(streams.token_positions):
        streams = residual_streams(obj, b, tokens=positions)
    values = streams.values[:, [streams.token_positions.index(p) for p in positions]]  # [P, m, d_model]
    ylab = [labels[p] for p in positions]
    dims = layout.labels
    data = dict(positions=streams.labels, tokens=ylab, token_positions=positions, dims=dims, values=values)
    vmax = float(np.abs(values).max()) or 1.0
    fig = go.Figure()
    for p, label in enumerate(streams.labels):
        fig.add_trace(go.Heatmap(
            z=values[p].astype(np.float32), x=dims, y=ylab, coloraxis="coloraxis",
            visible=p == len(streams.labels) - 1,
            hovertemplate="%{y} . %{x}<br>%{z:.6g}<extra>" + label + "</extra>", name=label,
        ))
    # Vertical rules and names between the layout's subspaces.
    shapes, notes_ann = [], []
    for name in layout.names:
        s = layout[name]
        if s.start > 0:
            shapes.append(dict(type="line", xref="x", x0=s.start - 0.5, x1=s.start - 0.5, yref="paper", y0=0, y1=1,
                               line=dict(color="#333", width=1)))
        if s.stop - s.start > 1:  # a one-dimensional subspace is named by its tick label already
            notes_ann.append(dict(x=(s.start + s.stop - 1) / 2, y=1.0, xref="x", yref="paper", yanchor="bottom",
                                  text=name, showarrow=False, font=dict(size=11)))
    masks = [[i == p for i in range(len(streams.labels))] for p in range(len(streams.labels))]
    steps = [dict(label=label, args=[{"visible": masks[p]}, {}]) for p, label in enumerate(streams.labels)]
    height, top, bottom = max(420, 300 + 22 * len(positions)), 80, 200
    fig.update_layout(
        sliders=[slider(steps, "read-out position: ", active=len(steps) - 1,
                        y=below_plot(110, height, top, bottom))],
        shapes=shapes, annotations=notes_ann,
        coloraxis=dict(colorscale="RdBu_r", cmin=-vmax, cmax=vmax, colorbar=dict(title=dict(text="value"))),
        xaxis=dict(type="category", tickangle=-60),
        yaxis=dict(type="category", autorange="reversed", title=dict(text="token")),
        height=height, margin=dict(l=70, r=20, t=top, b=bottom),
    )
    notes = list(streams.notes) + ["Unit-scaled values. The slider starts at the last block's output; move it "
                                   "left to watch the slots fill and empty."]
    return View("residual_tokens", "Residual of chosen tokens", fig, data, notes, list(streams.caveats))
