"""The ground truth of a discovery task: the edges a corruption family needs, each proven one way or the other.

A *task* is a circuit, a corruption family (:mod:`analysis.discovery.family`) and an ablation kind
(:mod:`analysis.discovery.ablation`). Its ground truth is the set of candidate edges whose removal alone
changes the readout (labels and final centroids) for **some** input of the family. Every candidate edge gets a
verdict, and none is decided by the edge patching the methods use:

* **inert**, proven by the abstract interpretation of the weights over the whole family
  (:mod:`analysis.discovery.abstract`), for one of three reasons (:data:`REASONS`): ``weights`` (the port reads
  nothing the source writes), ``invariant`` (the ablated output equals the clean one wherever the port reads, on
  every input: a family invariant, or a constant of the encoder), ``flow`` (the difference reaches the port but
  dies before the readout: attention that gives the changed keys exactly zero weight, units that cannot fire,
  subspaces that only an eraser reads);
* **member**, with a *witness*: a problem of the family (sampler and seed) on which removing the edge alone moves
  a readout entry by more than :data:`WITNESS_TOL` (unit-scaled), measured with TransformerLens's split-input
  hooks (:mod:`analysis.discovery.witness`);
* **undecided**: neither proven inert nor witnessed within the search (:data:`WITNESS_BUDGET` problems). Scoring
  leaves these edges out and says how many.

The inert edges are also proven inert *together*: the interpretation is run once with all of them ablated at
once (each port reading the hull of its clean and ablated input), so removing any subset of them changes
nothing (:attr:`GroundTruth.jointly_inert`). Coverage is reported beside: the share of the weights' data-flow
graph (:attr:`~analysis.discovery.graph.CircuitGraph.circuit`) and of the candidates that the family needs.

The mean ablation's reference distribution is the clean runs of the first :data:`MEAN_REFERENCE` searched
problems (a proof of inertness holds for any reference: an ablated coordinate that is inert is a family constant).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from analysis.discovery import abstract as ab
from analysis.discovery.family import (SAMPLERS, encode_pairs, family_pairs, input_abstraction, readout_mask)
from analysis.discovery.graph import INPUT, MLP_PORT, OUTPUT, CircuitGraph, node_layer

#: A witness moves some readout entry (unit-scaled) by more than this: a thousand times float64's rounding of
#: the unit-scaled readout (~1e-15).
WITNESS_TOL = 1e-12
#: Problems of the family tried for witnesses, at most; seeds from :data:`SEARCH_SEED` on.
WITNESS_BUDGET = 96
SEARCH_SEED = 10_000
#: Problems tried in one batch.
SEARCH_BATCH = 16
#: Searched problems whose clean runs are the mean ablation's reference distribution.
MEAN_REFERENCE = 8

MEMBER, INERT, UNDECIDED = "member", "inert", "undecided"
REASONS: dict[str, str] = {
    "weights": "the port reads nothing the source writes",
    "invariant": "the ablated source output equals the clean one wherever the port reads, on every input",
    "flow": "the difference reaches the port but not the readout",
}


@dataclass
class Verdict:
    status: str
    reason: str | None = None
    witness: dict | None = None


@dataclass
class GroundTruth:
    """Per candidate edge of ``graph``: a :class:`Verdict` for the family ``corruption`` under ``ablation``."""

    graph: CircuitGraph
    corruption: str
    ablation: str
    shape: tuple[int, int, int]
    verdicts: list[Verdict]
    evaluator: str
    searched: int
    jointly_inert: bool
    #: Candidates whose source writes some subspace their port reads, constants included (no data).
    weight_connected: np.ndarray = field(repr=False, default=None)
    #: The points the family draws from (``None``: blobs), as given to :func:`derive_truth`.
    base: np.ndarray | None = field(repr=False, default=None)

    @classmethod
    def given(cls, graph: CircuitGraph, members: np.ndarray, name: str) -> GroundTruth:
        """A truth stated rather than derived (``members``: boolean per candidate edge), e.g. the construction a
        trained model started from; every other edge counts as inert, reason ``given``."""
        verdicts = [Verdict(MEMBER) if m else Verdict(INERT, "given") for m in members]
        return cls(graph, name, "given", (0, 0, 0), verdicts, "none", 0, False, graph_connected(graph))

    @classmethod
    def union(cls, truths: list[GroundTruth]) -> GroundTruth:
        """The truth of several families at once: a member of any, inert only where inert in all (the first
        family's reason), undecided otherwise."""
        first = truths[0]
        verdicts = []
        for vs in zip(*(t.verdicts for t in truths)):
            member = next((v for v in vs if v.status == MEMBER), None)
            verdicts.append(member if member is not None else vs[0] if all(v.status == INERT for v in vs)
                            else Verdict(UNDECIDED))
        return cls(first.graph, ",".join(t.corruption for t in truths), first.ablation, first.shape, verdicts,
                   first.evaluator, sum(t.searched for t in truths), all(t.jointly_inert for t in truths),
                   first.weight_connected)

    @property
    def members(self) -> np.ndarray:
        return np.array([v.status == MEMBER for v in self.verdicts])

    @property
    def decided(self) -> np.ndarray:
        return np.array([v.status != UNDECIDED for v in self.verdicts])

    def counts(self) -> dict[str, int]:
        out = {MEMBER: 0, UNDECIDED: 0, **{f"inert ({r})": 0 for r in REASONS}}
        for v in self.verdicts:
            out[MEMBER if v.status == MEMBER else UNDECIDED if v.status == UNDECIDED else f"inert ({v.reason})"] += 1
        return out

    @property
    def coverage(self) -> float:
        """Share of the weights' data-flow graph (the reachability circuit) that the family needs."""
        circuit = self.graph.truth
        return float((self.members & circuit).sum() / max(1, circuit.sum()))

    def to_dict(self) -> dict:
        n, d, k = self.shape
        return {"corruption": self.corruption, "ablation": self.ablation, "n": n, "d": d, "k": k,
                "members": int(self.members.sum()), "candidates": len(self.verdicts),
                "data_flow_edges": int(self.graph.truth.sum()), "coverage": self.coverage,
                "counts": self.counts(), "jointly_inert": self.jointly_inert, "witness_evaluator": self.evaluator,
                "problems_searched": self.searched, "witness_tolerance": WITNESS_TOL, "reasons": REASONS,
                "edges": [{"edge": e.label, "status": v.status, "reason": v.reason, "witness": v.witness}
                          for e, v in zip(self.graph.edges, self.verdicts)]}


def source_key(node: str):
    """The abstract interpretation's name of a graph source."""
    return "in" if node == INPUT else (node_layer(node), "attn" if node.startswith("A") else "mlp")


def port_reads(model: ab.AbstractModel, node: str, port: str) -> np.ndarray:
    """``(D,)``: the residual coordinates a port reads (nonzero rows of its weights, any head)."""
    layer = model.layers[node_layer(node)]
    if port == MLP_PORT:
        return (layer.mlp.W_gate != 0).any(axis=1) | (layer.mlp.W_in != 0).any(axis=1)
    W = {"q": "W_Q", "k": "W_K", "v": "W_V"}[port]
    return np.any([(getattr(h, W) != 0).any(axis=1) for h in layer.heads], axis=0)


@dataclass
class _Task:
    model: ab.AbstractModel
    x: ab.Val
    family: ab.Trace
    pairs: ab.Trace
    readout: np.ndarray
    ablation: str

    def injection(self, src: str) -> ab.Injection:
        key = source_key(src)
        val, _ = self.family.outputs[key]
        if self.ablation == "resample":
            return ab.Injection(key, self.pairs.outputs[key][1], val)
        if self.ablation == "zero":
            return ab.Injection(key, ~val.zero, ab.Val.zeros(val.lo.shape))
        return ab.Injection(key, ~val.const, val)

    def reaches_readout(self, edges) -> bool:
        """Whether ablating ``edges`` (``Edge`` objects, together) may change the readout."""
        injections: dict[ab.Port, list[ab.Injection]] = {}
        final: list[ab.Injection] = []
        start = self.model.n_layers
        for e in edges:
            if e.dst == OUTPUT:
                final.append(self.injection(e.src))
            else:
                layer = node_layer(e.dst)
                injections.setdefault((layer, e.port), []).append(self.injection(e.src))
                start = min(start, layer)
        if start == self.model.n_layers and not final:
            return False
        trace = ab.forward(self.model, self.x, np.zeros(self.x.lo.shape, bool), injections, final,
                           start=min(start, self.model.n_layers - 1), prefix=self.family)
        return bool((trace.final[1] & self.readout).any())


def prove(circuit, graph: CircuitGraph, encoded, ablation: str, layout) -> tuple[list[Verdict | None], _Task]:
    """Inert verdicts from the abstract interpretation; ``None`` where the ablation may reach the readout."""
    inputs = input_abstraction(encoded.clean.numpy(), encoded.corrupted.numpy(), layout)
    model = ab.abstract_model(circuit.model, getattr(circuit, "score_hooks", None))
    zero_taint = np.zeros(inputs.val.lo.shape, bool)
    task = _Task(model, inputs.val, ab.forward(model, inputs.val, zero_taint),
                 ab.forward(model, inputs.val, inputs.pair_taint),
                 readout_mask(encoded.reads, layout, inputs.val.lo.shape), ablation)
    verdicts: list[Verdict | None] = []
    for e in graph.edges:
        if not (graph.io.writes[e.src] & graph.io.reads[(e.dst, e.port)]):
            # Subspace level: a port can read a subspace at coordinates its source leaves at 0, which the
            # checks below decide.
            verdicts.append(Verdict(INERT, "weights"))
            continue
        delta = task.injection(e.src).delta
        reads = task.readout if e.dst == OUTPUT else port_reads(model, e.dst, e.port)[None, :]
        if not (delta & reads).any():
            verdicts.append(Verdict(INERT, "invariant"))
        elif e.dst != OUTPUT and not task.reaches_readout([e]):
            verdicts.append(Verdict(INERT, "flow"))
        else:
            verdicts.append(None)
    return verdicts, task


def _patcher_changes(circuit, graph, encoded, part: slice, ablation: str, todo: list[int], threads) -> np.ndarray:
    """``(len(todo), runs)`` with the methods' patcher (where the model has no split inputs); a run whose readout
    no ablation changes gets 0."""
    from analysis.discovery.edges import CorruptionInvisible, EdgePatcher

    out = np.zeros((len(todo), part.stop - part.start))
    for j, b in enumerate(range(part.start, part.stop)):
        try:
            p = EdgePatcher(circuit.model, graph, circuit.layout, encoded.sequence, encoded.clean[b:b + 1],
                            encoded.corrupted[b:b + 1], threads, encoded.reads, ablation, "l2",
                            encoded.clean[:MEAN_REFERENCE])
        except CorruptionInvisible:
            continue
        out[:, j] = p.readout_changes(todo)[:, 0]
    return out


def _ablated(evaluator, ablation: str, clean, corrupted, reference) -> dict:
    """Each source's ablated output on one pair (``mean``: the reference's, computed once)."""
    if ablation == "resample":
        return evaluator.outputs(corrupted)[0]
    if ablation == "zero":
        return {src: torch.zeros_like(clean) for src in evaluator.sources}
    return reference


def derive_truth(circuit, graph: CircuitGraph, corruption: str, ablation: str, d: int, k: int, n: int,
                 base: np.ndarray | None = None, budget: int = WITNESS_BUDGET, threads: int | None = 1) -> GroundTruth:
    """The :class:`GroundTruth` of ``circuit`` on the family of ``corruption`` at shape ``(n, d, k)`` (the points
    ``base`` with initialisations drawn as the samplers do, when given) under ``ablation``."""
    from analysis.discovery.witness import PATCHER, Evaluator

    found = family_pairs(corruption, d, k, n, range(SEARCH_SEED, SEARCH_SEED + budget), SAMPLERS, base)
    if not found:
        raise ValueError(f"the {corruption} corruption applies to none of {budget} problems of the family")
    pairs = [p for p, _ in found]
    encoded = encode_pairs(circuit, pairs)
    layout = circuit.layout
    verdicts, task = prove(circuit, graph, encoded, ablation, layout)
    todo = [i for i, v in enumerate(verdicts) if v is None]
    evaluator = Evaluator(circuit.model, graph, layout, encoded.reads, threads=threads)
    reference = None
    if ablation == "mean":
        outs = evaluator.outputs(encoded.clean[:MEAN_REFERENCE])[0]
        reference = {src: out.mean(dim=0, keepdim=True) for src, out in outs.items()}
    searched = 0
    for start in range(0, len(found), SEARCH_BATCH):
        if not todo:
            break
        part = slice(start, min(start + SEARCH_BATCH, len(found)))
        searched = part.stop
        clean, corrupted = encoded.clean[part], encoded.corrupted[part]
        if evaluator.name == PATCHER:
            changes = _patcher_changes(circuit, graph, encoded, part, ablation, todo, threads)
        else:
            changes = evaluator.changes(clean, _ablated(evaluator, ablation, clean, corrupted, reference), todo)
        for i, row in zip(list(todo), changes):
            hits = np.flatnonzero(row > WITNESS_TOL)
            if len(hits):
                kind, seed = found[part.start + hits[0]][1]
                verdicts[i] = Verdict(MEMBER, witness={"sampler": kind, "seed": seed, "change": float(row[hits[0]])})
                todo.remove(i)
    for i in todo:
        verdicts[i] = Verdict(UNDECIDED)
    inert = [e for e, v in zip(graph.edges, verdicts) if v.status == INERT]
    return GroundTruth(graph, corruption, ablation, (n, d, k), verdicts, evaluator.name, searched,
                       not task.reaches_readout(inert), graph_connected(graph), base)


def search_pairs(truth: GroundTruth, budget: int = WITNESS_BUDGET) -> list:
    """The problems :func:`derive_truth` searched, as ``[(pair, (sampler, seed))]``."""
    n, d, k = truth.shape
    return family_pairs(truth.corruption, d, k, n, range(SEARCH_SEED, SEARCH_SEED + budget), SAMPLERS, truth.base)


def witness_patcher(circuit, truth: GroundTruth, i: int, searched=None):
    """The methods' :class:`~analysis.discovery.edges.EdgePatcher` on the witness of member ``i`` (its ``mean``
    reference the truth's own), so that the witness can be checked by another implementation of edge removal;
    ``searched``: :func:`search_pairs` of ``truth``, when already made."""
    from analysis.discovery.edges import EdgePatcher

    searched = searched if searched is not None else search_pairs(truth)
    w = truth.verdicts[i].witness
    pair = next(p for p, (kind, seed) in searched if (kind, seed) == (w["sampler"], w["seed"]))
    enc = encode_pairs(circuit, [pair])
    reference = encode_pairs(circuit, [p for p, _ in searched[:MEAN_REFERENCE]]).clean
    return EdgePatcher(circuit.model, truth.graph, circuit.layout, enc.sequence, enc.clean, enc.corrupted,
                       reads=enc.reads, ablation=truth.ablation, metric="l2", reference=reference)


def graph_connected(graph: CircuitGraph) -> np.ndarray:
    """Per candidate: whether its source writes some subspace its port reads, constants included (the
    weights-only baseline's guess)."""
    return np.array([bool(graph.io.writes[e.src] & graph.io.reads[(e.dst, e.port)]) for e in graph.edges])
