"""ACDC (Conmy et al., 2023) on the circuit: prune edges by patching, one threshold or a sweep of them.

The algorithm as published: start from the full graph; visit the destinations from the readout backwards; at
each, try removing its incoming edges one at a time (latest source first) and keep an edge removed when the
metric moves by at most the threshold ``tau``. A node none of whose outgoing edges survived influences nothing,
so its incoming edges go without a test. Here the metric is :meth:`EdgePatcher.metric` (1 clean, 0 corrupted)
and the change is its absolute value averaged over the pairs: a removal that pushes the readout past the clean
one changes the behaviour as much as one that pulls it towards the corrupted one (ACDC's KL divergence, for
which Conmy et al. designed the rule, is never negative either).

Every threshold of a sweep runs in one batch: the edges are visited in one order whatever the threshold, so each
trial removal is one forward pass over all thresholds, each batch row keeping its own subgraph; a trial whose
destination is dead in every row is not run (it could change nothing).

``group=True`` tests the edges from one source into one destination node together (a head's ``q``, ``k`` and
``v`` edges from ``u`` are one trial): a third to a half of the forward passes on the swap circuits, at the price
of resolution: a group is kept or removed whole, so an edge outside the circuit that shares its group with a
circuit edge is kept with it (docs/discovery.md says where the table does this).
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


def trials(patcher: EdgePatcher, incoming: list[int], group: bool) -> list[list[int]]:
    """The edges of one destination node as ACDC tries them: one by one, or grouped by source (order kept)."""
    if not group:
        return [[i] for i in incoming]
    out: list[list[int]] = []
    for i in incoming:
        if out and patcher.graph.edges[out[-1][0]].src == patcher.graph.edges[i].src:
            out[-1].append(i)
        else:
            out.append([i])
    return out


def acdc(patcher: EdgePatcher, thresholds=DEFAULT_THRESHOLDS, group: bool = False) -> AcdcResult:
    """Run ACDC at every threshold (one batch row each); ``group``: one trial per source and destination node."""
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
        for edges in trials(patcher, incoming, group):
            if bool(dead.all()):
                break
            cols = torch.tensor(edges)[None, :]
            trial = removed.clone()
            trial[(~dead).nonzero()[:, :1], cols] = 1
            new = patcher.run(trial)
            runs += 1
            change = (new - current).abs().mean(dim=1)
            accept = (change <= tau) & ~dead
            removed[accept.nonzero()[:, :1], cols] = 1
            current[accept] = new[accept]
    return AcdcResult(tau.numpy(), (removed == 0).numpy(), current.numpy(), runs)


def exercised_edges(patcher: EdgePatcher, circuit_only: bool = False) -> np.ndarray:
    """``(E,)``: whether removing the edge alone from the full graph changes the metric on some pair (exactly).
    Kept on the patcher: every method run on it is scored against the same set. ``circuit_only``: patch only the
    circuit's edges and count the others as not exercised, which they are not: an edge outside the graph has
    exactly zero effect (tests/unit/test_discovery.py checks it on every candidate of the tiny Lloyd and swap
    circuits); for the learned swap, whose 3938 candidates would cost most of its budget."""
    if getattr(patcher, "exercised", None) is None:
        truth = patcher.graph.truth
        patcher.exercised = np.zeros(patcher.E, dtype=bool)
        edges = np.flatnonzero(truth) if circuit_only else np.arange(patcher.E)
        patcher.exercised[edges] = (patcher.single_edge_effects(edges.tolist()) != 0).any(axis=1)
    return patcher.exercised
