"""Moved to the package :mod:`analysis.drift` (:mod:`~analysis.drift.weights`, :mod:`~analysis.drift.behaviour`,
:mod:`~analysis.drift.patterns`, :mod:`~analysis.drift.record`); kept for one release."""

from analysis.drift.assemble import construction_of
from analysis.drift.behaviour import ABLATION_GROUPS, Behaviour, ablations, behaviour, mean_ratio, stiffness_sweep
from analysis.drift.patterns import Patterns, attention_patterns
from analysis.drift.record import DriftAnalysis
from analysis.drift.summary import fmt as _fmt
from analysis.drift.weights import (
    BLOCK_NAMES, KNOB_DOCS, CircuitComparison, MLPRole, compare_circuit, compare_mlp, factored, subspace_blocks,
    unit_roles,
)

__all__ = [
    "ABLATION_GROUPS", "BLOCK_NAMES", "KNOB_DOCS", "Behaviour", "CircuitComparison", "DriftAnalysis", "MLPRole",
    "Patterns", "_fmt", "ablations", "attention_patterns", "behaviour", "compare_circuit", "compare_mlp",
    "construction_of", "factored", "mean_ratio", "stiffness_sweep", "subspace_blocks", "unit_roles",
]
