"""Scoring discovered edges against a ground truth as the field does, edge- and node-level, with baselines.

Every method's output is read as a *family of subgraphs*: ACDC's kept edges at each threshold of its sweep, or, for
a method that scores edges (EAP, EAP-IG, a plug-in), the edges scoring at least ``t`` for every distinct score
``t`` (tied edges enter together) and the empty subgraph. Each subgraph is one ROC point (its false- and true-positive
rates over the *decided* edges: the ground truth's undecided edges are left out) and one precision-recall point.

* **Monotone envelope**: the points sorted by FPR (then TPR), each point dropped whose TPR is below that of a point
  kept before it, between (0, 0) and (1, 1) — what InterpBench's ``make_monotonically_increasing`` keeps. A
  threshold sweep need not be monotone (ACDC's subgraphs at two thresholds are not nested); a score's thresholds are.
* ``auroc``: the trapezoid area under the envelope; ``auroc_raw``: under all points, unsorted by monotony (what
  this project reported before: a non-monotone sweep zig-zags, and its area means nothing).
* ``step_auc``: the "pessimistic" area of ACDC's and InterpBench's code, ``sum_i (1 - x_i) (y_i - y_(i-1))`` over
  the envelope: every rise in TPR is counted from its FPR onward, as if the false positives came first. A tie of
  scores is therefore a step to the right, then up (the trapezoid counts it as a diagonal).
* ``auprc``: average precision, ``sum_i (r_i - r_(i-1)) p_i`` over the subgraphs sorted by recall (for a score's
  thresholds this is scikit-learn's ``average_precision_score``; tests/unit/test_discovery_scoring.py checks it).

**Nodes** (heads and MLPs): a node is in the truth when one of its edges is; it is kept when one of its edges is;
its score is the largest of its edges'. **Baselines**, scored the same way against the same truth:
``random`` (independent uniform scores, :data:`RANDOM_DRAWS` draws: mean and spread) and ``weights-only`` (1 for
an edge whose source writes a subspace its port reads, constants included, else 0: no data at all).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from jaxtyping import Bool, Float

FOUND, MISSED, SPURIOUS, ABSENT = "found", "missed", "spurious", "absent"
#: The area metrics, in the order tables print them.
CURVE_METRICS: tuple[str, ...] = ("step_auc", "auroc", "auprc", "auroc_raw")
RANDOM_DRAWS = 200


def rates(kept: np.ndarray, truth: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(fpr, tpr)`` of each subgraph ``kept[r]`` (boolean ``(R, E)``) against ``truth`` (``(E,)``)."""
    kept, truth = np.atleast_2d(np.asarray(kept, dtype=bool)), np.asarray(truth, dtype=bool)
    if truth.all() or not truth.any():
        raise ValueError("the ground truth needs edges in and out of the circuit for a ROC curve")
    tpr = (kept & truth).sum(axis=1) / truth.sum()
    fpr = (kept & ~truth).sum(axis=1) / (~truth).sum()
    return fpr, tpr


def curve_from_subgraphs(kept: np.ndarray, truth: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """All the subgraphs' ROC points, sorted by FPR then TPR, between (0, 0) and (1, 1)."""
    fpr, tpr = rates(kept, truth)
    pts = sorted({(0.0, 0.0), (1.0, 1.0), *zip(fpr.tolist(), tpr.tolist())})
    return np.array([p[0] for p in pts]), np.array([p[1] for p in pts])


def monotone_envelope(fpr: Float[np.ndarray, " R"], tpr: Float[np.ndarray, " R"]) -> tuple[np.ndarray, np.ndarray]:
    """The points (sorted by FPR then TPR) whose TPR no earlier kept point exceeds, from (0, 0) to (1, 1)."""
    order = np.lexsort((tpr, fpr))
    xs, ys = [0.0], [0.0]
    for x, y in zip(np.asarray(fpr)[order], np.asarray(tpr)[order]):
        if y >= ys[-1]:
            xs.append(float(x))
            ys.append(float(y))
    if (xs[-1], ys[-1]) != (1.0, 1.0):
        xs.append(1.0)
        ys.append(1.0)
    return np.array(xs), np.array(ys)


def _trapezoid(xs, ys) -> float:
    return float(np.sum(np.diff(xs) * (ys[1:] + ys[:-1]) / 2))


def step_auc(xs: Float[np.ndarray, " n"], ys: Float[np.ndarray, " n"]) -> float:
    """ACDC's and InterpBench's pessimistic area of a monotone curve: ``sum (1 - x_i) (y_i - y_(i-1))``."""
    return float(np.sum((1.0 - xs[1:]) * np.diff(ys)))


def auc_from_subgraphs(kept: np.ndarray, truth: np.ndarray) -> float:
    """Trapezoid area under all the subgraphs' points (``auroc_raw``)."""
    return _trapezoid(*curve_from_subgraphs(kept, truth))


def subgraphs_from_scores(scores: Float[np.ndarray, " E"]) -> Bool[np.ndarray, "R E"]:
    """``(R, E)``: the edges scoring at least each distinct score (highest first), after the empty subgraph."""
    scores = np.nan_to_num(np.asarray(scores, dtype=float), nan=-np.inf)
    levels = np.unique(scores)[::-1]
    return np.vstack([np.zeros(len(scores), dtype=bool), scores[None, :] >= levels[:, None]])


def average_precision(kept: Bool[np.ndarray, "R E"], truth: Bool[np.ndarray, " E"]) -> float:
    """``sum_i (r_i - r_(i-1)) p_i`` over the non-empty subgraphs sorted by recall (then precision, highest first)."""
    kept, truth = np.atleast_2d(np.asarray(kept, dtype=bool)), np.asarray(truth, dtype=bool)
    size = kept.sum(axis=1)
    kept = kept[size > 0]
    tp = (kept & truth).sum(axis=1)
    recall, precision = tp / truth.sum(), tp / kept.sum(axis=1)
    order = np.lexsort((-precision, recall))
    r, p = recall[order], precision[order]
    return float(np.sum(np.diff(np.concatenate([[0.0], r])) * p))


def curve_metrics(kept: Bool[np.ndarray, "R E"], truth: Bool[np.ndarray, " E"]) -> dict[str, float]:
    """:data:`CURVE_METRICS` of a family of subgraphs ``(R, E)`` against ``truth``; NaN when the truth holds every
    item or none (no curve: at node level, when every head and MLP has an edge in the truth)."""
    if truth.all() or not truth.any():
        return {m: float("nan") for m in CURVE_METRICS}
    fpr, tpr = rates(kept, truth)
    xs, ys = monotone_envelope(fpr, tpr)
    return {"step_auc": step_auc(xs, ys), "auroc": _trapezoid(xs, ys), "auprc": average_precision(kept, truth),
            "auroc_raw": auc_from_subgraphs(kept, truth)}


def node_family(kept: np.ndarray, incidence: np.ndarray) -> np.ndarray:
    """``(R, N)``: a node is kept when one of its edges is (``incidence``: ``(E, N)`` boolean)."""
    return (np.atleast_2d(kept).astype(np.float64) @ incidence) > 0


@dataclass(frozen=True)
class PrecisionRecall:
    precision: float
    recall: float
    found: int
    missed: int
    spurious: int

    def to_dict(self) -> dict:
        """JSON-safe: an undefined precision (nothing claimed) or recall is ``None``."""
        def num(x):
            return None if x != x else x
        return {"precision": num(self.precision), "recall": num(self.recall), "found": self.found,
                "missed": self.missed, "spurious": self.spurious}


def precision_recall(kept: np.ndarray, truth: np.ndarray) -> PrecisionRecall:
    """Of one subgraph; precision of an empty subgraph is NaN (nothing was claimed), never 0 or 1."""
    kept, truth = np.asarray(kept, dtype=bool), np.asarray(truth, dtype=bool)
    tp, fp, fn = int((kept & truth).sum()), int((kept & ~truth).sum()), int((~kept & truth).sum())
    precision = tp / (tp + fp) if tp + fp else float("nan")
    recall = tp / (tp + fn) if tp + fn else float("nan")
    return PrecisionRecall(precision, recall, tp, fn, fp)


def edge_status(kept: np.ndarray, truth: np.ndarray) -> list[str]:
    """Per edge: found (in both), missed (truth only), spurious (discovered only) or absent (neither)."""
    return [FOUND if k and t else MISSED if t else SPURIOUS if k else ABSENT
            for k, t in zip(np.asarray(kept, dtype=bool), np.asarray(truth, dtype=bool))]


def top_k(scores: np.ndarray, k: int) -> np.ndarray:
    """The subgraph of the ``k`` highest scores (ties broken by edge order); a score of exactly 0 never counts."""
    scores = np.asarray(scores, dtype=float)
    order = np.argsort(-scores, kind="stable")[:k]
    kept = np.zeros(len(scores), dtype=bool)
    kept[order] = True
    return kept & (scores > 0)


@dataclass
class Scored:
    """A family of subgraphs scored against a truth: edge- and node-level :data:`CURVE_METRICS`, the ROC
    envelope, and the reported subgraph's precision and recall."""

    edges: dict[str, float]
    nodes: dict[str, float]
    fpr: np.ndarray
    tpr: np.ndarray
    reported: PrecisionRecall

    def to_dict(self) -> dict:
        return {"edges": self.edges, "nodes": self.nodes, "roc": {"fpr": self.fpr.tolist(), "tpr": self.tpr.tolist()},
                "reported": self.reported.to_dict()}


def score_family(kept: Bool[np.ndarray, "R E"], reported: Bool[np.ndarray, " E"], truth: Bool[np.ndarray, " E"],
                 decided: Bool[np.ndarray, " E"], incidence: Bool[np.ndarray, "E N"]) -> Scored:
    """Score subgraphs ``kept`` ``(R, E)`` and the one ``reported`` ``(E,)`` against ``truth`` on the ``decided``
    edges (and on nodes, through ``incidence`` ``(E, N)``)."""
    kept = np.atleast_2d(kept)
    t, k, inc = truth[decided], kept[:, decided], incidence[decided]
    fpr, tpr = monotone_envelope(*rates(k, t))
    return Scored(curve_metrics(k, t), curve_metrics(node_family(k, inc), node_family(t, inc)[0]), fpr, tpr,
                  precision_recall(reported[decided], t))


def baselines(truth: Bool[np.ndarray, " E"], decided: Bool[np.ndarray, " E"], connected: Bool[np.ndarray, " E"],
              incidence: Bool[np.ndarray, "E N"], draws: int = RANDOM_DRAWS, seed: int = 0) -> dict[str, dict]:
    """``{"random": {"edges": {metric: (mean, std)}, "nodes": ...}, "weights-only": Scored}``."""
    rng = np.random.default_rng(seed)
    runs = []
    for _ in range(draws):
        scores = rng.random(len(truth))
        runs.append(score_family(subgraphs_from_scores(scores), top_k(scores, int(truth[decided].sum())), truth,
                                 decided, incidence))
    spread = {level: {m: (float(np.mean([getattr(r, level)[m] for r in runs])),
                          float(np.std([getattr(r, level)[m] for r in runs]))) for m in CURVE_METRICS}
              for level in ("edges", "nodes")}
    if not runs:
        spread = {level: {m: (float("nan"), float("nan")) for m in CURVE_METRICS} for level in ("edges", "nodes")}
    weights = connected.astype(float)
    return {"random": spread,
            "weights-only": score_family(subgraphs_from_scores(weights), connected, truth, decided, incidence)}
