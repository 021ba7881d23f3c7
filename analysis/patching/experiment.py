"""Patch clean activations into the corrupted run of a pair, on residual-stream input.

TransformerLens' ``transformer_lens.patching`` builds its runs from tokens; the k-means circuit is fed residual
vectors (``start_at_layer=0``), so this module reuses its idea — cache the clean run, re-run the corrupted one
with a forward hook that overwrites part of one activation with the clean value, measure — on TransformerLens'
own machinery (``run_with_cache``, :class:`~transformer_lens.ActivationCache`, ``model.hooks(fwd_hooks=...)``).

What is patched is a :class:`PatchSite`: one block component (``resid_pre``/``resid_mid``/``resid_post``, the
head output ``attn_out`` or ``z``, the MLP output ``mlp_out``) at one layer, restricted to token positions taken
from the :class:`~circuits.layout.SequenceLayout` and, for residual-width activations, to named subspaces of the
:class:`~circuits.layout.ResidualLayout` ("only ``C`` and ``N`` of the centroid tokens"). A :class:`Patch` is a
set of sites applied together in one run.

Two things keep sweeps cheap without changing any result:

* Many patches run as one batch: the corrupted input is repeated along the batch axis and each hook overwrites,
  through a boolean mask, only the entries of the batch elements that patch there.
* A run starts at the earliest patched layer (``start_at_layer``) from the cached corrupted ``resid_pre`` of that
  layer — the corrupted run up to there is the same whatever is patched later — and stops after the read layer
  (``stop_at_layer``).
"""

from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Iterable, Sequence

import numpy as np
import torch
from jaxtyping import Float

from analysis.patching.metrics import (Outcome, PatchMetrics, centroid_distance, compare, mismatch_up_to_renaming,
                                       outcome_of)
from analysis.patching.pairs import PatchingPair
from circuits import hook_names
from circuits.build import KMeansCircuit
from circuits.devices import torch_threads
from circuits.encoding import DecodedState, EncodedBatch, UnitScaling, decode, encode
from circuits.layout import TOKEN_TYPES, SequenceLayout

#: Components whose activation is ``(batch, pos, d_model)``: they can be restricted to named subspaces.
RESIDUAL_WIDTH = ("resid_pre", "resid_mid", "resid_post", "attn_out", "mlp_out")
#: Components whose activation is ``(batch, pos, head, d_head)``: they can be restricted to heads.
PER_HEAD = ("z", "result")

#: Largest ``batch * pos^2`` of one batched run (attention scores and pattern are that big, per layer).
DEFAULT_CHUNK_ELEMENTS = 2**23


@dataclass(frozen=True)
class PatchSite:
    """Part of one activation to take from the clean run.

    ``positions`` are token positions; ``dims`` residual dimensions (``None``: all of them), only for
    :data:`RESIDUAL_WIDTH` components; ``heads`` head indices (``None``: all), only for :data:`PER_HEAD` ones.
    Build sites with :meth:`PatchingExperiment.site`, which takes positions and subspaces by name.
    """

    component: str
    layer: int
    positions: tuple[int, ...]
    dims: tuple[int, ...] | None = None
    heads: tuple[int, ...] | None = None
    label: str = ""

    @property
    def hook(self) -> str:
        return hook_names.component(self.component, self.layer)


@dataclass(frozen=True)
class Patch:
    """Sites patched together in one run; no sites is the unpatched corrupted run."""

    sites: tuple[PatchSite, ...]
    label: str = ""

    @classmethod
    def of(cls, *sites: PatchSite, label: str | None = None) -> "Patch":
        return cls(tuple(sites), label if label is not None else " + ".join(s.label for s in sites))

    @property
    def first_layer(self) -> int | None:
        return min((s.layer for s in self.sites), default=None)


def positions_of(sequence: SequenceLayout, spec) -> tuple[int, ...]:
    """Token positions named by ``spec``.

    ``spec`` is ``"all"``, a token type (``"bos"``, ``"point"``/``"points"``, ``"centroid"``/``"centroids"``), a
    token label of :attr:`SequenceLayout.token_labels` (``"BOS"``, ``"x3"``, ``"c0"``), a position, or a list of
    these; positions come out sorted and without repeats.
    """
    if isinstance(spec, (str, int, np.integer)):
        spec = [spec]
    labels = sequence.token_labels
    out: set[int] = set()
    for item in spec:
        if isinstance(item, (int, np.integer)):
            if not 0 <= item < sequence.n_tokens:
                raise ValueError(f"position {item} outside a sequence of {sequence.n_tokens} tokens")
            out.add(int(item))
        elif item == "all":
            out.update(range(sequence.n_tokens))
        elif item.rstrip("s") in TOKEN_TYPES:
            out.update(range(sequence.n_tokens)[sequence.positions(item.rstrip("s"))])
        elif item in labels:
            out.add(labels.index(item))
        else:
            raise ValueError(f"unknown positions {item!r}: use 'all', a token type {TOKEN_TYPES}, a token label"
                             " such as 'x0' or 'c1', or a position")
    return tuple(sorted(out))


def shared_scaling(pair: PatchingPair) -> UnitScaling:
    offset, scale = pair.shared_scale()
    return UnitScaling(offset[None, :], np.array([scale]))


def encode_pair(circuit: KMeansCircuit, pair: PatchingPair) -> tuple[EncodedBatch, EncodedBatch]:
    """Residual inputs of the clean and the corrupted run, with one sequence layout and one unit scaling.

    In the clean run the placeholder slot (if any) becomes a copy of the BOS sink's residual vector; its ``X``
    row in the returned batch is the centre of the scaling, a dummy that no head reads.
    """
    layout, scaling = circuit.layout, shared_scaling(pair)
    X_clean = pair.clean_slots()
    if pair.placeholder is not None:
        X_clean[pair.placeholder] = scaling.offset[0]
    clean = encode(layout, X_clean, pair.C0_clean, dtype=circuit.dtype, scaling=scaling, device=circuit.device)
    corrupted = encode(layout, pair.X_corrupted, pair.C0_corrupted, dtype=circuit.dtype, scaling=scaling,
                       device=circuit.device)
    if pair.placeholder is not None:
        seq = clean.sequence
        clean.resid[:, seq.point(pair.placeholder)] = clean.resid[:, seq.bos]
    return clean, corrupted


class PatchingExperiment:
    """A circuit, a clean/corrupted pair, both runs cached, and patched runs of the corrupted one.

    ``run(patches)`` returns the residual stream after ``read_layer`` of one patched run per patch;
    ``measure(patches)`` decodes it and compares it with both unpatched runs (:mod:`analysis.patching.metrics`).
    ``read_layer`` defaults to the last block, whose output holds the final labels and centroids. ``threads``:
    torch intra-op threads for the runs (see :func:`torch_threads`).
    """

    def __init__(self, circuit: KMeansCircuit, pair: PatchingPair, chunk_elements: int = DEFAULT_CHUNK_ELEMENTS,
                 threads: int | None = 1):
        if (pair.d, pair.k) != (circuit.layout.d, circuit.layout.k):
            raise ValueError(f"circuit is for d={circuit.layout.d}, k={circuit.layout.k};"
                             f" the pair has d={pair.d}, k={pair.k}")
        self.circuit = circuit
        self.pair = pair
        self.layout = circuit.layout
        self.chunk_elements = chunk_elements
        self.threads = threads
        self.clean_input, self.corrupted_input = encode_pair(circuit, pair)
        self.sequence = self.clean_input.sequence
        self.scaling = self.clean_input.scaling
        self.X_compared = pair.X_clean
        self._caches: dict[str, dict[str, torch.Tensor]] = {"clean": {}, "corrupted": {}}
        every_resid = [hook_names.resid_pre(L) for L in range(self.n_layers)]
        every_resid += [hook_names.resid_post(L) for L in range(self.n_layers)]
        self.cache("clean", every_resid)
        self.cache("corrupted", every_resid)

    # ----------------------------------------------------------------------------------------------- runs
    @property
    def model(self):
        return self.circuit.model

    @property
    def n_layers(self) -> int:
        return self.circuit.n_layers

    @property
    def final_layer(self) -> int:
        return self.n_layers - 1

    def cache(self, run: str, names: Iterable[str] = ()):
        """The :class:`~transformer_lens.ActivationCache` of the ``"clean"`` or ``"corrupted"`` run holding ``names``.

        Activations are cached on demand (``run_with_cache`` with a ``names_filter``) and kept.
        """
        from circuits.tl import ActivationCache

        store = self._caches[run]
        missing = sorted(set(names) - set(store))
        if missing:
            resid = (self.clean_input if run == "clean" else self.corrupted_input).resid
            with torch.no_grad(), torch_threads(self.threads):
                _, cache = self.model.run_with_cache(resid, start_at_layer=0,
                                                     names_filter=hook_names.names_filter(missing))
            unknown = set(missing) - set(cache.keys())
            if unknown:
                raise ValueError(f"the model never produced {sorted(unknown)}"
                                 " (hook_result needs cfg.use_attn_result)")
            store.update({name: cache[name] for name in missing})
        return ActivationCache(store, self.model)

    def check_read_layer(self, read_layer: int | None) -> int:
        read = self.final_layer if read_layer is None else int(read_layer)
        if not 0 <= read < self.n_layers:
            raise ValueError(f"read layer {read} outside the circuit's {self.n_layers} layers")
        return read

    def state(self, run: str, layer: int | None = None) -> DecodedState:
        """Decoded residual stream after block ``layer`` (default: the last) of the clean or corrupted run."""
        name = hook_names.resid_post(self.check_read_layer(layer))
        return decode(self.layout, self.cache(run, [name])[name], self.sequence, self.scaling)

    def outcome(self, run: str, read_layer: int | None = None) -> Outcome:
        return outcome_of(self.state(run, read_layer), self.pair.compared_points, self.X_compared)

    def site(self, component: str, layer: int, positions="all", subspaces: Sequence[str] | str | None = None,
             heads: Sequence[int] | None = None) -> PatchSite:
        """A site by names: ``site("resid_pre", 3, "centroids", ["C", "N"])``."""
        if component not in RESIDUAL_WIDTH + PER_HEAD:
            raise ValueError(f"unknown component {component!r}; expected one of {RESIDUAL_WIDTH + PER_HEAD}")
        if not 0 <= layer < self.n_layers:
            raise ValueError(f"layer {layer} outside the circuit's {self.n_layers} layers")
        if isinstance(subspaces, str):
            subspaces = [subspaces]
        if subspaces is not None and component not in RESIDUAL_WIDTH:
            raise ValueError(f"{component} is per head, not residual-width: it has no named subspaces")
        if heads is not None and component not in PER_HEAD:
            raise ValueError(f"{component} is residual-width: restrict it by subspace, not by head")
        n_heads = self.model.cfg.n_heads
        if heads is not None and not all(0 <= h < n_heads for h in heads):
            raise ValueError(f"heads {list(heads)} outside the model's {n_heads} head(s)")
        pos = positions_of(self.sequence, positions)
        dims = None if subspaces is None else tuple(int(i) for i in np.flatnonzero(self.layout.mask(subspaces)))
        label = f"{component}@{layer} {positions if isinstance(positions, str) else list(pos)}"
        if subspaces is not None:
            label += " [" + "+".join(subspaces) + "]"
        if heads is not None:
            label += f" heads {list(heads)}"
        return PatchSite(component, layer, pos, dims, None if heads is None else tuple(heads), label)

    def run(self, patches: Sequence[Patch], read_layer: int | None = None) -> Float[torch.Tensor, "batch pos d_model"]:
        """Residual stream after ``read_layer`` of the corrupted run with each patch applied (one batch row each)."""
        read = self.check_read_layer(read_layer)
        hooks = {s.hook for p in patches for s in p.sites if s.layer <= read}
        # One run of each for every hook needed, rather than one per hook as the sites are checked.
        self.cache("clean", hooks)
        self.cache("corrupted", hooks)
        patches = [self.effective(p, read) for p in patches]
        # One batch (or more, if large) per first layer, so that every run starts as late as it can.
        groups: dict[int | None, list[int]] = {}
        for b, p in enumerate(patches):
            groups.setdefault(p.first_layer, []).append(b)
        size = max(1, self.chunk_elements // self.sequence.n_tokens**2)
        out: list[torch.Tensor | None] = [None] * len(patches)
        for rows_all in groups.values():
            for start in range(0, len(rows_all), size):
                rows = rows_all[start : start + size]
                resid = self._run_batch([patches[b] for b in rows], read)
                for i, b in enumerate(rows):
                    out[b] = resid[i]
        if not patches:
            return torch.empty(0, self.sequence.n_tokens, self.layout.d_model, dtype=self.circuit.dtype,
                               device=self.circuit.device)
        return torch.stack(out)

    def effective(self, patch: Patch, read_layer: int | None = None) -> Patch:
        """``patch`` without the sites that cannot change the run: after the read layer, or where the clean and
        corrupted activations already agree bit for bit (overwriting a value by itself is the identity).

        Dropping them changes no result and lets the batch start later, or not run at all.
        """
        read = self.check_read_layer(read_layer)
        kept = []
        for s in patch.sites:
            if s.layer > read:
                continue
            clean, corrupted = self.cache("clean", [s.hook])[s.hook], self.cache("corrupted", [s.hook])[s.hook]
            index = self._index(s, clean.shape[2])
            if not torch.equal(clean[0][index], corrupted[0][index]):
                kept.append(s)
        return Patch(tuple(kept), patch.label)

    @staticmethod
    def _index(s: PatchSite, inner_size: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Index of the site inside one batch row: (positions, dims or heads), every trailing axis whole."""
        inner = s.dims if s.component in RESIDUAL_WIDTH else s.heads
        rows = torch.tensor(s.positions, dtype=torch.long)
        cols = torch.arange(inner_size) if inner is None else torch.tensor(inner, dtype=torch.long)
        return rows[:, None], cols[None, :]

    def _run_batch(self, patches: Sequence[Patch], read: int) -> torch.Tensor:
        B = len(patches)
        sites = [(b, s) for b, p in enumerate(patches) for s in p.sites if s.layer <= read]
        if not sites:
            name = hook_names.resid_post(read)
            return self.cache("corrupted", [name])[name].expand(B, -1, -1)
        start = min(s.layer for _, s in sites)
        clean = self.cache("clean", {s.hook for _, s in sites})
        masks: dict[str, torch.Tensor] = {}
        for b, s in sites:
            if s.hook not in masks:
                masks[s.hook] = torch.zeros((B, *clean[s.hook].shape[1:]), dtype=torch.bool,
                                            device=clean[s.hook].device)
            masks[s.hook][b][self._index(s, masks[s.hook].shape[2])] = True

        def overwrite(mask: torch.Tensor, value: torch.Tensor):
            def hook(activation, hook):
                return torch.where(mask.to(activation.device), value, activation)
            return hook

        fwd_hooks = [(name, overwrite(mask, clean[name])) for name, mask in masks.items()]
        name = hook_names.resid_pre(start)
        x = self.cache("corrupted", [name])[name].expand(B, -1, -1).clone()
        with torch.no_grad(), torch_threads(self.threads), self.model.hooks(fwd_hooks=fwd_hooks):
            return self.model(x, start_at_layer=start, stop_at_layer=read + 1)

    def patched_states(self, patches: Sequence[Patch], read_layer: int | None = None) -> DecodedState:
        return decode(self.layout, self.run(patches, read_layer), self.sequence, self.scaling)

    def measure(self, patches: Sequence[Patch], read_layer: int | None = None) -> PatchMetrics:
        """Metrics of each patched run against the clean and corrupted runs, all read after ``read_layer``."""
        read = self.check_read_layer(read_layer)
        patched = outcome_of(self.patched_states(patches, read), self.pair.compared_points, self.X_compared)
        return compare(patched, self.outcome("clean", read), self.outcome("corrupted", read))

    # ----------------------------------------------------------------------------------------------- labels
    def layer_label(self, layer: int) -> str:
        """``"L3 A1"``: layer 3, the assign block of iteration 1 (``U0`` commits the initial centroids)."""
        kind = self.circuit.schedule[layer]
        if kind == "assign":
            return f"L{layer} A{self.circuit.assignment_layers.index(layer)}"
        if kind == "update":
            return f"L{layer} U{self.circuit.centroid_layers.index(layer)}"
        return f"L{layer} {kind}"

    @property
    def token_labels(self) -> list[str]:
        labels = list(self.sequence.token_labels)
        if self.pair.placeholder is not None:
            labels[self.sequence.point(self.pair.placeholder)] += "*"
        return labels

    def summary(self, read_layer: int | None = None) -> dict:
        """Clean against corrupted at the read layer, JSON-ready."""
        read = self.check_read_layer(read_layer)
        clean, corrupted = self.outcome("clean", read), self.outcome("corrupted", read)
        unpatched = compare(corrupted, clean, corrupted)
        return {
            "pair": self.pair.to_dict(),
            "read_layer": read,
            "read_label": self.layer_label(read),
            "scale": float(self.scaling.scale[0]),
            "clean": {"labels": clean.labels[0].tolist(), "centroids": clean.centroids[0].tolist(),
                      "objective": float(clean.objective[0])},
            "corrupted": {"labels": corrupted.labels[0].tolist(), "centroids": corrupted.centroids[0].tolist(),
                          "objective": float(corrupted.objective[0])},
            "labels_differing": int(unpatched.label_mismatch[0]),
            "labels_differing_up_to_renaming": mismatch_up_to_renaming(clean.labels[0], corrupted.labels[0],
                                                                       self.pair.k),
            "centroid_error": float(unpatched.centroid_error[0]),
            # False when the corruption leaves this readout as it was: every restored fraction is then 0/0.
            "corruption_visible": bool(unpatched.label_mismatch[0] > 0
                                       or centroid_distance(corrupted.unit_centroids, clean.unit_centroids)[0] > 0),
        }
