"""Edge patching on the circuit with TransformerLens hooks: the forward pass every discovery method runs.

An *edge* ``u -> v.port`` (:mod:`analysis.discovery.graph`) is removed by giving ``v``'s port the corrupted
output of ``u`` in place of its output in the current run, while every other source keeps its current value.
The residual stream is a sum and the circuit has no normalisation, so this is a difference added to the port's
input: ``v``'s query becomes ``q + (corr_u - cur_u) @ W_Q``, its MLP's gate and linear pre-activations
``pre + (corr_u - cur_u) @ W_gate`` and ``pre_linear + (corr_u - cur_u) @ W_in``, the readout
``resid + (corr_u - cur_u)``. Hooks (every name from the project's hook-name module; ``run_with_hooks`` only) record
each source's output as the run produces it and add the differences at the ports.

A removal is a number per edge, ``removed[r, e]`` (1 removed, 0 kept), so many subgraphs run as one batch (ACDC
runs all its thresholds together) and the same forward is differentiable in a *probe*: a zero added to every
port input, whose gradient is the metric's gradient with respect to that input, which is what edge attribution
patching needs.

The metric (:meth:`EdgePatcher.metric`) is the readout's position between the corrupted and the clean run:
``M = <r - r_corr, r_clean - r_corr> / |r_clean - r_corr|^2`` where ``r`` is the run's readout, the points' ``Y``
(their assignment: the circuit's logits) and the centroid tokens' ``C`` (the final centroids), unit-scaled. It is
1 on the clean run and 0 on the corrupted one, as the "fraction of logit difference recovered" of language-model
circuit work, and it is linear in the readout, so gradient methods (first order in it) estimate it without a
curvature term. The assignment alone would be a step function of everything (a one-hot); the centroids carry the
algorithm's continuous output.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from analysis.discovery.graph import INPUT, MLP_PORT, OUT_PORT, OUTPUT, CircuitGraph, head_node, mlp_node
from circuits.devices import torch_threads
from circuits import hook_names
from circuits.layout import ResidualLayout, SequenceLayout

_QKV = {"q": hook_names.q, "k": hook_names.k, "v": hook_names.v}
_QKV_WEIGHT = {"q": "W_Q", "k": "W_K", "v": "W_V"}


class CorruptionInvisible(ValueError):
    """The clean and corrupted runs have the same readout: the metric is 0/0, no edge can be scored."""


class EdgePatcher:
    """A model, its graph, and a batch of clean/corrupted residual inputs (``B`` pairs of one sequence layout).

    :meth:`run` returns the metric of each subgraph (``removed``: ``(R, E)``) on each pair: ``(R, B)``.
    """

    def __init__(self, model, graph: CircuitGraph, layout: ResidualLayout, sequence: SequenceLayout,
                 clean: torch.Tensor, corrupted: torch.Tensor, threads: int | None = 1,
                 reads: Sequence[tuple[object, str]] | None = None):
        if clean.shape != corrupted.shape or clean.ndim != 3:
            raise ValueError(f"clean and corrupted inputs must be one (batch, pos, d_model) shape, got"
                             f" {tuple(clean.shape)} and {tuple(corrupted.shape)}")
        self.model, self.graph, self.layout, self.sequence = model, graph, layout, sequence
        # What the metric reads: (positions, subspace); the Lloyd circuit's points' labels and final centroids.
        self.reads = list(reads) if reads is not None else [(sequence.points, "Y"), (sequence.centroids, "C")]
        self.threads = threads
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
            self.corrupted_outputs = self._outputs(corrupted)
            self.clean_outputs = self._outputs(clean)
        self.r_clean = self.readout(self._final(clean))
        self.r_corrupted = self.readout(self._final(corrupted))
        direction = self.r_clean - self.r_corrupted
        self._norm2 = (direction**2).sum(-1)
        if not bool((self._norm2 > 0).all()):
            raise CorruptionInvisible("the corruption does not change the readout (labels and centroids) of every"
                                      " pair: nothing to discover")
        self._direction = direction

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

    def readout(self, resid: torch.Tensor) -> torch.Tensor:
        """``(batch, m)``: the subspaces of :attr:`reads` at their positions (by default the points' ``Y`` and the
        centroid tokens' ``C``), flattened."""
        return torch.cat([resid[:, pos, self.layout[name]].reshape(resid.shape[0], -1) for pos, name in self.reads],
                         dim=1)

    def metric(self, readout: torch.Tensor) -> torch.Tensor:
        """``(R*B, m)`` readouts -> ``(R, B)`` metric, 1 = clean, 0 = corrupted (see the module docstring)."""
        B = self.clean.shape[0]
        r = readout.view(-1, B, readout.shape[-1])
        return ((r - self.r_corrupted) * self._direction).sum(-1) / self._norm2

    # --------------------------------------------------------------------------------------- patched runs
    def run(self, removed: torch.Tensor, x: torch.Tensor | None = None, probe: bool = False):
        """Metric ``(R, B)`` of the subgraphs ``removed`` (``(R, E)``, 1 = removed) on inputs ``x`` (``(B, ..)``,
        default the clean inputs). With ``probe``, also the gradient of the summed metric with respect to every
        port's input, ``{(node, port): (R, B, pos, d_model)}`` (the run is then differentiable)."""
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
                differences[src] = (self.corrupted_outputs[src]
                                    - current[src].reshape(R, B, *batch_x.shape[1:])).reshape(batch_x.shape)
            return differences[src]

        def delta(node: str, port: str) -> torch.Tensor | None:
            """The patched difference at a port, or None where no row removes any of its edges (and no probe)."""
            key = (node, port)
            if key not in deltas:
                d = None
                for i, src in self._by_port.get(key, []):
                    if i in column:
                        term = weight_of_edge[:, column[i], None, None] * difference(src)
                        d = term if d is None else d + term
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
            M = self.metric(self.readout(final[0]))
            if not probe:
                return M
            keys = list(probes)
            grads = torch.autograd.grad(M.sum(), [probes[k] for k in keys], allow_unused=True)
        shape = (R, B, *batch_x.shape[1:])
        return M.detach(), {k: (torch.zeros(shape, dtype=self.dtype) if g is None else g.view(shape))
                            for k, g in zip(keys, grads)}

    def source_difference(self, src: str) -> torch.Tensor:
        """``corr_u - clean_u``: what removing an edge from ``src`` changes at its destination, ``(B, pos, d)``."""
        return self.corrupted_outputs[src] - self.clean_outputs[src]

    def single_edge_effects(self, edges: Sequence[int] | None = None, chunk: int = 64) -> np.ndarray:
        """``(E, B)``: the metric change when one edge alone is removed from the full (clean) graph."""
        edges = range(self.E) if edges is None else edges
        edges = list(edges)
        out = np.zeros((len(edges), self.clean.shape[0]))
        for start in range(0, len(edges), chunk):
            part = edges[start:start + chunk]
            removed = torch.zeros(len(part), self.E, dtype=self.dtype)
            removed[torch.arange(len(part)), torch.tensor(part)] = 1
            out[start:start + len(part)] = (self.run(removed) - 1.0).numpy()
        return out


def stack_pairs(circuit, pairs) -> tuple[torch.Tensor, torch.Tensor, SequenceLayout]:
    """Clean and corrupted residual inputs of ``pairs`` (one sequence layout), each pair encoded with the unit
    scaling both of its runs share (:func:`analysis.patching.experiment.encode_pair`)."""
    from analysis.patching.experiment import encode_pair

    encoded = [encode_pair(circuit, p) for p in pairs]
    sequences = {e[0].sequence for e in encoded}
    if len(sequences) != 1:
        raise ValueError("the pairs of one discovery run must have one sequence layout (the same n and k)")
    clean = torch.cat([c.resid for c, _ in encoded])
    corrupted = torch.cat([k.resid for _, k in encoded])
    return clean, corrupted, sequences.pop()
