"""Single-edge ablations checked with TransformerLens's own split-input hooks: the ground truth's witnesses.

A member of a ground truth (:mod:`analysis.discovery.truth`) comes with a *witness*: an input of the family on
which removing that edge alone changes the readout. The change is measured here, independently of the edge
patching the discovery methods use (:class:`~analysis.discovery.edges.EdgePatcher` adds ``(ablated - current)
@ W`` after each port's projection): with ``use_split_qkv_input`` and ``use_hook_mlp_in`` on, TransformerLens
gives every head's query, key and value and every MLP its own copy of the residual stream
(``hook_q_input``/``hook_k_input``/``hook_v_input``, ``hook_mlp_in``), and the edge is removed by replacing, in
that copy only, the source's clean output by its ablated one; the model does the projections itself. Batch row
``r`` removes edge ``r``. The flags are set for the run and restored after it.

TransformerLens 4's hooked circuit has no split query/key/value inputs; there the witnesses are measured with
the methods' patcher (:meth:`~analysis.discovery.edges.EdgePatcher.readout_changes`) and the ground truth says so
(:attr:`Evaluator.name`).
"""

from __future__ import annotations

import numpy as np
import torch

from analysis.discovery.graph import INPUT, MLP_PORT, OUT_PORT, OUTPUT, head_node, mlp_node
from circuits import hook_names
from circuits.devices import torch_threads

SPLIT_INPUTS = "TransformerLens split-input hooks"
PATCHER = "the methods' edge patcher (no split inputs on this model)"


def split_inputs_available(model) -> bool:
    return hasattr(model, "set_use_split_qkv_input") and hasattr(model, "set_use_hook_mlp_in")


class Evaluator:
    """Readout changes of single-edge ablations on one pair (``clean``, ``ablated`` source outputs)."""

    def __init__(self, model, graph, layout, reads, chunk: int = 128, threads: int | None = 1):
        self.model, self.graph, self.layout, self.reads = model, graph, layout, list(reads)
        self.chunk, self.threads = chunk, threads
        self.name = SPLIT_INPUTS if split_inputs_available(model) else PATCHER
        self._sources = {INPUT: hook_names.resid_pre(0)}
        for layer in range(graph.n_layers):
            self._sources[head_node(layer)] = hook_names.attn_out(layer)
            self._sources[mlp_node(layer)] = hook_names.mlp_out(layer)
        self._last = hook_names.resid_post(graph.n_layers - 1)

    @property
    def sources(self) -> list[str]:
        return list(self._sources)

    def readout(self, resid: torch.Tensor) -> torch.Tensor:
        return torch.cat([resid[:, pos, self.layout[name]].reshape(resid.shape[0], -1) for pos, name in self.reads],
                         dim=1)

    def outputs(self, x: torch.Tensor) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        """Each source's output on ``x`` ``(b, P, D)``, and the readout ``(b, m)``."""
        names = list(self._sources.values()) + [self._last]
        with torch.no_grad(), torch_threads(self.threads):
            _, cache = self.model.run_with_cache(x, names_filter=hook_names.names_filter(names))
        return {node: cache[name] for node, name in self._sources.items()}, self.readout(cache[self._last])

    def changes(self, clean: torch.Tensor, ablated: dict[str, torch.Tensor], edges: list[int]) -> np.ndarray:
        """``(len(edges), b)``: the largest change of a readout entry when each edge alone is removed from each
        clean run ``clean`` ``(b, P, D)``, the removed source giving ``ablated[src]`` (``(b, P, D)``, or ``(1, P,
        D)`` for every run) instead."""
        outputs, r_clean = self.outputs(clean)
        b = clean.shape[0]
        out = np.zeros((len(edges), b))
        per = max(1, self.chunk // b)
        for start in range(0, len(edges), per):
            part = edges[start:start + per]
            out[start:start + len(part)] = self._changes(clean, outputs, r_clean, ablated, part)
        return out

    def _changes(self, clean, outputs, r_clean, ablated, edges) -> np.ndarray:
        """Rows ``(edge, run)``, edge-major."""
        b = clean.shape[0]
        at: dict[tuple[str, str], tuple[list[int], list[torch.Tensor]]] = {}
        for row, i in enumerate(edges):
            e = self.graph.edges[i]
            rows, ds = at.setdefault((e.dst, e.port), ([], []))
            rows.extend(range(row * b, (row + 1) * b))
            ds.append(ablated[e.src].expand_as(outputs[e.src]) - outputs[e.src])
        deltas = {key: (torch.tensor(rows), torch.cat(ds)) for key, (rows, ds) in at.items()}
        B = len(edges) * b

        def add(key, heads: bool):
            rows, d = deltas[key]

            def hook(act, hook):
                act = act.clone()
                act[rows] += d[:, :, None, :] if heads else d
                return act
            return hook

        hooks = []
        for layer in range(self.graph.n_layers):
            for port in ("q", "k", "v"):
                if (head_node(layer), port) in deltas:
                    hooks.append((hook_names.qkv_input(layer, port), add((head_node(layer), port), True)))
            if (mlp_node(layer), MLP_PORT) in deltas:
                hooks.append((hook_names.mlp_in(layer), add((mlp_node(layer), MLP_PORT), False)))
        if (OUTPUT, OUT_PORT) in deltas:
            hooks.append((self._last, add((OUTPUT, OUT_PORT), False)))
        final: list[torch.Tensor] = []
        hooks.append((self._last, lambda act, hook: final.append(act)))
        model = self.model
        flags = (model.cfg.use_split_qkv_input, model.cfg.use_hook_mlp_in)
        try:
            model.set_use_split_qkv_input(True)
            model.set_use_hook_mlp_in(True)
            with torch.no_grad(), torch_threads(self.threads):
                model.run_with_hooks(clean.repeat(len(edges), 1, 1), fwd_hooks=hooks)
        finally:
            model.set_use_split_qkv_input(flags[0])
            model.set_use_hook_mlp_in(flags[1])
        change = (self.readout(final[-1]).view(len(edges), b, -1) - r_clean).abs().amax(dim=2)
        return change.numpy()
