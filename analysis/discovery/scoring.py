"""Scoring discovered edges against the ground truth: ROC curves, AUROC, precision and recall.

Two kinds of method output: a *score* per edge (EAP, EAP-IG: rank edges, higher = more in the circuit), scored
with scikit-learn's ``roc_auc_score``/``roc_curve``; and a *family of subgraphs* (ACDC at each threshold of a
sweep), which gives one (FPR, TPR) point per threshold. For those, the area is the trapezoid area under the points
sorted by FPR with (0, 0) and (1, 1) added, as Conmy et al. (2023) score ACDC; for subgraphs that are thresholds
of one score the two areas agree (tests/unit/test_discovery.py checks it against ``roc_auc_score``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

FOUND, MISSED, SPURIOUS, ABSENT = "found", "missed", "spurious", "absent"


def rates(kept: np.ndarray, truth: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(fpr, tpr)`` of each subgraph ``kept[r]`` (boolean ``(R, E)``) against ``truth`` (``(E,)``)."""
    kept, truth = np.atleast_2d(np.asarray(kept, dtype=bool)), np.asarray(truth, dtype=bool)
    if truth.all() or not truth.any():
        raise ValueError("the ground truth needs edges in and out of the circuit for a ROC curve")
    tpr = (kept & truth).sum(axis=1) / truth.sum()
    fpr = (kept & ~truth).sum(axis=1) / (~truth).sum()
    return fpr, tpr


def curve_from_subgraphs(kept: np.ndarray, truth: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The ROC curve of a family of subgraphs: their points, sorted by FPR then TPR, between (0, 0) and (1, 1)."""
    fpr, tpr = rates(kept, truth)
    pts = sorted({(0.0, 0.0), (1.0, 1.0), *zip(fpr.tolist(), tpr.tolist())})
    return np.array([p[0] for p in pts]), np.array([p[1] for p in pts])


def auc_from_subgraphs(kept: np.ndarray, truth: np.ndarray) -> float:
    fpr, tpr = curve_from_subgraphs(kept, truth)
    return float(np.trapezoid(tpr, fpr)) if hasattr(np, "trapezoid") else float(np.trapz(tpr, fpr))


def curve_from_scores(scores: np.ndarray, truth: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    from sklearn.metrics import roc_curve

    fpr, tpr, _ = roc_curve(np.asarray(truth, dtype=bool), np.asarray(scores, dtype=float))
    return fpr, tpr


def auc_from_scores(scores: np.ndarray, truth: np.ndarray) -> float:
    from sklearn.metrics import roc_auc_score

    return float(roc_auc_score(np.asarray(truth, dtype=bool), np.asarray(scores, dtype=float)))


@dataclass(frozen=True)
class PrecisionRecall:
    precision: float
    recall: float
    found: int
    missed: int
    spurious: int


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
