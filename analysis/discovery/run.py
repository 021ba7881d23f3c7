"""One discovery: a circuit, clean/corrupted pairs, a method, scored against the task's ground truth.

:func:`discover` is the Python entry point (``kmeans-circuits discover`` calls it): it derives the ground truth
of the pairs' corruption families under the chosen ablation (:mod:`~analysis.discovery.truth`), encodes the pairs
(:mod:`~analysis.discovery.family`), runs the method (:mod:`~analysis.discovery.methods`: a built-in or a
plug-in) on the circuit's ``HookedTransformer`` and scores it and the baselines
(:mod:`~analysis.discovery.scoring`). :func:`blobs_problem` is the blobs sampler of the families.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from analysis.discovery import scoring
from analysis.discovery.ablation import DEFAULT_ABLATION, DEFAULT_METRIC
from analysis.constructions import CONSTRUCTIONS
from analysis.discovery.graph import CircuitGraph, circuit_graph
from analysis.discovery.methods import METHODS, DiscoveryMethod, MethodOutput, Task, load_method, run_method
from analysis.discovery.truth import GroundTruth, derive_truth

#: The corruptions whose pairs keep the sequence layout of the clean problem (add-outlier adds a placeholder slot
#: and works too, as its own batch).
CORRUPTIONS: tuple[str, ...] = ("move-centroid", "move-point", "swap-centroids", "add-outlier")


def blobs_problem(d: int, k: int, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``(X, C0)``: ``n`` points of ``k`` Gaussian blobs in ``d`` dimensions, ``k`` random data points as the
    initial centroids (the ``blobs`` sampler of :func:`analysis.discovery.family.family_problem`)."""
    from analysis.discovery.family import family_problem

    return family_problem(d, k, n, seed, "blobs")


def build_construction(name: str, d: int, k: int, iterations: int):
    """A construction by name: a variant of :mod:`circuits.variants` (``iterations`` Lloyd iterations) or a
    construction of :data:`analysis.constructions.CONSTRUCTIONS` (``iterations`` steps, its default knobs; a
    trained one with its shipped factors)."""
    construction = CONSTRUCTIONS.get(name)
    if construction is None:
        from circuits.variants import get_variant

        return get_variant(name).build(d, k, iterations)
    if iterations < 1:
        raise ValueError(f"the {name} circuit needs at least one step, got {iterations}")
    return construction.build(d, k, iterations)


def construction_layers(name: str, iterations: int) -> int:
    """Blocks of a construction's circuit, read before building it (a variant: ``2 T + 2``; a construction of
    :data:`analysis.constructions.CONSTRUCTIONS`: its step's blocks times the steps)."""
    construction = CONSTRUCTIONS.get(name)
    return 2 * iterations + 2 if construction is None else construction.layers(iterations)


def construction_tokens(name: str, n: int, k: int) -> int:
    """Tokens of one problem's sequence, read before building: the sink, a token per point, and ``k`` centroid
    tokens per group of the step (one group for a variant; the swap's and the learned construction's name theirs)."""
    from analysis.constructions.common import group_names

    construction = CONSTRUCTIONS.get(name)
    groups = 1 if construction is None else len(group_names(construction.step_groups()))
    return 1 + n + groups * k


def make_patcher(circuit, pairs, graph: CircuitGraph | None = None, ablation: str = DEFAULT_ABLATION,
                 metric: str = "l2", drop_invisible: bool = False):
    """The :class:`~analysis.discovery.edges.EdgePatcher` of ``pairs`` on ``circuit`` (``mean``: over the pairs'
    clean inputs). A pair whose readout no ablation changes is refused
    (:class:`~analysis.discovery.edges.CorruptionInvisible`), or with ``drop_invisible`` left out; the patcher's
    ``pairs`` are those it holds."""
    from analysis.discovery.edges import CorruptionInvisible, EdgePatcher
    from analysis.discovery.family import encode_pairs

    graph = graph if graph is not None else circuit_graph(circuit)
    enc = encode_pairs(circuit, pairs)
    try:
        patcher = EdgePatcher(circuit.model, graph, circuit.layout, enc.sequence, enc.clean, enc.corrupted,
                              reads=enc.reads, ablation=ablation, metric=metric, reference=enc.clean)
    except CorruptionInvisible as exc:
        if not drop_invisible or exc.visible is None or not exc.visible.any():
            raise
        return make_patcher(circuit, [p for p, v in zip(pairs, exc.visible) if v], graph, ablation, metric)
    patcher.pairs = list(pairs)
    return patcher


def incidence(graph: CircuitGraph) -> tuple[list[str], np.ndarray]:
    """The heads and MLPs, and ``(E, N)``: which of them each edge touches (as source or destination)."""
    nodes = [n for n in graph.sources if n != "in"]
    index = {n: i for i, n in enumerate(nodes)}
    inc = np.zeros((len(graph.edges), len(nodes)), dtype=bool)
    for i, e in enumerate(graph.edges):
        for node in (e.src, e.dst):
            if node in index:
                inc[i, index[node]] = True
    return nodes, inc


@dataclass
class DiscoveryResult:
    """What one method found, scored: the family of subgraphs it yields (a threshold sweep, or its scores'
    thresholds), the subgraph it reports (``kept``), the edge- and node-level scores, the baselines, and the
    ground truth they are all scored against."""

    method: str
    graph: CircuitGraph
    ground_truth: GroundTruth
    output: MethodOutput
    family: np.ndarray
    kept: np.ndarray
    scored: scoring.Scored
    baselines: dict
    ablation: str
    metric: str
    exercised: np.ndarray | None = None
    details: dict = field(default_factory=dict)

    @property
    def scores(self) -> np.ndarray:
        return self.output.scores

    @property
    def truth(self) -> np.ndarray:
        return self.ground_truth.members

    @property
    def threshold(self) -> float | None:
        return self.output.threshold

    @property
    def auroc(self) -> float:
        return self.scored.edges["auroc"]

    @property
    def step_auc(self) -> float:
        return self.scored.edges["step_auc"]

    @property
    def fpr(self) -> np.ndarray:
        return self.scored.fpr

    @property
    def tpr(self) -> np.ndarray:
        return self.scored.tpr

    @property
    def pr(self) -> scoring.PrecisionRecall:
        return self.scored.reported

    @property
    def status(self) -> list[str]:
        return scoring.edge_status(self.kept, self.truth)

    def to_dict(self) -> dict:
        random, weights = self.baselines["random"], self.baselines["weights-only"]
        verdicts = self.ground_truth.verdicts
        return {"method": self.method, "ablation": self.ablation, "metric": self.metric, "threshold": self.threshold,
                **{m: self.scored.edges[m] for m in scoring.CURVE_METRICS}, **self.scored.reported.to_dict(),
                "scores": self.scored.to_dict(),
                "baselines": {"random": {level: {m: {"mean": mean, "std": std} for m, (mean, std) in metrics.items()}
                                         for level, metrics in random.items()},
                              "weights-only": weights.to_dict()},
                "ground_truth": self.ground_truth.to_dict(), "graph": self.graph.to_dict(),
                "details": self.output.details,
                "edges": [{"edge": e.label, "score": float(s), "kept": bool(k), "truth": v.status,
                           "reason": v.reason, "in_data_flow": bool(e.subspaces), "status": st,
                           **({} if self.exercised is None else {"exercised": bool(x)})}
                          for e, s, k, v, st, x in zip(self.graph.edges, self.scores, self.kept, verdicts, self.status,
                                                       self.exercised if self.exercised is not None
                                                       else [None] * len(verdicts))]}


def family_truth(circuit, graph: CircuitGraph, pairs, ablation: str, base: np.ndarray | None = None) -> GroundTruth:
    """The ground truth of the pairs' corruption families (their union when they are several), at their shape."""
    first = pairs[0]
    kinds = list(dict.fromkeys(p.kind for p in pairs))
    n, d, k = len(first.X_clean), first.d, first.k
    truths = [derive_truth(circuit, graph, kind, ablation, d, k, n, base) for kind in kinds]
    return truths[0] if len(truths) == 1 else GroundTruth.union(truths)


def truth_baselines(truth: GroundTruth) -> dict:
    """The random and weights-only baselines scored against ``truth`` (:func:`~analysis.discovery.scoring.baselines`)."""
    return scoring.baselines(truth.members, truth.decided, truth.weight_connected, incidence(truth.graph)[1])


def score(method: str, output: MethodOutput, truth: GroundTruth, ablation: str, metric: str,
          exercised: np.ndarray | None = None, baselines: dict | None = None) -> DiscoveryResult:
    """Score a method's output against ``truth`` (and the baselines against the same truth, unless given)."""
    graph = truth.graph
    members, decided = truth.members, truth.decided
    _, inc = incidence(graph)
    family = output.subgraphs if output.subgraphs is not None else scoring.subgraphs_from_scores(output.scores)
    kept = output.reported if output.reported is not None else scoring.top_k(output.scores, int(members.sum()))
    scored = scoring.score_family(family, kept, members, decided, inc)
    base = baselines if baselines is not None else truth_baselines(truth)
    return DiscoveryResult(method, graph, truth, output, family, kept, scored, base, ablation, metric, exercised)


def discover(circuit, pairs, method: str | DiscoveryMethod = "acdc", threshold: float = 1e-3, thresholds=None, steps: int = 8,
             graph: CircuitGraph | None = None, patcher=None, group: bool = False, ablation: str = DEFAULT_ABLATION,
             metric: str = DEFAULT_METRIC, truth: GroundTruth | None = None, base: np.ndarray | None = None,
             exercised: bool = False, baselines: dict | None = None) -> DiscoveryResult:
    """Run ``method`` (a name of :data:`~analysis.discovery.methods.METHODS`, ``"module:function"``, or a
    callable following :class:`~analysis.discovery.methods.DiscoveryMethod`) on ``circuit`` with clean/corrupted
    ``pairs`` (:mod:`analysis.patching.pairs`) and score it against the ground truth of their corruption families
    under ``ablation`` (derived unless ``truth`` is given; ``base``: the points the families draw from, for a
    dataset; ``baselines``: :func:`truth_baselines` of ``truth``, when already computed).

    ACDC sweeps ``thresholds`` (default :data:`~analysis.discovery.acdc.DEFAULT_THRESHOLDS` plus ``threshold``)
    and reports the subgraph at ``threshold``; EAP and EAP-IG (``steps`` interpolation steps) report the edges of
    the top scores, as many as the ground truth has. ``group``: ACDC tests the edges from one source into one
    destination node together. ``exercised``: also measure which edges the pairs exercise (removing the edge
    alone changes the metric on some pair), a property of the data reported beside the scores.
    """
    from analysis.discovery.acdc import exercised_edges

    name = method if isinstance(method, str) else getattr(method, "__name__", "plug-in")
    fn = load_method(method) if isinstance(method, str) else method
    if patcher is None:
        patcher = make_patcher(circuit, pairs, graph, ablation, metric)
    graph = patcher.graph
    if truth is None:
        truth = family_truth(circuit, graph, pairs, patcher.ablation, base)
    output = run_method(fn, Task(patcher, threshold, thresholds, steps, group), name)
    return score(name, output, truth, patcher.ablation, patcher.metric_name,
                 exercised_edges(patcher) if exercised else None, baselines)


__all__ = ["CORRUPTIONS", "METHODS", "DiscoveryResult", "blobs_problem", "build_construction", "discover",
           "family_truth", "make_patcher", "score"]
