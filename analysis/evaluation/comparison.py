"""Model against Lloyd's, step by step, on one batch of tasks: the per-step record the evaluation reports.

:func:`compare` turns both trajectories (:class:`~analysis.evaluation.protocol.Trajectories`) into one
:class:`StepRecord` per step ``1..T``: both mean objectives, the mean, median and 95th percentile of the per-task
ratio model / Lloyd's, how often the model is better, worse or rising, ARI / NMI of both clusterings against the
truth, the readout agreement and the centroids that merged (:mod:`analysis.evaluation.metrics`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from analysis.evaluation.metrics import REL_TOL, agreement_scores, merged_pairs, nearest_labels, objectives
from analysis.evaluation.protocol import Trajectories


@dataclass
class StepRecord:
    step: int
    model_objective: float
    lloyd_objective: float
    ratio_mean: float
    ratio_median: float
    ratio_p95: float
    frac_model_better: float
    frac_model_worse: float
    frac_model_rises: float
    model_ari: float
    lloyd_ari: float
    model_nmi: float
    lloyd_nmi: float
    readout_agreement: float
    #: Mean number of centroid pairs closer than 1% of the data radius (centroids that have merged).
    model_merged_pairs: float = 0.0
    lloyd_merged_pairs: float = 0.0


@dataclass
class TaskEvaluation:
    """The comparison on a batch of held-out tasks; ``per_step[t - 1]`` is step ``t``."""

    description: dict
    per_step: list[StepRecord] = field(default_factory=list)

    @property
    def final(self) -> StepRecord:
        return self.per_step[-1]

    def to_dict(self) -> dict:
        return {**self.description, "per_step": [asdict(r) for r in self.per_step], "final": asdict(self.final)}


def compare(X: np.ndarray, truth: np.ndarray, traj: Trajectories, description: dict, rel_tol: float = REL_TOL) -> TaskEvaluation:
    """Per-step statistics from both trajectories. Ratios within ``rel_tol`` of 1 count as ties, not wins."""
    obj_model = objectives(X, traj.model)  # [T+1, batch]
    obj_lloyd = objectives(X, traj.lloyd)
    ratio = obj_model / obj_lloyd
    result = TaskEvaluation({**description, "tie_tolerance": rel_tol})
    for t in range(1, obj_model.shape[0]):
        m_ari, m_nmi = agreement_scores(nearest_labels(X, traj.model[t]), truth)
        l_ari, l_nmi = agreement_scores(nearest_labels(X, traj.lloyd[t]), truth)
        r = ratio[t]
        result.per_step.append(StepRecord(
            step=t,
            model_objective=float(obj_model[t].mean()),
            lloyd_objective=float(obj_lloyd[t].mean()),
            ratio_mean=float(r.mean()),
            ratio_median=float(np.median(r)),
            ratio_p95=float(np.quantile(r, 0.95)),
            frac_model_better=float((r < 1 - rel_tol).mean()),
            frac_model_worse=float((r > 1 + rel_tol).mean()),
            frac_model_rises=float((obj_model[t] > obj_model[t - 1] * (1 + rel_tol)).mean()),
            model_ari=m_ari, lloyd_ari=l_ari, model_nmi=m_nmi, lloyd_nmi=l_nmi,
            readout_agreement=float(traj.readout_agreement[t]),
            model_merged_pairs=merged_pairs(X, traj.model[t]), lloyd_merged_pairs=merged_pairs(X, traj.lloyd[t]),
        ))
    return result
