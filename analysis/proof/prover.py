"""Prove a circuit: run every obligation of its variant on its actual weights, then the hard-attention theorem.

:func:`prove_circuit` is the entry point: it looks the circuit's variant up in the registry
(:data:`~analysis.proof.registry.OBLIGATION_SETS`) and runs its prover, which checks the obligations layer by layer
and executes the theorem on top of them. The result is a :class:`~analysis.proof.report.ProofReport` whose ``ok``
is the one-bit verdict and whose rows say what was proven, how, and where it failed. A variant without an
obligation set gets one row saying why (:func:`without_obligations`).
"""

from __future__ import annotations

from analysis.proof.obligation import Obligation, Status
from analysis.proof.registry import OBLIGATION_SETS, NoObligations
from analysis.proof.report import ProofReport

__all__ = ["OBLIGATION_SETS", "NoObligations", "ProofReport", "prove_circuit", "without_obligations"]


def without_obligations(variant: str, d: int, k: int, entry: NoObligations | None) -> ProofReport:
    """The report of a variant without an obligation set: one row saying why (``N/A`` or ``NOT PROVEN``)."""
    entry = entry or NoObligations(f"no obligation set is registered for variant {variant!r}", True)
    status = Status.NOT_PROVEN if entry.exact else Status.NOT_APPLICABLE
    return ProofReport(variant, d, k, 0, [], {}, [Obligation(f"{variant}.exactness", "variant", entry.reason, status,
                                                           "none")])


def prove_circuit(circuit, examples: int = 1) -> ProofReport:
    """Prove ``circuit`` against the obligations of its variant."""
    prover = OBLIGATION_SETS.get(circuit.variant)
    if prover is None or isinstance(prover, NoObligations):
        return without_obligations(circuit.variant, circuit.layout.d, circuit.layout.k, prover)
    return prover(circuit, examples=examples)
