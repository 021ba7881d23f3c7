"""Attention patterns of one problem, per step, read from each model's exported two-layer ``HookedTransformer`` with
``run_with_cache``: the assign head (points attending centroids) and the update head (centroids attending points).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from circuits import hook_names
from circuits.training.model import RecurrentKMeans


@dataclass
class Patterns:
    """Attention of one problem, per step: assign head point -> centroid, update head centroid -> point."""

    steps: list[int]
    order: np.ndarray
    components: np.ndarray
    assign: dict[str, list[np.ndarray]]
    update: dict[str, list[np.ndarray]]


def attention_patterns(models: dict[str, RecurrentKMeans], X: np.ndarray, C0: np.ndarray, components: np.ndarray,
                       steps: list[int]) -> Patterns:
    """Patterns read with ``run_with_cache`` from each model's exported two-layer ``HookedTransformer``."""
    n, k = X.shape[0], C0.shape[0]
    order = np.argsort(components, kind="stable")
    out = Patterns(steps, order, components[order], {}, {})
    wanted = {hook_names.pattern(0), hook_names.pattern(1)}
    for name, model in models.items():
        ht = model.hooked_transformer(torch.float64)
        enc = model.encode(X, C0)
        resid, points, cents = enc.resid.double(), enc.sequence.points, enc.sequence.centroids
        out.assign[name], out.update[name] = [], []
        with torch.no_grad():
            for t in range(max(steps) + 1):
                if t:
                    resid = model.reembed(resid, enc.resid.double())
                # Step 0 is the assign block alone (layer 1); later steps run both layers.
                resid, cache = ht.run_with_cache(resid, start_at_layer=1 if t == 0 else 0, stop_at_layer=2,
                                                 names_filter=hook_names.names_filter(wanted))
                if t in steps:
                    out.assign[name].append(cache[hook_names.pattern(1)][0, 0, points, cents].numpy()[order])
                    u = cache[hook_names.pattern(0)][0, 0, cents, points].numpy() if t else np.zeros((k, n))
                    out.update[name].append(u[:, order])
    return out
