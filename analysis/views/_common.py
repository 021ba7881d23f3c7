"""Shared pieces of the views: the :class:`View` record, what a view accepts, which points get drawn, colours.

A view takes what a user has in hand (anything :func:`analysis.pipeline.as_run` takes: a
:class:`~analysis.pipeline.RunResult`, a :class:`~analysis.capture.Capture`, a fitted estimator, or an
``(ActivationCache, EncodedBatch)`` pair; the weight views also take a bare :class:`~circuits.build.KMeansCircuit`) and returns a :class:`View`: the data it
computed, over *every* point, and a plotly figure, which may draw a subsample of the points so that a report for
thousands of points stays responsive. :func:`point_sample` decides which points are drawn; it always keeps the
points a reader most needs to see (ties, mismatches, the smallest assignment margins).

Nothing here assumes hard one-hot assignments: cluster membership for display is the argmax of the soft
assignment read from the residual stream (``DecodedState.assignments``), and its weight is shown next to it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import plotly.graph_objects as go
from jaxtyping import Float, Int
from plotly.colors import qualitative

from analysis.capture import AssignAttention, Capture, stream_activations
from analysis.capture.keep import SAMPLE_SEED, prior_sample
from analysis.pipeline import as_run
from analysis import scheduler
from circuits.build import KMeansCircuit
from circuits.onehot import OneHotStack, one_hot

#: Points drawn per figure by default. Chosen so that a report at n = 2,000 renders in about a second.
DEFAULT_MAX_POINTS = 400
#: At most this share of the drawing budget goes to the points with the smallest assignment margins.
LOW_MARGIN_SHARE = 0.2


@dataclass(repr=False)
class View:
    """What one view computed (``data``, over all points) and how it draws it (``figure``). ``notes`` explain the
    figure (printed under it); ``caveats`` say what it cannot show of the run it is given (printed above it, and
    empty whenever the figure is that run)."""

    name: str
    title: str
    figure: go.Figure
    data: dict[str, Any]
    notes: list[str] = field(default_factory=list)
    caveats: list[str] = field(default_factory=list)

    def show(self, *args, **kwargs) -> None:
        self.figure.show(*args, **kwargs)

    def __repr__(self) -> str:
        return (f"View({self.name!r}: {self.title}; {len(self.figure.data)} traces; "
                f"data: {', '.join(self.data)})")

    def _ipython_display_(self) -> None:
        # A view on the last line of a notebook cell displays as its figure, through the figure's own display hook:
        # that one initialises the "notebook" renderer (plotly.js embedded for offline use) once per kernel, whereas
        # the figure's _repr_mimebundle_ initialises it again at every call, putting a 4.8 MB copy of plotly.js in
        # every figure's output (tests/acceptance/test_notebooks.py checks each executed notebook holds it at most
        # once).
        self.figure._ipython_display_()

    def _repr_mimebundle_(self, include=None, exclude=None):
        # Front ends other than IPython's display (which prefers _ipython_display_) get the figure's bundle.
        return self.figure._repr_mimebundle_(include=include, exclude=exclude)


def as_capture(obj) -> Capture:
    """The :class:`Capture` of anything :func:`analysis.pipeline.as_run` takes (or the capture itself)."""
    if isinstance(obj, Capture):
        return obj
    return as_run(obj).capture


def as_circuit(obj) -> KMeansCircuit:
    """The :class:`KMeansCircuit` of a run, a capture, a fitted estimator, or the circuit itself."""
    if isinstance(obj, KMeansCircuit):
        return obj
    return as_capture(obj).circuit


def report_of(obj):
    """The verification report of a run, a fitted estimator or a cached run; ``None`` for a bare capture."""
    if isinstance(obj, (Capture, KMeansCircuit)):
        return None
    return as_run(obj).report


def run_activations(obj, names: list[str], take, b: int = 0) -> list[str]:
    """Hand each activation named in ``names`` (``hook_names``: residual streams, patterns) of problem ``b`` to
    ``take(name, value)``, a batch of one, in the order of ``names``, *from the run as it ran*; return the caveats
    for what could not be handed over.

    A capture read from a user's ``ActivationCache`` (:attr:`~analysis.capture.Capture.from_user_cache`) is that run,
    hooks and all: its activations are read from the cache, never from a re-run (:func:`analysis.capture.
    stream_activations` knows none of the user's hooks, so it would show another run). Where the cache lacks some
    of them (a ``names_filter``), a re-run stands in only when the verification found no hook that changed the run;
    else those are left out and the caveat names them. Any other capture keeps only what the verification reads, so
    the circuit is re-run on its input along its execution path (deterministic: the verified run, bit for bit).
    """
    cap = as_capture(obj)
    if cap.from_user_cache:
        held = set(cap.cache.keys())
        missing = [name for name in names if name not in held]
        rep = report_of(obj)
        unaltered = rep is not None and not rep.alterations and not cap.hooked_patterns
        if not missing or not unaltered:
            for name in names:
                if name not in missing:
                    take(name, cap.cache[name][b : b + 1])
            return [] if not missing else [
                f"This run was changed by hooks and its cache lacks {len(missing)} of the activations this figure"
                f" reads ({', '.join(missing[:4])}{' ...' if len(missing) > 4 else ''}): they are left out, as a"
                " re-run would not have the run's hooks. Run run_with_cache without a names_filter to see them."]
    stream_activations(cap.circuit, cap.encoded.stream()[b : b + 1], cap.path, names, take)
    return []


def alteration_caveats(obj) -> list[str]:
    """For a view of the weights of a run that hooks changed: the weights are not what ran."""
    rep = report_of(obj)
    if rep is None or not rep.alterations:
        return []
    return [f"Hooks changed this run ({'; '.join(rep.alterations)}). Hooks act on activations, not on weights: these"
            " are the circuit's weights as built, and where the hooks acted the run did not compute what they"
            " compute."]


def hooked_caveats(obj, kind: str) -> list[str]:
    """For a view of ``kind`` heads ("assign", "update") of a run whose hooks replaced some of their patterns
    (:attr:`~analysis.capture.Capture.hooked_patterns`): what the view shows there."""
    cap = as_capture(obj)
    hooked = {layer: rows for layer, rows in cap.hooked_patterns.items() if cap.circuit.schedule[layer] == kind}
    if not hooked:
        return []
    where = ", ".join(f"{layer_title(cap.circuit, layer)} ({rows} query rows)"
                      for layer, rows in sorted(hooked.items()))
    return [f"A hook of this run replaced the attention pattern of {where}: the pattern drawn there is the one that"
            " ran, not the softmax of its scores, so the margins there (the scores') certify nothing about it; its"
            " leak bound is the pattern's own distance from the hard pattern."]


def soft_clusters(assignments: Float[np.ndarray, "n k"]) -> tuple[Int[np.ndarray, " n"], Float[np.ndarray, " n"]]:
    """Display cluster (argmax) and its weight for each point; -1 where a point holds no assignment at all."""
    weight = assignments.max(axis=-1)
    cluster = np.where(weight > 0, assignments.argmax(axis=-1), -1)
    return cluster, weight


class TokenLabels(Sequence):
    """The token labels of a range of positions, each made when read: a lean capture's views draw a few hundred of
    a million points, whose labels would take a second to make each time a view asked for them."""

    def __init__(self, seq, positions: range):
        self.seq, self.positions = seq, positions

    def __len__(self) -> int:
        return len(self.positions)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return TokenLabels(self.seq, self.positions[i])
        return self.seq.label(self.positions[int(i)])


def token_labels(obj) -> Sequence:
    """Every token's label: a list, or for a lean capture labels made when read (:class:`TokenLabels`)."""
    cap = as_capture(obj)
    seq = cap.encoded.sequence
    return TokenLabels(seq, range(seq.n_tokens)) if cap.lean else seq.token_labels


def point_labels(obj) -> Sequence:
    seq = as_capture(obj).encoded.sequence
    return token_labels(obj)[seq.points]


def centroid_labels(obj) -> list[str]:
    seq = as_capture(obj).encoded.sequence
    return list(token_labels(obj)[seq.centroids])


def layer_title(circuit: KMeansCircuit, layer: int) -> str:
    """``"L3 assign"``: the block at ``layer`` and its role in the schedule."""
    return f"L{layer} {circuit.schedule[layer]}"


def per_layer(layers: list, b: int, *fields: str) -> dict[str, np.ndarray]:
    """``{field: array [layer, ...]}``: each named field of the layers' attention records for problem ``b``."""
    return {name: np.stack([getattr(lc.attention, name)[b] for lc in layers]) for name in fields}


def require_rows(cap: Capture) -> None:
    """Raise where a capture kept no attention rows to draw (lean, without a sample)."""
    if cap.sampled is None and cap.lean:
        raise ValueError(f"this run of {cap.encoded.n:,} points kept only what its verification reads, no attention"
                         " rows to draw: run it with RunOptions(sample=M) to keep M points' rows, or lean=False")


def drawn_rows(cap: Capture, layers: list) -> tuple[Int[np.ndarray, " rows"], list]:
    """The points whose attention rows a view can draw, and each layer's record holding them: every point and the
    layers' own records, or a lean capture's sampled points and their rows (:mod:`analysis.capture.sampled`)."""
    require_rows(cap)
    if cap.sampled is None:
        return np.arange(cap.encoded.n), [lc.attention for lc in layers]
    return cap.sampled.points, [cap.sampled.attention[lc.layer] for lc in layers]


def assignment_rows(assignments, b: int, rows) -> Float[np.ndarray, "m k"]:
    """Problem ``b``'s assignment rows ``rows`` (a lean capture's ``Y`` held as labels made one-hot for those rows
    alone, not ``n x k``)."""
    if isinstance(assignments, OneHotStack):
        return one_hot(assignments.labels[b][rows], assignments.k)
    return assignments[b][rows]


def cluster_sizes(assignments, b: int) -> Float[np.ndarray, " k"]:
    """Problem ``b``'s (soft) member count of each cluster: the column sums of its assignments (counted from the
    labels where ``Y`` is held as them)."""
    if isinstance(assignments, OneHotStack):
        labels = assignments.labels[b]
        return np.bincount(labels[labels >= 0], minlength=assignments.k).astype(np.float64)
    return assignments[b].sum(axis=0)


def display_clusters(assignments, b: int) -> tuple[Int[np.ndarray, " n"], Float[np.ndarray, " n"]]:
    """:func:`soft_clusters` of problem ``b``'s assignments, read off the labels where ``Y`` is held as them (the
    same numbers: a one-hot row's argmax is its label, its weight 1; a row of zeros is label -1, weight 0)."""
    if isinstance(assignments, OneHotStack):
        labels = assignments.labels[b]
        return labels, (labels >= 0).astype(np.float64)
    return soft_clusters(assignments[b])


def min_assign_margin(cap: Capture, b: int = 0) -> Float[np.ndarray, " n"]:
    """Each point's smallest assignment margin over every assign layer (+inf when there is no runner-up)."""
    margins = [lc.attention.margin[b] for lc in cap.layers if isinstance(lc.attention, AssignAttention)]
    if not margins:
        return np.full(cap.encoded.n, np.inf)
    return np.min(np.stack(margins), axis=0)


@dataclass(frozen=True)
class PointSample:
    """The points a figure draws: sorted indices into the problem's points, and why they were chosen."""

    indices: Int[np.ndarray, " m"]
    n: int
    flagged: int = 0
    low_margin: int = 0
    #: Drawn from the points a lean capture kept (:attr:`~analysis.capture.Capture.sampled`), chosen before the run
    #: with this seed (:func:`analysis.capture.keep.prior_sample`); ``None`` for a sample of a full capture.
    before_run_seed: int | None = None

    @property
    def complete(self) -> bool:
        return len(self.indices) == self.n

    @property
    def drawn(self) -> int:
        return len(self.indices)

    def note(self) -> str:
        if self.before_run_seed is not None:
            return self._before_run_note()
        if self.complete:
            return f"All {self.n:,} points are drawn."
        parts = []
        if self.flagged:
            parts.append(f"every tied or mismatched point ({self.flagged})")
        if self.low_margin:
            parts.append(f"the {self.low_margin} points with the smallest assignment margins")
        parts.append("a seeded random sample of the rest, stratified by final cluster")
        return (
            f"Drawn: {self.drawn:,} of {self.n:,} points ({', '.join(parts)}). Only the drawing is subsampled: "
            f"verification, certificates, norms and every number in the tables use all {self.n:,} points."
        )

    def _before_run_note(self) -> str:
        return (
            f"Drawn: {self.drawn:,} of {self.n:,} points, a uniform random sample (seed {self.before_run_seed}) chosen"
            f" before the run. From {scheduler.AT_SCALE_POINTS:,} points on a run keeps only what its verification"
            " reads, and beside it the attention rows and residual of these points alone; the points a smaller run's"
            " figures single out (ties, mismatches, the smallest margins) are known only once it has run, so they are"
            " drawn only where the sample holds them (the tables list every tie). Only the figures are sampled (the"
            f" residual norms too): verification, certificates and every number in the tables use all {self.n:,}"
            " points."
        )


def point_sample(obj, max_points: int | None = DEFAULT_MAX_POINTS, seed: int = 0, b: int = 0) -> PointSample:
    """Which points to draw when there are more than ``max_points`` (``None``: all of them).

    Priority: points involved in a tie or a mismatch of the verification report; then the points with the
    smallest assignment margins (at most :data:`LOW_MARGIN_SHARE` of the budget); then a seeded random sample
    of the rest, allocated to the final clusters in proportion to their sizes.
    """
    cap = as_capture(obj)
    n = cap.encoded.n
    if cap.lean:
        return kept_sample(cap, max_points)
    if max_points is None or n <= max_points:
        return PointSample(np.arange(n), n)
    if max_points < 1:
        raise ValueError(f"max_points must be positive, got {max_points}")
    chosen: list[int] = []
    rep = report_of(obj)
    if rep is not None:
        flagged = sorted({t.point for t in rep.ties} | {m.point for m in rep.mismatches})
        chosen.extend(flagged[:max_points])
    n_flagged = len(chosen)
    taken = np.zeros(n, dtype=bool)
    taken[chosen] = True
    margin = min_assign_margin(cap, b)
    budget_low = min(int(LOW_MARGIN_SHARE * max_points), max_points - len(chosen))
    low = [int(i) for i in np.argsort(margin, kind="stable") if not taken[i]][:budget_low]
    chosen.extend(low)
    taken[low] = True
    remaining = max_points - len(chosen)
    if remaining > 0:
        rng = np.random.default_rng(seed)
        cluster, _ = soft_clusters(cap.final.assignments[b])
        groups = [np.flatnonzero((cluster == c) & ~taken) for c in np.unique(cluster)]
        sizes = np.array([len(g) for g in groups], dtype=float)
        # Largest-remainder allocation of the remaining budget in proportion to the cluster sizes.
        quota = remaining * sizes / sizes.sum()
        alloc = np.floor(quota).astype(int)
        for i in np.argsort(-(quota - alloc), kind="stable")[: remaining - alloc.sum()]:
            alloc[i] += 1
        for g, a in zip(groups, np.minimum(alloc, sizes.astype(int))):
            chosen.extend(int(i) for i in rng.choice(g, size=a, replace=False))
    return PointSample(np.array(sorted(chosen), dtype=int), n, flagged=n_flagged, low_margin=len(low))



def sample_notes(sample: PointSample) -> tuple[list[str], list[str]]:
    """Where a figure states its sample: under it (``notes``) for a sample of a full capture, above it
    (``caveats``) for one chosen before a run at scale, which the figure cannot draw beyond."""
    if sample.before_run_seed is None:
        return [sample.note()], []
    return [], [f"Drawn: {sample.drawn:,} of {sample.n:,} points, a uniform random sample (seed"
                f" {sample.before_run_seed}) chosen before the run (the header says why): ties, mismatches and the"
                " smallest margins are drawn only where the sample holds them."]


def kept_sample(cap: Capture, max_points: int | None = DEFAULT_MAX_POINTS) -> PointSample:
    """What a lean capture can draw: the points it sampled (at most ``max_points`` of them, a seeded draw among
    them), or none where it sampled none."""
    kept = cap.sampled.points if cap.sampled is not None else np.zeros(0, dtype=np.int64)
    if max_points is not None and len(kept) > max_points:
        kept = kept[prior_sample(len(kept), max_points, SAMPLE_SEED)]
    return PointSample(kept, cap.encoded.n, before_run_seed=SAMPLE_SEED)


def head_layers(obj, kind: type, b: int, sample: PointSample | None,
                max_points: int | None) -> tuple[Capture, PointSample, list]:
    """What an attention view starts from: the capture, the points drawn (``sample``, or a fresh
    :func:`point_sample`) and the captured layers whose attention is of ``kind``."""
    cap = as_capture(obj)
    sample = sample if sample is not None else point_sample(obj, max_points, b=b)
    return cap, sample, [lc for lc in cap.layers if isinstance(lc.attention, kind)]

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
