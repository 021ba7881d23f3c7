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
destination is dead in every row is not run (it could change nothing). Identical subgraphs run once, and one
pass tries several of a node's trials ahead (:func:`acdc`'s ``lookahead``). The comparison allows
:data:`ROUNDING` (1e-12), the one departure from the published rule: the forward pass's float64 rounding depends
on a subgraph's row in its batch.

``group=True`` tests the edges from one source into one destination node together (a head's ``q``, ``k`` and
``v`` edges from ``u`` are one trial): a third to a half of the forward passes on the swap circuits, at the price
of resolution: a group is kept or removed whole, so an edge outside the circuit that shares its group with a
circuit edge is kept with it (an option of `kmeans-circuits discover --group`; the results table does not use it).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from analysis.discovery.edges import ROUNDING, EdgePatcher
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


#: Trials of one destination node run ahead in one forward pass (see :func:`acdc`).
LOOKAHEAD = 16


def acdc(patcher: EdgePatcher, thresholds=DEFAULT_THRESHOLDS, group: bool = False,
         lookahead: int = LOOKAHEAD) -> AcdcResult:
    """Run ACDC at every threshold (one batch row each); ``group``: one trial per source and destination node.

    ``lookahead``: how many of a node's next trials one forward pass tries, each row assuming that the trials
    before it in the pass are accepted (most are: removing an edge that carries nothing changes nothing). A row
    is used only while that assumption holds; the first rejected trial ends the row's run of trials and the next
    pass starts after it. The decisions are those of trying one trial per pass (each subgraph's metric does not
    depend on the other rows of its batch, and identical subgraphs — thresholds that have decided alike so far —
    run once); only the number of forward passes (``runs``) changes.
    """
    if lookahead < 1:
        raise ValueError(f"ACDC's lookahead must be at least 1, got {lookahead}")
    tau = torch.as_tensor(np.asarray(thresholds, dtype=np.float64), dtype=patcher.dtype)
    R, E = len(tau), patcher.E
    removed = np.zeros((R, E), dtype=bool)
    outgoing: dict[str, list[int]] = {}
    for i, e in enumerate(patcher.graph.edges):
        outgoing.setdefault(e.src, []).append(i)
    current = _run_distinct(patcher, list(removed))
    runs = 1
    for node, incoming in visit_order(patcher):
        if node != OUTPUT:
            dead = removed[:, outgoing.get(node, [])].all(axis=1)
            removed[np.ix_(dead, incoming)] = True
        else:
            dead = np.zeros(R, dtype=bool)
        steps = trials(patcher, incoming, group)
        todo = {int(r): 0 for r in np.flatnonzero(~dead)}  # threshold row -> its next trial
        while todo:
            masks, rows, prev = [], [], []
            for r, t in todo.items():
                mask = removed[r]
                for j, edges in enumerate(steps[t:t + lookahead]):
                    mask = mask.copy()
                    mask[edges] = True
                    # The metric the trial is compared with: the row's current one, or (ahead) the previous
                    # trial's, which is the current one if that trial is accepted.
                    prev.append(current[r] if j == 0 else None)
                    masks.append(mask)
                    rows.append(r)
            new = _run_distinct(patcher, masks)
            runs += 1
            before = torch.stack([new[i - 1] if p is None else p for i, p in enumerate(prev)])
            change = (new - before).abs().mean(dim=1)
            i = 0
            for r in list(todo):
                n = sum(1 for x in rows if x == r)
                t = todo[r]
                for j in range(n):
                    edges = steps[t]
                    t += 1
                    if bool(change[i + j] <= tau[r] + ROUNDING):
                        removed[r, edges] = True
                        current[r] = new[i + j]
                    else:
                        break
                i += n
                if t < len(steps):
                    todo[r] = t
                else:
                    del todo[r]
    return AcdcResult(tau.numpy(), ~removed, current.numpy(), runs)


def _run_distinct(patcher: EdgePatcher, masks: list[np.ndarray]) -> torch.Tensor:
    """The metric ``(len(masks), B)`` of the subgraphs that ``masks`` remove, each distinct subgraph run once."""
    index: dict[bytes, int] = {}
    keys = [index.setdefault(m.tobytes(), len(index)) for m in masks]
    distinct = {i: m for m, i in zip(masks, keys)}
    removed = torch.as_tensor(np.stack([distinct[i] for i in range(len(index))]), dtype=patcher.dtype)
    return patcher.run(removed)[torch.tensor(keys)]


def exercised_edges(patcher: EdgePatcher, circuit_only: bool = False) -> np.ndarray:
    """``(E,)``: whether removing the edge alone from the full graph changes the metric on some pair by more than
    :data:`ROUNDING` (the margin ACDC's threshold 0 allows, so that "exercised" and "kept at threshold 0" mean
    the same; on the soft construction a few edges move the metric by ~1e-15 only, float64 rounding).
    Kept on the patcher: every method run on it is scored against the same set. ``circuit_only``: patch only the
    circuit's edges and count the others as not exercised, which they are not: an edge outside the graph has
    exactly zero effect (tests/unit/test_discovery.py checks it on every candidate of the tiny Lloyd and swap
    circuits)."""
    if getattr(patcher, "exercised", None) is None:
        truth = patcher.graph.truth
        patcher.exercised = np.zeros(patcher.E, dtype=bool)
        edges = np.flatnonzero(truth) if circuit_only else np.arange(patcher.E)
        patcher.exercised[edges] = (np.abs(patcher.single_edge_effects(edges.tolist())) > ROUNDING).any(axis=1)
    return patcher.exercised
