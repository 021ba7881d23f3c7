"""One discovery: a circuit, clean/corrupted pairs, a method; scored against the circuit's ground truth.

:func:`discover` is the Python entry point (``kmeans-circuits discover`` calls it): it derives the graph
(:mod:`~analysis.discovery.graph`), encodes the pairs, runs the method on the circuit's ``HookedTransformer``
(:mod:`~analysis.discovery.acdc`, :mod:`~analysis.discovery.eap`) and scores the result
(:mod:`~analysis.discovery.scoring`). :func:`blobs_problem` makes the small test problems of the results table.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from analysis.discovery import scoring
from analysis.discovery.graph import CircuitGraph, circuit_graph

METHODS: tuple[str, ...] = ("acdc", "eap", "eap-ig")
#: The corruptions whose pairs keep the sequence layout of the clean problem (add-outlier adds a placeholder slot
#: and works too, as its own batch).
CORRUPTIONS: tuple[str, ...] = ("move-centroid", "move-point", "swap-centroids", "add-outlier")


@dataclass
class DiscoveryResult:
    """What one method found: per edge a score (EAP: |attribution|; ACDC: the largest swept threshold at which
    the edge survives, -1 if none), the subgraph it reports (``kept``), the ROC curve and area, and which circuit
    edges the pairs exercise at all (removing them alone changes the metric)."""

    method: str
    graph: CircuitGraph
    scores: np.ndarray
    kept: np.ndarray
    fpr: np.ndarray
    tpr: np.ndarray
    auroc: float
    exercised: np.ndarray
    threshold: float | None = None
    details: dict = field(default_factory=dict)

    @property
    def truth(self) -> np.ndarray:
        return self.graph.truth

    @property
    def auroc_exercised(self) -> float:
        """AUROC against the circuit edges these pairs exercise (NaN when they exercise all or none)."""
        if self.exercised.all() or not self.exercised.any():
            return float("nan")
        if self.method == "acdc":
            return scoring.auc_from_subgraphs(self.details["kept_sweep"], self.exercised)
        return scoring.auc_from_scores(self.scores, self.exercised)

    @property
    def pr(self) -> scoring.PrecisionRecall:
        return scoring.precision_recall(self.kept, self.truth)

    @property
    def status(self) -> list[str]:
        return scoring.edge_status(self.kept, self.truth)

    def to_dict(self) -> dict:
        pr = self.pr
        return {"method": self.method, "auroc": self.auroc, "threshold": self.threshold,
                "precision": pr.precision, "recall": pr.recall, "found": pr.found, "missed": pr.missed,
                "spurious": pr.spurious, "roc": {"fpr": self.fpr.tolist(), "tpr": self.tpr.tolist()},
                "auroc_exercised": self.auroc_exercised, "graph": self.graph.to_dict(),
                "details": {k: v for k, v in self.details.items() if k != "kept_sweep"},
                "edges": [{"edge": e.label, "score": float(s), "kept": bool(k), "in_circuit": bool(e.subspaces),
                           "exercised": bool(x), "status": st}
                          for e, s, k, x, st in zip(self.graph.edges, self.scores, self.kept, self.exercised,
                                                    self.status)]}


def blobs_problem(d: int, k: int, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``(X, C0)``: ``n`` points of ``k`` Gaussian blobs in ``d`` dimensions, ``k`` random data points as the
    initial centroids (scikit-learn's ``make_blobs`` and the project's random initialisation)."""
    from sklearn.datasets import make_blobs

    from circuits.initialisation import initial_centroids

    X, _ = make_blobs(n_samples=n, n_features=d, centers=k, cluster_std=1.5, random_state=seed)
    return X, initial_centroids(X, k, "random", seed=seed)


#: The two swap circuits: ``iterations`` is their number of steps (at least 1).
SWAP_CONSTRUCTIONS: tuple[str, ...] = ("swap", "learned")


def build_construction(name: str, d: int, k: int, iterations: int):
    """A construction by name: a variant of :mod:`circuits.variants` (``iterations`` Lloyd iterations) or one of
    :data:`SWAP_CONSTRUCTIONS` (``iterations`` steps; the learned swap with its checkpoint's factors)."""
    if name not in SWAP_CONSTRUCTIONS:
        from circuits.variants import get_variant

        return get_variant(name).build(d, k, iterations)
    if iterations < 1:
        raise ValueError(f"the {name} circuit needs at least one step, got {iterations}")
    if name == "swap":
        from circuits.swap.build import build_swap_circuit

        return build_swap_circuit(d, k, iterations)
    from circuits.learned.build import build_learned_circuit

    return build_learned_circuit(d, k, iterations)


def make_patcher(circuit, pairs, graph: CircuitGraph | None = None):
    from analysis.discovery.edges import EdgePatcher, stack_pairs
    from analysis.discovery.swap import is_swap, readout_positions, stack_swap_pairs

    graph = graph if graph is not None else circuit_graph(circuit)
    if is_swap(circuit):
        clean, corrupted, sequence = stack_swap_pairs(circuit, pairs)
        return EdgePatcher(circuit.model, graph, circuit.layout, sequence, clean, corrupted,
                           reads=readout_positions(sequence))
    clean, corrupted, sequence = stack_pairs(circuit, pairs)
    return EdgePatcher(circuit.model, graph, circuit.layout, sequence, clean, corrupted)


def discover(circuit, pairs, method: str = "acdc", threshold: float = 1e-3, thresholds=None, steps: int = 8,
             graph: CircuitGraph | None = None, patcher=None, group: bool = False,
             circuit_only_exercised: bool = False) -> DiscoveryResult:
    """Run ``method`` (``"acdc"``, ``"eap"`` or ``"eap-ig"``) on ``circuit`` with clean/corrupted ``pairs``
    (:mod:`analysis.patching.pairs`) and score it against the circuit's ground-truth graph.

    ACDC sweeps ``thresholds`` (default :data:`~analysis.discovery.acdc.DEFAULT_THRESHOLDS` plus ``threshold``)
    for the ROC curve and reports the subgraph at ``threshold``; EAP and EAP-IG (``steps`` interpolation steps)
    report the edges of the top scores, as many as the ground truth has. ``group``: ACDC tests the edges from one
    source into one destination node together (:func:`~analysis.discovery.acdc.acdc`);
    ``circuit_only_exercised``: measure which edges the pairs exercise on the circuit's edges only
    (:func:`~analysis.discovery.acdc.exercised_edges`).
    """
    from analysis.discovery.acdc import DEFAULT_THRESHOLDS, acdc, exercised_edges
    from analysis.discovery.eap import eap, eap_ig

    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; choose one of {', '.join(METHODS)}")
    patcher = patcher if patcher is not None else make_patcher(circuit, pairs, graph)
    graph = patcher.graph
    truth = graph.truth
    exercised = exercised_edges(patcher, circuit_only_exercised)
    if method == "acdc":
        sweep = np.unique(np.array([*(DEFAULT_THRESHOLDS if thresholds is None else thresholds), threshold]))
        result = acdc(patcher, sweep, group=group)
        chosen = int(np.flatnonzero(result.thresholds == threshold)[0])
        survives = np.where(result.kept, result.thresholds[:, None], -1.0)
        scores = survives.max(axis=0)
        fpr, tpr = scoring.curve_from_subgraphs(result.kept, truth)
        return DiscoveryResult(method, graph, scores, result.kept[chosen], fpr, tpr,
                               scoring.auc_from_subgraphs(result.kept, truth), exercised, threshold,
                               {"kept_sweep": result.kept, "forward_passes": result.runs, "grouped": group,
                                "thresholds": result.thresholds.tolist(),
                                "metric_at_threshold": result.metric[chosen].tolist()})
    raw = eap(patcher) if method == "eap" else eap_ig(patcher, steps)
    # A NaN attribution (an undefined gradient) ranks as no evidence; the count is reported.
    scores = np.nan_to_num(raw, nan=0.0)
    fpr, tpr = scoring.curve_from_scores(scores, truth)
    return DiscoveryResult(method, graph, scores, scoring.top_k(scores, int(truth.sum())), fpr, tpr,
                           scoring.auc_from_scores(scores, truth), exercised, None,
                           {"nan_scores": int(np.isnan(raw).sum()), **({"steps": steps} if method == "eap-ig" else {})})
