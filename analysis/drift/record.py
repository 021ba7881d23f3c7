"""The drift analysis as one record: every measurement of :mod:`analysis.drift` (weights, behaviour, ablations,
stiffness sweep, attention patterns, training history) and the plain-words summary; the views
(:mod:`analysis.views.drift`) and the report (:mod:`analysis.report.drift`) read it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from analysis.drift.behaviour import Behaviour
from analysis.drift.patterns import Patterns
from analysis.drift.weights import CircuitComparison, MLPRole
from circuits.layout import ResidualLayout


@dataclass
class DriftAnalysis:
    config: dict
    layout: ResidualLayout
    circuits: list[CircuitComparison]
    mlps: list[MLPRole]
    knobs: dict[str, dict[str, float]]
    behaviour: Behaviour
    ablations: list[dict]
    sweep: list[dict]
    patterns: Patterns | None
    log: list[dict] = field(default_factory=list)
    summary: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {
            "circuits": [{"block": c.block, "which": c.which, "cosine": c.cosine, "rel_frobenius": c.rel_frobenius,
                          "top_blocks": [dict(zip(("rows", "cols", "trained", "construction", "change"), b))
                                         for b in c.blocks[:10]]} for c in self.circuits],
            "mlp_roles": [r.__dict__ for r in self.mlps],
            "knobs": self.knobs,
            "behaviour": self.behaviour.__dict__,
            "ablations": self.ablations,
            "stiffness_sweep": self.sweep,
            "summary": self.summary,
        }
