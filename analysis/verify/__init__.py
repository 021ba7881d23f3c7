"""Verification: is a run its reference's? One report type per meaning of "verified"; each returns, never asserts.

* **Lloyd's circuit and its variants**, layer by layer: :func:`verify_problem` (:mod:`analysis.verify.procedure`,
  stages in :mod:`~analysis.verify.problem` and :mod:`~analysis.verify.steps`) returns a
  :class:`VerificationReport` (:mod:`analysis.verify.report`): VERIFIED means every block's output is the
  reference step on its decoded input and the run follows the reference trajectory (every label the reference's,
  decided by the circuit's dtype; every centroid within the stated tolerance). :mod:`analysis.verify.checks` holds
  its comparisons (tie windows, one assignment against its reference, certificates).
* **The safeguarded-swap construction**, step by step: :func:`verify_swap` (:mod:`analysis.verify.swap`) returns a
  :class:`SwapReport`: VERIFIED means the same candidate kept at every step and every centroid within
  ``CENTROID_TOLERANCE`` of the data's spread of its numpy reference's.
* **Export parity of a trained model**: :func:`check_export` (:mod:`analysis.verify.export`) returns an
  :class:`ExportParity`: VERIFIED means the exported ``HookedTransformer``'s centroids agree with the training
  forward's within the derived export tolerance.
"""

from analysis.verify.checks import (
    circuit_converged, circuit_n_iter, distance_uncertainty, make_reference, reference_trace, resolution_window,
)
from analysis.verify.procedure import reads, verify, verify_problem
from analysis.verify.report import (
    Check, IterationRecord, Mismatch, MismatchKind, Tie, Tolerances, VerificationReport, tolerances, verdict_of,
)
from analysis.verify.swap import SwapReport, verify_swap

__all__ = [
    "Check", "ExportParity", "IterationRecord", "MismatchKind", "Mismatch", "SwapReport", "Tie", "Tolerances", "VerificationReport",
    "check_export", "circuit_converged", "circuit_n_iter", "distance_uncertainty", "make_reference", "reads",
    "reference_trace",
    "resolution_window", "tolerances", "verdict_of", "verify", "verify_problem", "verify_swap",
]


def __getattr__(name: str):
    # Export parity needs torch and the trained model's module; a Lloyd's run that only verifies should not load them.
    if name in ("ExportParity", "check_export"):
        from analysis.verify import export

        return getattr(export, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
