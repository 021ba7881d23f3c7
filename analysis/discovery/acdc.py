"""ACDC (Conmy et al., 2023) on the circuit: prune edges by patching, one threshold or a sweep of them.

The algorithm as published: start from the full graph; visit the destinations from the readout backwards; at
each, try removing its incoming edges one at a time (latest source first) and keep an edge removed when the
metric moves by at most the threshold ``tau``. A node none of whose outgoing edges survived influences nothing,
so its incoming edges go without a test. Here the metric is :meth:`EdgePatcher.metric` (1 clean, 0 corrupted)
and the change is its absolute value averaged over the pairs: a removal that pushes the readout past the clean
one changes the behaviour as much as one that pulls it towards the corrupted one (ACDC's KL divergence, for
which Conmy et al. designed the rule, is never negative either).

Every threshold of a sweep runs in one batch: the edges are visited in one order whatever the threshold, so each
trial removal is one forward pass over all thresholds, each batch row keeping its own subgraph.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from analysis.discovery.edges import EdgePatcher
from analysis.discovery.graph import OUTPUT

#: The default sweep: 0 (exact patching: only edges whose removal changes nothing go) and 1e-6 .. 1.
DEFAULT_THRESHOLDS: tuple[float, ...] = (0.0, *np.logspace(-6, 0, 13).tolist())


@dataclass
class AcdcResult:
    """``kept[r, e]``: edge ``e`` survives at ``thresholds[r]``; ``metric[r]``: the final subgraph's metric per
    pair; ``runs``: forward passes made."""

    thresholds: np.ndarray
    kept: np.ndarray
    metric: np.ndarray
    runs: int


def visit_order(patcher: EdgePatcher) -> list[tuple[str, list[int]]]:
    """``(destination node, its incoming edges)`` from the readout backwards, edges latest source first."""
    graph = patcher.graph
    by_node: dict[str, list[int]] = {}
    for node, port in reversed(graph.destinations()):
        for i, e in enumerate(graph.edges):
            if (e.dst, e.port) == (node, port):
                by_node.setdefault(node, []).append(i)
    sources = graph.sources
    return [(node, sorted(edges, key=lambda i: -sources.index(graph.edges[i].src))) for node, edges in by_node.items()]


def acdc(patcher: EdgePatcher, thresholds=DEFAULT_THRESHOLDS) -> AcdcResult:
    """Run ACDC at every threshold (one batch row each)."""
    tau = torch.as_tensor(np.asarray(thresholds, dtype=np.float64), dtype=patcher.dtype)
    R, E = len(tau), patcher.E
    removed = torch.zeros(R, E, dtype=patcher.dtype)
    outgoing: dict[str, list[int]] = {}
    for i, e in enumerate(patcher.graph.edges):
        outgoing.setdefault(e.src, []).append(i)
    current = patcher.run(removed)
    runs = 1
    for node, incoming in visit_order(patcher):
        if node != OUTPUT:
            dead = (removed[:, outgoing.get(node, [])] == 1).all(dim=1)
            removed[dead.nonzero().flatten()[:, None], torch.tensor(incoming)[None, :]] = 1
        else:
            dead = torch.zeros(R, dtype=torch.bool)
        for i in incoming:
            trial = removed.clone()
            trial[~dead, i] = 1
            new = patcher.run(trial)
            runs += 1
            change = (new - current).abs().mean(dim=1)
            accept = (change <= tau) & ~dead
            removed[accept, i] = 1
            current[accept] = new[accept]
    return AcdcResult(tau.numpy(), (removed == 0).numpy(), current.numpy(), runs)


def exercised_edges(patcher: EdgePatcher) -> np.ndarray:
    """``(E,)``: whether removing the edge alone from the full graph changes the metric on some pair (exactly)."""
    return (patcher.single_edge_effects() != 0).any(axis=1)
