"""Verification: is a circuit's run its reference algorithm's, layer by layer? Returns a report, never asserts.

:func:`verify_problem` (:mod:`analysis.verify.procedure`) is the one procedure for Lloyd's circuit and every
variant; :mod:`analysis.verify.checks` holds the comparisons (tie windows, one assignment against its reference,
certificates); :mod:`analysis.verify.report` the report it returns.
"""

from analysis.verify.checks import (
    circuit_converged, circuit_n_iter, distance_uncertainty, make_reference, reference_trace, resolution_window,
)
from analysis.verify.procedure import verify, verify_problem
from analysis.verify.report import (
    Check, IterationRecord, Mismatch, MismatchKind, Tie, Tolerances, VerificationReport, tolerances, verdict_text,
)

__all__ = [
    "Check", "IterationRecord", "MismatchKind", "Mismatch", "Tie", "Tolerances", "VerificationReport", "circuit_converged", "circuit_n_iter",
    "distance_uncertainty", "make_reference", "reference_trace", "resolution_window", "tolerances", "verdict_text",
    "verify", "verify_problem",
]
