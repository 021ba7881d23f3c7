"""Run a circuit and keep what the analyses need, decoded layer by layer.

Residual streams come from ``run_with_cache`` with a ``names_filter`` that keeps only ``resid_pre`` and
``resid_post`` of every block (:func:`stream_activations` re-runs a circuit for anything else a view needs). Attention is summarised inside forward hooks instead of being cached whole: a
full pattern is ``(n + k + 1)^2`` per layer, but only two blocks of it carry the algorithm.

* Assign layers keep, for every point query, its point x centroid scores and pattern (``n x k``) and a
  certificate: the chosen key, the margin (score of the chosen key minus the best other key, i.e. ``beta * gap``
  plus the tie-break) and ``leak_bound = sum_{other keys} exp(s - s_top)``, which bounds the attention mass off
  the chosen key (and is exactly 0 once every margin exceeds ~745 in float64).
* Update layers keep the centroid query rows (``k x (n + k + 1)``) of scores and pattern. Their certificate is
  computed against the *intended* support read from ``Y`` of the block's input: the members of each centroid,
  or the centroid itself when it has none.

The summaries and their certificates are computed in :mod:`analysis.capture.summaries`.

Variant circuits (see :mod:`circuits.variants`) are captured the same way, with three differences their spec
(``circuit.spec``) asks for: the problem may be re-encoded first (spherical k-means projects the points onto
the unit sphere; :attr:`Capture.encoded` is then what the circuit actually ran on); decoded states go through
the spec's readout (labels of soft responsibilities, centroids normalised); and with attention sinks
(``use_attention_sinks``) the assign summary also keeps the mass each point put on the sink.
"""

from __future__ import annotations

from dataclasses import replace
from collections.abc import Callable

import numpy as np
import torch
from jaxtyping import Float

from analysis.capture.keep import EVERYTHING, Keep
from analysis.capture.record import PATHS, Capture, ExecutionPath, LayerCapture
from analysis.capture.sampled import SampledRows
from analysis.capture.summaries import (
    AssignAttention,
    UpdateAttention,
    assign_certificate_grouped,
    summarise_assign_grouped,
    summarise_head,
    to_numpy,
    update_certificate,
    update_certificate_grouped,
    update_rows_grouped,
)
from analysis.errors import ProblemError
from circuits import hook_names
from circuits.blocks import ASSIGN, UPDATE
from circuits.build import KMeansCircuit
from circuits.encoding import DecodedState, EncodedBatch, StreamDecoder, encode
from circuits.onehot import OneHotStack, one_hot


def reencode(circuit: KMeansCircuit, encoded: EncodedBatch) -> EncodedBatch:
    """The problem as the variant's input map presents it to the circuit (e.g. projected onto the unit sphere)."""
    try:
        X, C0, scaling = circuit.spec.prepare(encoded.X, encoded.C0)
    except ValueError as exc:
        raise ProblemError(f"variant {circuit.variant}: {exc}") from None
    return encode(circuit.layout, X, C0, dtype=encoded.dtype, scaling=scaling, device=encoded.device,
                  hold_stream=encoded.resid is not None)


def on_device(circuit: KMeansCircuit, encoded: EncodedBatch, device: str | torch.device | None) -> EncodedBatch:
    """``encoded`` on the run's device (``device``, by default the circuit's), which must be the circuit's."""
    from circuits.devices import resolve

    wanted = circuit.device if device is None else resolve(device)
    if wanted.type != circuit.device.type:
        raise ValueError(f"the circuit was built on {circuit.device}, the run asks for {wanted}: build it there")
    if encoded.device.type == wanted.type:
        return encoded
    if encoded.resid is None:
        return replace(encoded, stream_device=circuit.device)
    return replace(encoded, resid=encoded.resid.to(circuit.device))


#: The dense forward holds a few (n + k + 1)^2 float64 matrices per layer: beyond this many tokens (~6 GB) it
#: is refused rather than left to exhaust memory.
DENSE_MAX_TOKENS = 12_000
#: ... and its time grows as tokens^2 x layers: 10,000 points and 10 iterations (1e8 x 22 = 2.2e9) take 26 s on 2
#: cores (docs/performance.md), so beyond this (about 5 minutes) it is refused too.
DENSE_MAX_WORK = 25_000_000_000


class PathUnavailable(RuntimeError):
    """No execution path can run this problem (the message says why)."""


def capture(circuit: KMeansCircuit, encoded: EncodedBatch, keep_cache: bool = False,
            on_layer: Callable[[int], None] | None = None, path: ExecutionPath | str = "dense",
            device: str | torch.device | None = None, keep: Keep = EVERYTHING, forward_threads: int = 1) -> Capture:
    """Run ``circuit`` on ``encoded`` and decode every layer's input and output.

    ``path``: ``"dense"`` runs the ``HookedTransformer`` forward with TransformerLens hooks; ``"structured"`` runs
    :func:`circuits.structured.structured_forward` on the same weights (same residual stream, O(n k d) attention;
    raises :class:`~circuits.structured.StructuredPathUnavailable` when the run is not structured); ``"auto"``
    tries the structured path and falls back to the dense one, recording why in ``Capture.path_note``. Raises
    :class:`PathUnavailable` when the asked-for path cannot run (not structured; too large for the dense path).
    ``on_layer(layer)`` is called as each block finishes (for progress bars); ``keep_cache`` keeps an
    ``ActivationCache`` of the residual streams on the result. ``device``: where to run (``"auto"``: cuda where
    present); by default the circuit's. The encoding is moved there; the circuit must have been built there.
    ``keep``: on the structured path, which per-point parts of each layer to keep (:class:`Keep`: everything, or what
    the verification declares it reads, :func:`analysis.verify.reads`, where its result is the same). The dense path
    keeps everything.
    ``forward_threads``: torch's threads for the structured forward (:class:`analysis.scheduler.Scheduler`).
    """
    if path not in PATHS:
        raise ValueError(f"unknown path {path!r}; expected one of {PATHS}")
    path = ExecutionPath(path)
    encoded = on_device(circuit, encoded, device)
    if circuit.spec.input_map is not None:
        encoded = reencode(circuit, encoded)
    note = ""
    if path != ExecutionPath.DENSE:
        from circuits.structured import StructuredPathUnavailable

        try:
            return _capture_structured(circuit, encoded, keep_cache, on_layer, keep, forward_threads)
        except StructuredPathUnavailable as exc:
            if path == ExecutionPath.STRUCTURED:
                raise PathUnavailable(str(exc)) from None
            note = str(exc)
    tokens = encoded.sequence.n_tokens
    if tokens > DENSE_MAX_TOKENS:
        raise PathUnavailable(
            f"{tokens} tokens are too many for the dense path (about {5 * 8 * tokens**2 / 2**30:.0f} GiB of attention"
            f" per layer; the limit is {DENSE_MAX_TOKENS})" + (f", and {note}" if note else ""))
    layers = len(circuit.schedule)
    if tokens**2 * layers > DENSE_MAX_WORK:
        raise PathUnavailable(
            f"{tokens} tokens over {layers} layers are too much work for the dense path (tokens^2 x layers ="
            f" {tokens**2 * layers:.3g}, above its limit of {DENSE_MAX_WORK:.3g}, about 5 minutes on 2 cores; fewer"
            " iterations or points)" + (f", and {note}" if note else ""))
    cap = _capture_dense(circuit, encoded, keep_cache, on_layer)
    cap.path_note = note
    return cap


def stream_activations(circuit: KMeansCircuit, resid: Float[torch.Tensor, "batch pos d_model"],
                       path: ExecutionPath | str, names: list[str], take: Callable[[str, torch.Tensor], None]) -> None:
    """Run ``circuit`` on ``resid`` along ``path`` (dense or structured) and hand each activation named in ``names``
    to ``take(hook name, value)`` as the run produces it (block by block: ``resid_pre``, ``pattern``, ``resid_mid``,
    ``resid_post``), nothing kept after. ``names``, made by the ``hook_names`` module, name residual streams
    (``resid_pre``/``resid_mid``/``resid_post``) and attention patterns (``pattern``, ``(batch, head, query,
    key)``); the structured path expands its grouped attention to that dense pattern. Both paths hand over the
    same names in the same order and, for a deterministic circuit, the same values (up to the order of
    floating-point summation, see :mod:`circuits.structured`). This is the one place that re-runs a circuit for
    what a :class:`Capture` does not keep (the residual and attention-pattern views)."""
    wanted = set(names)
    if ExecutionPath(path) != ExecutionPath.STRUCTURED:
        def hand_over(value: torch.Tensor, hook) -> None:
            take(hook.name, value)

        with torch.no_grad(), circuit.model.hooks(fwd_hooks=[(name, hand_over) for name in names]):
            circuit.model(resid, start_at_layer=0)
        return
    from circuits.structured import Recording, structured_forward

    layers = range(circuit.n_layers)
    known = {hook(layer) for layer in layers for hook in (hook_names.resid_pre, hook_names.pattern,
                                                           hook_names.resid_mid, hook_names.resid_post)}
    if wanted - known:
        raise ValueError(f"the structured path cannot hand over {sorted(wanted - known)}")

    def on_record(layer: int, record) -> None:
        for name, value in ((hook_names.resid_pre(layer), lambda: record.resid_pre),
                            (hook_names.pattern(layer), lambda: _dense_pattern(record.attention)),
                            (hook_names.resid_mid(layer), lambda: record.resid_mid),
                            (hook_names.resid_post(layer), lambda: record.resid_post)):
            if name in wanted:
                take(name, value())

    # pre=True: no block updates a residual already handed over in place.
    recording = Recording(on_record, pre=True, mid=any(hook_names.resid_mid(layer) in wanted for layer in layers))
    structured_forward(circuit.runnable, resid, circuit.score_hooks, recording)


def _dense_pattern(groups) -> Float[torch.Tensor, "batch 1 pos pos"]:
    """The ``hook_pattern`` of a one-head block from its grouped attention (one per problem): every query x key."""
    return torch.stack([g.rows(slice(None))[1] for g in groups])[:, None]


class _LayerDecoder:
    """Decodes each block's output once (a block's input is the previous block's output) into LayerCaptures."""

    def __init__(self, circuit: KMeansCircuit, encoded: EncodedBatch, resid_in, keep: Keep = EVERYTHING):
        self.circuit, self.encoded = circuit, encoded
        self.spec = circuit.spec
        self.keep = keep
        # One decoder for the whole run: what a block left unchanged is copied from the last decoding, not recomputed.
        # A one-hot Y kept as its labels is held so as it is decoded where the stream says it is one-hot; any other
        # (soft responsibilities read out first) is compacted below where it turns out to be one-hot.
        self.decode = StreamDecoder(circuit.layout, encoded.sequence, encoded.scaling, one_hot=keep.labels_only)
        self._compact: tuple[np.ndarray, OneHotStack] | None = None  # the last Y held as its labels, and that Y
        self.pre = self.read(resid_in)
        self.layers: list[LayerCapture] = []

    def read(self, resid) -> DecodedState:
        state = self.spec.readout(self.decode(resid))
        return (self._compacted(state) if self.keep.labels_only and not isinstance(state.assignments, OneHotStack)
                else state)

    def _compacted(self, state: DecodedState) -> DecodedState:
        """``state`` with ``Y`` held as its labels (:class:`~circuits.onehot.OneHotStack`) where it is exactly
        their one-hot rows (checked bit for bit): a lean capture's ``n x k`` per layer. A new record, as the stream
        decoder compares the next decoding with the state it returned."""
        Y = state.assignments
        if self._compact is not None and self._compact[0] is Y:  # a block that left Y as it was
            return replace(state, assignments=self._compact[1])
        k = Y.shape[-1]
        if not all(np.array_equal(one_hot(state.labels[b], k), Y[b]) for b in range(Y.shape[0])):
            return state
        self._compact = (Y, OneHotStack(state.labels, k))
        return replace(state, assignments=self._compact[1])

    def add(self, layer: int, resid_post, att: AssignAttention | UpdateAttention | None, groups=None) -> None:
        """Decode ``resid_post`` and record the layer; an update head's certificate is computed here (it reads the
        labels before the block), from its grouped attention (``groups``, the structured path) where given."""
        post = self.read(resid_post)
        if isinstance(att, UpdateAttention):
            if self.spec.swapped_update_normalisation:
                # Not a softmax over members: the membership certificate does not apply (NaN = not applicable);
                # the verifier checks this head's pattern against the reference's weights instead.
                att.margin, att.leak_bound, att.leak_observed, att.member_spread = (
                    np.full(att.scores.shape[:2], np.nan) for _ in range(4))
            elif groups is not None:
                update_certificate_grouped(att, groups, self.pre.labels, self.encoded)
            else:
                update_certificate(att, self.pre.labels, self.encoded)
            if not self.keep.update_columns:
                att.scores = att.pattern = None
        self.layers.append(LayerCapture(layer, self.circuit.schedule[layer], self.pre, post, att))
        self.pre = post


def _capture_structured(circuit: KMeansCircuit, encoded: EncodedBatch, keep_cache: bool,
                        on_layer: Callable[[int], None] | None, keep: Keep = EVERYTHING,
                        forward_threads: int = 1) -> Capture:
    from circuits.structured import OwnedStreams, Recording, structured_forward

    # The plain modules (no TransformerLens) unless the HookedTransformer exists (KMeansCircuit.runnable).
    model = circuit.runnable
    with_sink = bool(getattr(model.cfg, "use_attention_sinks", False))
    resid = encoded.resid
    sampled = SampledRows.of(encoded, keep.sample) if keep.sample and not keep.everything else None
    if resid is None:
        # An encoding that holds no stream (a run at scale): made here, feature-major, and handed to the forward,
        # which runs on it in place: the stream is held once.
        made = encoded.stream(feature_major=True)
        if sampled is not None:
            sampled.keep_resid(hook_names.resid_pre(0), made)
        decoder = _LayerDecoder(circuit, encoded, made, keep)
        streams = [r.T for r in made]
        del made
        resid = OwnedStreams([s if s.is_contiguous() else s.contiguous() for s in streams])
        del streams
    else:
        if sampled is not None:
            sampled.keep_resid(hook_names.resid_pre(0), resid)
        decoder = _LayerDecoder(circuit, encoded, resid, keep)
    entries: dict[str, torch.Tensor] = {}

    def take(layer: int, record) -> None:
        # Summarise and decode as each block finishes, so that no residual stream outlives its layer.
        kind = circuit.schedule[layer]
        if kind == ASSIGN and not keep.assign_columns and not with_sink:
            att = assign_certificate_grouped(record.attention, encoded)  # margin and leak bound only
        elif kind == ASSIGN:
            att = summarise_assign_grouped(record.attention, encoded, with_sink, columns=keep.assign_columns)
            if not keep.assign_readouts:
                att.chosen = att.leak_observed = None
        elif kind == UPDATE and not keep.update_columns and not circuit.spec.swapped_update_normalisation:
            att = UpdateAttention(scores=None, pattern=None)  # the certificate (computed as it is added) alone
        elif kind == UPDATE:
            att = update_rows_grouped(record.attention, encoded)
        else:
            att = None
        decoder.add(layer, record.resid_post, att, record.attention if kind == UPDATE else None)
        if sampled is not None:
            sampled.keep_resid(hook_names.resid_post(layer), record.resid_post)
            if kind == ASSIGN:
                sampled.keep_assign(layer, record.attention, encoded, with_sink, att)
            elif kind == UPDATE:
                sampled.keep_update(layer, record.attention, encoded)
        if keep_cache:
            entries[hook_names.resid_pre(layer)] = record.resid_pre
            entries[hook_names.resid_post(layer)] = record.resid_post
        if on_layer is not None:
            on_layer(layer)

    # Patterns are made only where some part kept reads them (an assign head's certificate reads its scores alone).
    patterns = keep.assign_columns or keep.update_columns or with_sink or circuit.spec.swapped_update_normalisation
    logits, _ = structured_forward(model, resid, circuit.score_hooks,
                                   Recording(take, pre=keep_cache, patterns=patterns), threads=forward_threads)
    cache = None
    if keep_cache:
        from circuits.tl import ActivationCache

        cache = ActivationCache(entries, circuit.model)
    point_logits = to_numpy(logits[:, encoded.sequence.points])
    return Capture(circuit, encoded, decoder.layers, point_logits, cache, path=ExecutionPath.STRUCTURED, kept=keep,
                   sampled=sampled)


def _capture_dense(circuit: KMeansCircuit, encoded: EncodedBatch, keep_cache: bool,
                   on_layer: Callable[[int], None] | None) -> Capture:
    model = circuit.model
    with_sink = bool(getattr(model.cfg, "use_attention_sinks", False))
    wanted = {hook_names.resid_pre(layer) for layer in range(circuit.n_layers)}
    wanted |= {hook_names.resid_post(layer) for layer in range(circuit.n_layers)}
    summaries: dict[int, AssignAttention | UpdateAttention] = {}
    scores_seen: dict[int, torch.Tensor] = {}

    def keep_scores(layer: int):
        def hook(scores, hook):
            scores_seen[layer] = scores
        return hook

    def summarise(layer: int, kind: str):
        def hook(pattern, hook):
            summary = summarise_head(kind, scores_seen.pop(layer), pattern, encoded, with_sink)
            if summary is not None:
                summaries[layer] = summary
        return hook

    def report_done(layer: int):
        def hook(resid, hook):
            on_layer(layer)
        return hook

    fwd_hooks = []
    for layer, kind in enumerate(circuit.schedule):
        fwd_hooks.append((hook_names.attn_scores(layer), keep_scores(layer)))
        fwd_hooks.append((hook_names.pattern(layer), summarise(layer, kind)))
        if on_layer is not None:
            fwd_hooks.append((hook_names.resid_post(layer), report_done(layer)))
    with torch.no_grad(), model.hooks(fwd_hooks=fwd_hooks):
        logits, cache = model.run_with_cache(
            encoded.stream(), start_at_layer=0, names_filter=hook_names.names_filter(wanted)
        )
    return decoded_capture(circuit, encoded, cache, summaries, logits, cache if keep_cache else None)


def decoded_capture(circuit: KMeansCircuit, encoded: EncodedBatch, resid, summaries: dict, logits, cache) -> Capture:
    """The :class:`Capture` of a dense run: ``resid`` maps hook names to residual streams, ``summaries`` layers to
    :func:`summarise_head`'s records."""
    decoder = _LayerDecoder(circuit, encoded, resid[hook_names.resid_pre(0)])
    for layer in range(circuit.n_layers):
        decoder.add(layer, resid[hook_names.resid_post(layer)], summaries.get(layer))
    point_logits = to_numpy(logits[:, encoded.sequence.points])
    return Capture(circuit, encoded, decoder.layers, point_logits, cache, path=ExecutionPath.DENSE)
