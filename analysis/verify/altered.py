"""Which hooks changed a run: for a report built from an ``ActivationCache`` (a run someone made, hooks and all).

The cache does not say which hooks were active, so each block is run again, alone and without hooks, on its
cached input (``resid_pre``) with TransformerLens' ``start_at_layer``/``stop_at_layer``; the first activation of
the block, in forward order, that differs from the cached one is where a hook changed the run (what follows in
the block differs because of it). Later blocks are run on their own cached inputs, so every altered block is
found, each once. A description of the change goes with the hook name: zeroed, or the largest difference.
"""

from __future__ import annotations

import numpy as np
import torch

from analysis.capture.hooked import block_input
from circuits import hook_names

#: A block's hook points in the order its forward pass reaches them.
_FORWARD_ORDER = (hook_names.q, hook_names.k, hook_names.v, hook_names.attn_scores, hook_names.pattern,
                  hook_names.z, hook_names.head_result, hook_names.attn_out, hook_names.resid_mid,
                  hook_names.mlp_pre, hook_names.mlp_pre_linear, hook_names.mlp_post, hook_names.mlp_out,
                  hook_names.resid_post)


def find_alterations(circuit, cache) -> list[str]:
    """``["<hook name> (zeroed)", "<hook name> (changed by up to 0.5)", ...]``: per block whose cached
    activations differ from what the block computes on its cached input, the first such hook point."""
    model = circuit.model
    present = set(cache.keys())
    found = []
    with torch.no_grad():
        for layer in range(circuit.n_layers):
            names = [name(layer) for name in _FORWARD_ORDER if name(layer) in present]
            if not names:
                continue
            _, fresh = model.run_with_cache(block_input(cache, layer), start_at_layer=layer,
                                            stop_at_layer=layer + 1, names_filter=hook_names.names_filter(names))
            for name in names:
                given, own = cache[name], fresh[name]
                if given.shape != own.shape or not torch.equal(given, own):
                    found.append(f"{name} ({_change(given, own)})")
                    break
    return found


def _change(given: torch.Tensor, own: torch.Tensor) -> str:
    if given.shape != own.shape:
        return f"shape {tuple(given.shape)} where the block makes {tuple(own.shape)}"
    if not torch.any(given):
        return "zeroed"
    diff = (given - own).abs()
    diff = diff[torch.isfinite(diff)]
    largest = float(diff.max()) if diff.numel() else float("inf")
    return f"changed by up to {largest:.3g}" if np.isfinite(largest) else "changed (non-finite values)"
