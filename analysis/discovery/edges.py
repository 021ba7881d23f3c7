"""Edge patching on the circuit with TransformerLens hooks: the forward pass every discovery method runs.

An *edge* ``u -> v.port`` (:mod:`analysis.discovery.graph`) is removed by giving ``v``'s port an *ablated* output
of ``u`` (:mod:`analysis.discovery.ablation`: the corrupted run's, 0, or the mean over the pairs' clean runs) in
place of its output in the current run, while every other source keeps its current value. The residual stream is
a sum and the circuit has no normalisation, so this is a difference added to the port's input: ``v``'s query
becomes ``q + (abl_u - cur_u) @ W_Q``, its MLP's gate and linear pre-activations ``pre + (abl_u - cur_u) @ W_gate``
and ``pre_linear + (abl_u - cur_u) @ W_in``, the readout ``resid + (abl_u - cur_u)``. Hooks (every name from the
project's hook-name module; ``run_with_hooks`` only) record each source's output as the run produces it and add
the differences at the ports.

A removal is a number per edge, ``removed[r, e]`` (1 removed, 0 kept), so many subgraphs run as one batch (ACDC
runs all its thresholds together) and the same forward is differentiable in a *probe*: a zero added to every
port input, whose gradient is the metric's gradient with respect to that input, which is what edge attribution
patching needs.

The readout is the points' ``Y`` (their assignment: the circuit's logits) and the centroid tokens' ``C`` (the
final centroids), unit-scaled; the metric (:meth:`EdgePatcher.metric`) is one of
:data:`~analysis.discovery.ablation.METRICS`, against the clean readout and the readout with every edge removed.
TransformerLens's split-input hooks (``use_split_qkv_input``) would do the per-port addition for us, but they
copy the residual per head, are unavailable on TransformerLens 4's hooked circuit, and cannot weight an edge per
batch row; the ground truth's witnesses use them, as an independent check (:mod:`analysis.discovery.witness`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from analysis.discovery.ablation import ABLATIONS, DEFAULT_ABLATION, METRICS
from analysis.discovery.graph import INPUT, MLP_PORT, OUT_PORT, OUTPUT, CircuitGraph, head_node, mlp_node
from circuits.devices import torch_threads
from circuits import hook_names
from circuits.layout import ResidualLayout, SequenceLayout

#: A change within this of the threshold counts as at it. The patched forward pass is exact up to float64
#: rounding, and that rounding depends on where a subgraph sits in its batch: on the swap circuits the same input
#: gives a metric differing by ~1e-15 on odd and even batch rows (the update head's fractional attention weights,
#: summed with another vector alignment). Without the margin, "changes nothing" at threshold 0 (and "moves it by
#: exactly 1" at threshold 1) would be decided by that rounding, not by the circuit.
ROUNDING = 1e-12
_QKV = {"q": hook_names.q, "k": hook_names.k, "v": hook_names.v}
_QKV_WEIGHT = {"q": "W_Q", "k": "W_K", "v": "W_V"}


class CorruptionInvisible(ValueError):
    """The clean and corrupted runs have the same readout: the metric is 0/0, no edge can be scored. ``visible``:
    per pair, whether removing every edge changes its readout."""

    def __init__(self, message: str, visible: np.ndarray | None = None):
        super().__init__(message)
        self.visible = visible


class EdgePatcher:
    """A model, its graph, and a batch of clean/corrupted residual inputs (``B`` pairs of one sequence layout).

    :meth:`run` returns the metric of each subgraph (``removed``: ``(R, E)``) on each pair: ``(R, B)``.
    """

    def __init__(self, model, graph: CircuitGraph, layout: ResidualLayout, sequence: SequenceLayout,
                 clean: torch.Tensor, corrupted: torch.Tensor, threads: int | None = 1,
                 reads: Sequence[tuple[object, str]] | None = None, ablation: str = DEFAULT_ABLATION,
                 metric: str = "l2", reference: torch.Tensor | None = None):
        if clean.shape != corrupted.shape or clean.ndim != 3:
            raise ValueError(f"clean and corrupted inputs must be one (batch, pos, d_model) shape, got"
                             f" {tuple(clean.shape)} and {tuple(corrupted.shape)}")
        if ablation not in ABLATIONS or metric not in METRICS:
            raise ValueError(f"unknown ablation {ablation!r} or metric {metric!r}: choose from {', '.join(ABLATIONS)}"
                             f" and {', '.join(METRICS)}")
        self.model, self.graph, self.layout, self.sequence = model, graph, layout, sequence
        # What the metric reads: (positions, subspace); the Lloyd circuit's points' labels and final centroids.
        self.reads = list(reads) if reads is not None else [(sequence.points, "Y"), (sequence.centroids, "C")]
        self.threads = threads
        self.ablation, self.metric_name = ablation, metric
        #: Which edges these pairs exercise, filled by :func:`analysis.discovery.acdc.exercised_edges`.
        self.exercised: np.ndarray | None = None
        self.clean, self.corrupted = clean, corrupted
        self.dtype = clean.dtype
        self.E = len(graph.edges)
        self._by_port: dict[tuple[str, str], list[tuple[int, str]]] = {}
        for i, e in enumerate(graph.edges):
            self._by_port.setdefault((e.dst, e.port), []).append((i, e.src))
        state = model.state_dict()
        self._weights: dict[tuple[int, str], torch.Tensor] = {}
        for layer in range(graph.n_layers):
            for port, name in _QKV_WEIGHT.items():
                self._weights[(layer, port)] = state[hook_names.param(layer, "attn", name)].to(self.dtype)
            for name in ("W_gate", "W_in"):
                self._weights[(layer, name)] = state[hook_names.param(layer, "mlp", name)].to(self.dtype)
        with torch.no_grad(), torch_threads(threads):
            self.clean_outputs = self._outputs(clean)
            corrupted_outputs = self._outputs(corrupted)
            ref = None if reference is None or ablation != "mean" else self._outputs(reference)
        #: Each source's output that removing one of its edges puts at the port (:data:`ABLATIONS`), ``(B, P, D)``.
        self.ablated_outputs = ABLATIONS[ablation](self.clean_outputs, corrupted_outputs, ref)
        self.r_clean = self.readout(self._final(clean))
        # Patching compares runs at different places of a batch: a model whose forward depends on the place (noise
        # drawn per problem, as the Gumbel variant's) gives each row other numbers, and nothing can be compared.
        # Rounding may differ by row (the swap circuits' fractional attention sums, ~1e-15): ACDC's margin allows it.
        twice = self.readout(self._final(clean[:1].repeat(2, 1, 1)))
        if float((twice - self.r_clean[:1]).abs().max()) > ROUNDING:
            raise ValueError("the circuit's forward depends on a run's place in the batch (noise drawn per problem):"
                             " patched runs cannot be compared with the clean one")
        first = self.readout(self._final(clean), entries=self.reads[:1])
        self._labels = (int(first.shape[1] // layout.width(self.reads[0][1])), layout.width(self.reads[0][1]))
        if ablation == "resample":
            self.r_ablated = self.readout(self._final(corrupted))
        else:
            with torch.no_grad():
                self.r_ablated = self.run(torch.ones(1, self.E, dtype=self.dtype), readouts=True)[0]
        visible = (((self.r_clean - self.r_ablated) ** 2).sum(-1) > 0).numpy()
        if not visible.all():
            raise CorruptionInvisible(f"removing every edge ({ablation} ablation) leaves the readout (labels and"
                                      f" centroids) of {int((~visible).sum())} of {len(visible)} pairs unchanged:"
                                      " nothing to discover there", visible)

    @property
    def r_corrupted(self) -> torch.Tensor:
        """The readout with every edge removed (for ``resample``: the corrupted run's)."""
        return self.r_ablated

    # ------------------------------------------------------------------------------------------ plain runs
    def _source_hooks(self) -> dict[str, str]:
        names = {INPUT: hook_names.resid_pre(0)}
        for layer in range(self.graph.n_layers):
            names[head_node(layer)] = hook_names.attn_out(layer)
            names[mlp_node(layer)] = hook_names.mlp_out(layer)
        return names

    def _outputs(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        names = self._source_hooks()
        _, cache = self.model.run_with_cache(x, names_filter=hook_names.names_filter(list(names.values())))
        return {node: cache[name].to(self.dtype) for node, name in names.items()}

    def _final(self, x: torch.Tensor) -> torch.Tensor:
        last = hook_names.resid_post(self.graph.n_layers - 1)
        with torch.no_grad(), torch_threads(self.threads):
            _, cache = self.model.run_with_cache(x, names_filter=hook_names.names_filter([last]))
        return cache[last].to(self.dtype)

    def readout(self, resid: torch.Tensor, entries=None) -> torch.Tensor:
        """``(batch, m)``: the subspaces of :attr:`reads` at their positions (by default the points' ``Y`` and the
        centroid tokens' ``C``), flattened."""
        entries = self.reads if entries is None else entries
        return torch.cat([resid[:, pos, self.layout[name]].reshape(resid.shape[0], -1) for pos, name in entries],
                         dim=1)

    def metric(self, readout: torch.Tensor) -> torch.Tensor:
        """``(R*B, m)`` readouts -> ``(R, B)`` metric (:data:`~analysis.discovery.ablation.METRICS`)."""
        B = self.clean.shape[0]
        r = readout.view(-1, B, readout.shape[-1])
        return METRICS[self.metric_name](r, self.r_clean, self.r_ablated, self._labels)

    # --------------------------------------------------------------------------------------- patched runs
    def run(self, removed: torch.Tensor, x: torch.Tensor | None = None, probe: bool = False, readouts: bool = False):
        """Metric ``(R, B)`` of the subgraphs ``removed`` (``(R, E)``, 1 = removed) on inputs ``x`` (``(B, ..)``,
        default the clean inputs). With ``probe``, also the gradient of the summed metric with respect to every
        port's input, ``{(node, port): (R, B, pos, d_model)}`` (the run is then differentiable). With
        ``readouts``, the readouts ``(R, B, m)`` instead of the metric."""
        x = self.clean if x is None else x
        removed = torch.as_tensor(removed, dtype=self.dtype)
        R, B = removed.shape[0], x.shape[0]
        batch_x = x.repeat(R, 1, 1)
        current: dict[str, torch.Tensor] = {}
        deltas: dict[tuple[str, str], torch.Tensor | None] = {}
        probes: dict[tuple[str, str], torch.Tensor] = {}
        # Only the edges removed in some row add anything; their weights per row, found once per run (one pass
        # over the (R, E) mask instead of one test per edge and port).
        active = torch.nonzero(removed.ne(0).any(dim=0)).flatten().tolist()
        column = {i: j for j, i in enumerate(active)}
        weight_of_edge = removed[:, active].repeat_interleave(B, dim=0)  # (R*B, active edges)
        differences: dict[str, torch.Tensor] = {}

        def difference(src: str) -> torch.Tensor:
            """corrupted - current output of ``src``, the corrupted (B, ..) broadcast over the R subgraphs."""
            if src not in differences:
                differences[src] = (self.ablated_outputs[src]
                                    - current[src].reshape(R, B, *batch_x.shape[1:])).reshape(batch_x.shape)
            return differences[src]

        def delta(node: str, port: str) -> torch.Tensor | None:
            """The patched difference at a port, or None where no row removes any of its edges (and no probe)."""
            key = (node, port)
            if key not in deltas:
                d = None
                for i, src in self._by_port.get(key, []):
                    if i in column:
                        w = weight_of_edge[:, column[i], None, None]
                        # In place after the first term: one (R*B, pos, d_model) buffer a port, not one a term.
                        d = w * difference(src) if d is None else d.addcmul_(w, difference(src))
                if probe:
                    probes[key] = torch.zeros_like(batch_x, requires_grad=True)
                    d = probes[key] if d is None else d + probes[key]
                deltas[key] = d
            return deltas[key]

        def record(node):
            def hook(act, hook):
                current[node] = act
            return hook

        def qkv(layer, port):
            def hook(act, hook):
                d = delta(head_node(layer), port)
                return act if d is None else act + torch.einsum("bpd,hde->bphe", d, self._weights[(layer, port)])
            return hook

        def mlp(layer, name):
            def hook(act, hook):
                d = delta(mlp_node(layer), MLP_PORT)
                return act if d is None else act + d @ self._weights[(layer, name)]
            return hook

        final: list[torch.Tensor] = []

        def out(act, hook):
            d = delta(OUTPUT, OUT_PORT)
            patched = act if d is None else act + d
            final.append(patched)
            return patched

        hooks = [(name, record(node)) for node, name in self._source_hooks().items()]
        for layer in range(self.graph.n_layers):
            hooks += [(_QKV[port](layer), qkv(layer, port)) for port in _QKV]
            hooks += [(hook_names.mlp_pre(layer), mlp(layer, "W_gate")),
                      (hook_names.mlp_pre_linear(layer), mlp(layer, "W_in"))]
        hooks.append((hook_names.resid_post(self.graph.n_layers - 1), out))
        with torch.set_grad_enabled(probe), torch_threads(self.threads):
            self.model.run_with_hooks(batch_x, fwd_hooks=hooks)
            if readouts:
                return self.readout(final[0]).view(R, B, -1)
            M = self.metric(self.readout(final[0]))
            if not probe:
                return M
            keys = list(probes)
            grads = torch.autograd.grad(M.sum(), [probes[k] for k in keys], allow_unused=True)
        shape = (R, B, *batch_x.shape[1:])
        return M.detach(), {k: (torch.zeros(shape, dtype=self.dtype) if g is None else g.view(shape))
                            for k, g in zip(keys, grads)}

    def source_difference(self, src: str) -> torch.Tensor:
        """``ablated_u - clean_u``: what removing an edge from ``src`` changes at its destination, ``(B, pos, d)``."""
        return self.ablated_outputs[src] - self.clean_outputs[src]

    def single_edge_effects(self, edges: Sequence[int] | None = None, chunk: int = 64) -> np.ndarray:
        """``(E, B)``: the metric change when one edge alone is removed from the full (clean) graph."""
        edges = range(self.E) if edges is None else edges
        edges = list(edges)
        out = np.zeros((len(edges), self.clean.shape[0]))
        base = self.run(torch.zeros(1, self.E, dtype=self.dtype))
        for start in range(0, len(edges), chunk):
            part = edges[start:start + chunk]
            removed = torch.zeros(len(part), self.E, dtype=self.dtype)
            removed[torch.arange(len(part)), torch.tensor(part)] = 1
            out[start:start + len(part)] = (self.run(removed) - base).numpy()
        return out

    def readout_changes(self, edges: Sequence[int], chunk: int = 64) -> np.ndarray:
        """``(len(edges), B)``: the largest change of any readout entry when one edge alone is removed."""
        edges = list(edges)
        out = np.zeros((len(edges), self.clean.shape[0]))
        for start in range(0, len(edges), chunk):
            part = edges[start:start + chunk]
            removed = torch.zeros(len(part), self.E, dtype=self.dtype)
            removed[torch.arange(len(part)), torch.tensor(part)] = 1
            with torch.no_grad():
                r = self.run(removed, readouts=True)
            out[start:start + len(part)] = (r - self.r_clean).abs().amax(dim=-1).numpy()
        return out
