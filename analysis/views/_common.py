"""Shared pieces of the views: the :class:`View` record, what a view accepts, and how it reads labels, rows and
clusters off a run.

A view takes what a user has in hand (anything :func:`analysis.pipeline.as_run` takes: a
:class:`~analysis.pipeline.RunResult`, a :class:`~analysis.capture.Capture`, a fitted estimator, or an
``(ActivationCache, EncodedBatch)`` pair; the weight views also take a bare :class:`~circuits.build.KMeansCircuit`)
and returns a :class:`View`: the data it computed, over *every* point, and a plotly figure, which may draw a
subsample of the points (:mod:`analysis.views.sampling` says which) so that a report for thousands of points stays
responsive. The figures' common parts (colours, scales, sliders) are in :mod:`analysis.views.figure_parts`.

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

from analysis.capture import Capture, stream_activations
from analysis.pipeline import as_run
from analysis.verify.report import weight_edits_text
from circuits.build import KMeansCircuit
from circuits.onehot import OneHotStack, one_hot


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
        unaltered = rep is not None and not rep.alterations and not cap.hooked_patterns and not cap.added_hooks
        if not missing or not unaltered:
            for name in names:
                if name not in missing:
                    take(name, cap.cache[name][b : b + 1])
            return [] if not missing else [
                f"This run was changed by hooks and its cache lacks {len(missing)} of the activations this figure"
                f" reads ({_named(missing)}): they are left out, as a re-run would not have the run's hooks. Run"
                " run_with_cache without a names_filter to see them."]
    stream_activations(cap.circuit, cap.encoded.stream()[b : b + 1], cap.path, names, take)
    if cap.added_hooks and cap.circuit.added_hooks() != cap.added_hooks:
        return [f"Hooks added to the model ran in this run (on {_named(cap.added_hooks)}) and the model carries others"
                " now: this figure re-ran the circuit with the hooks it carries now, so it is not the run."]
    return []


def _named(names: list[str]) -> str:
    """``names`` for a caveat: the first four, and ``...`` after them."""
    return ", ".join(names[:4]) + (" ..." if len(names) > 4 else "")


def alteration_caveats(obj) -> list[str]:
    """For a view of the weights, which it reads as they are now: where they are not the construction's (changed
    since the build), where they are not what ran (changed since the run), and what of the run they cannot show
    (hooks)."""
    circuit = as_circuit(obj)
    cap = None if isinstance(obj, KMeansCircuit) else as_capture(obj)
    ran = cap.weight_edits if cap is not None else []
    now = circuit.weight_edits()
    out = []
    if now != ran:
        now_text = weight_edits_text(now) if now else "back to the weights as built"
        ran_text = weight_edits_text(ran) if ran else "the weights as built"
        out.append(f"The weights were changed after this run (now {now_text}; the run had {ran_text}): they are drawn"
                   " as they are now, not as they ran.")
    elif now:
        out.append(f"The weights that ran were changed since the build ({weight_edits_text(now)}): they are drawn as"
                   " they ran, and what is said of the construction's weights may not hold of them.")
    rep = report_of(obj)
    hooks = []
    if rep is not None and rep.alterations:
        hooks.append(f"Hooks changed this run ({'; '.join(rep.alterations)}).")
    if cap is not None and cap.added_hooks:
        hooks.append(f"Hooks added to the model ran in this run (on {_named(cap.added_hooks)}).")
    if hooks:
        out.append(" ".join(hooks) + " Hooks act on activations, not on weights: these are the circuit's weights"
                   f" {'as they are now' if now else 'as built'}, and where the hooks acted the run did not compute"
                   " what they compute.")
    return out


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
