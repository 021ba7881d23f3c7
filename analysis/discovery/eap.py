"""Edge attribution patching (Syed et al., 2023) and its integrated-gradients form EAP-IG (Hanna et al., 2024).

EAP estimates the metric change of removing edge ``u -> v.port`` to first order, from one forward and one
backward pass on the clean run: ``(abl_u - clean_u) . dM/d(input of v.port)``, ``abl_u`` the source's ablated
output (:mod:`analysis.discovery.ablation`). EAP-IG averages that gradient over inputs interpolated from the
ablated to the clean input, ``x_a = x_abl + a (x_clean - x_abl)`` for ``a = j / m``, ``j = 0 .. m - 1`` (the
reference implementation's left Riemann sum: the ablated end in, the clean end out), so that a metric that is
flat at the clean run but not between the two still registers; ``x_abl`` is the corrupted input for ``resample``,
and the input's own ablated value (0, or the mean input) for ``zero`` and ``mean``. A metric whose minimum is
the clean run (``kl``) has a zero gradient there: EAP scores every edge 0 with it, EAP-IG does not. Both
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


def interpolation_points(steps: int) -> np.ndarray:
    """EAP-IG's ``a = j / steps`` for ``j = 0 .. steps - 1``: from the ablated end (included) towards the clean one."""
    if steps < 1:
        raise ValueError(f"EAP-IG needs at least one step, got {steps}")
    return np.arange(steps) / steps


def eap_ig(patcher: EdgePatcher, steps: int = 8) -> np.ndarray:
    """EAP-IG scores ``(E,)``: the gradient averaged over ``steps`` inputs from the ablated input to the clean one."""
    from analysis.discovery.graph import INPUT

    base = patcher.ablated_outputs[INPUT]
    total = None
    for a in interpolation_points(steps):
        x = base + float(a) * (patcher.clean - base)
        _, grads = patcher.run(torch.zeros(1, patcher.E, dtype=patcher.dtype), x=x, probe=True)
        total = grads if total is None else {k: total[k] + grads[k] for k in grads}
    return _scores(patcher, {k: v / steps for k, v in total.items()})
