"""Edge attribution patching (Syed et al., 2023) and its integrated-gradients form EAP-IG (Hanna et al., 2024).

EAP estimates the metric change of removing edge ``u -> v.port`` to first order, from one forward and one
backward pass on the clean run: ``(corr_u - clean_u) . dM/d(input of v.port)``. EAP-IG averages that gradient
over inputs interpolated from the corrupted to the clean run, ``x_a = x_corr + a (x_clean - x_corr)`` for
``a = 1/m .. 1``, so that a metric that is flat at the clean run but not between the two still registers. Both
rank edges by the absolute score (per pair, then averaged over pairs: scores of opposite sign on two pairs
must not cancel).

Gradients are taken in the model's dtype; the circuit's is float64. Through the exact circuit's hard attention
(``beta ~ 1e16``: every attention weight is exactly 0 or 1 in float64) the gradient of the output with respect
to any query or key input is exactly 0, so every QK edge scores 0 — the method cannot see the assignment
mechanism at all; value and MLP paths stay differentiable (the MLPs are piecewise linear). A finite-``beta``
construction (the soft variant) has gradients through the scores.
"""

from __future__ import annotations

import numpy as np
import torch

from analysis.discovery.edges import EdgePatcher


def _scores(patcher: EdgePatcher, grads: dict, weights: np.ndarray | None = None) -> np.ndarray:
    """``(E,)`` mean over pairs of ``|(corr_u - clean_u) . g|``, ``g`` averaged over the ``R`` rows of ``grads``."""
    E = patcher.E
    per_pair = np.zeros((E, patcher.clean.shape[0]))
    for i, e in enumerate(patcher.graph.edges):
        g = grads[(e.dst, e.port)].mean(dim=0)  # (B, pos, d)
        per_pair[i] = (patcher.source_difference(e.src) * g).sum(dim=(1, 2)).numpy()
    return np.abs(per_pair).mean(axis=1)


def eap(patcher: EdgePatcher) -> np.ndarray:
    """EAP scores ``(E,)``: the gradient at the clean run."""
    _, grads = patcher.run(torch.zeros(1, patcher.E, dtype=patcher.dtype), probe=True)
    return _scores(patcher, grads)


def eap_ig(patcher: EdgePatcher, steps: int = 8) -> np.ndarray:
    """EAP-IG scores ``(E,)``: the gradient averaged over ``steps`` inputs from corrupted (exclusive) to clean."""
    if steps < 1:
        raise ValueError(f"EAP-IG needs at least one step, got {steps}")
    total = None
    for a in np.arange(1, steps + 1) / steps:
        x = patcher.corrupted + float(a) * (patcher.clean - patcher.corrupted)
        _, grads = patcher.run(torch.zeros(1, patcher.E, dtype=patcher.dtype), x=x, probe=True)
        total = grads if total is None else {k: total[k] + grads[k] for k in grads}
    return _scores(patcher, {k: v / steps for k, v in total.items()})
