"""The safeguarded-swap construction as users run it: one problem, verified against its numpy reference and
compared with Lloyd's (``cluster --construction swap``), and held-out tasks, as a general model
(``evaluate --construction swap``).

The construction (:mod:`circuits.swap`) is built per shape ``(d, k)`` and number of steps and cached, like the
Lloyd circuits of the estimator. *Verified* is :class:`analysis.verify.swap.SwapReport`'s contract: the
transformer's result *is* its reference's (:func:`circuits.swap.reference.safeguarded_swap` without a tie-break)
at every step, the same state kept and every centroid coordinate within its column's tolerance
(:func:`analysis.verify.swap.column_tolerances`); a difference the circuit's tie-break explains is NOT VERIFIED with
that cause. Lloyd's
(:func:`circuits.reference.lloyd`, from the same initial centroids) is the yardstick the construction is meant to
beat, never to match. ``CENTROID_TOLERANCE``, ``spread`` and ``differences`` live in :mod:`analysis.verify.swap`
and are importable from here as before; what this construction shares with the learned one (paths, the
document, the diagnostics, the evaluation's model) lives in :mod:`analysis.constructions.common` and is importable from here.
"""

from __future__ import annotations

import functools

import numpy as np
from jaxtyping import Float

from analysis.constructions.common import (CAPACITY, ConstructionConfig, ConstructionModel, ConstructionResult,
                                   SwapPathUnavailable, choice_gap,
                                   cluster_document, label_agreement, path_for, run_on_path, sharpness_for,
                                   smallest_gap)
from analysis.verify.swap import CENTROID_TOLERANCE, differences, spread, verify_swap

__all__ = ["CAPACITY", "CENTROID_TOLERANCE", "CONSTRUCTIONS", "ConstructionConfig", "SwapModel",
           "SwapPathUnavailable", "choice_gap", "circuit_for", "cluster_with_swap", "run_swap", "differences", "label_agreement",
           "path_for", "run_on_path", "smallest_gap", "spread", "swap_circuit"]

#: The constructions ``--construction`` accepts: this one and the learned safeguarded swap (:mod:`analysis.constructions.learned`).
CONSTRUCTIONS = ("swap", "learned")


@functools.lru_cache(maxsize=16)
def swap_circuit(d: int, k: int, steps: int, beta: float, tie_break: float):
    from circuits.swap import build_swap_circuit

    return build_swap_circuit(d, k, steps, beta=beta, tie_break=tie_break)


def circuit_for(problems: list[tuple[np.ndarray, np.ndarray]], steps: int):
    """One circuit for ``problems`` (``[(X, C0), ...]`` of one shape) with its tie-break and beta chosen from their
    data as for Lloyd's circuit (:func:`analysis.constructions.common.sharpness_for`): the finest tie-break float64
    resolves on every one of them, and a beta that makes every larger gap hard. One far point makes the unit scale
    huge and the data's gaps tiny in it; a fixed tie-break would then decide labels the data does not tie."""
    from circuits.swap.layout import swap_layout

    d, k = problems[0][0].shape[1], problems[0][1].shape[0]
    sharp = sharpness_for(problems, swap_layout(d, k).d_model)
    return swap_circuit(d, k, steps, sharp.beta, sharp.tie_break)


def run_swap(X: Float[np.ndarray, "n d"], C0: Float[np.ndarray, "k d"], iterations: int, path: str = "auto"
             ) -> ConstructionResult:
    """Run the construction on one problem on ``path`` (:func:`run_on_path`), held to its reference; the circuit,
    the run, the check and the ``cluster --json`` document (:func:`analysis.constructions.common.cluster_document`)."""
    path_for(X.shape[0], C0.shape[0], path)  # refuse before building
    circ = circuit_for([(X, C0)], iterations)
    run = run_on_path(circ, X, C0, path)
    checked = verify_swap(run, X, C0, circ.knobs.select_margin, circ.user_tie_break(X, C0))
    doc = cluster_document(circ, run, checked, X, C0, "swap", "circuits/swap/reference.py")
    return ConstructionResult(circ, run, checked, doc, X, C0)


def cluster_with_swap(X: Float[np.ndarray, "n d"], C0: Float[np.ndarray, "k d"], iterations: int,
                      path: str = "auto") -> dict:
    """The ``cluster --json`` document of the construction on one problem (:func:`run_swap`)."""
    return run_swap(X, C0, iterations, path).doc


class SwapModel(ConstructionModel):
    """The construction in the general evaluation's place of a checkpoint (:mod:`analysis.evaluation`):
    per task, its centroids after every step; its readout agreement is the fraction of points whose nearest
    centroid is the same under the circuit's centroids and under its numpy reference's."""

    name = "swap"
    config = ConstructionConfig()

    def circuit(self, problems, steps: int):
        return circuit_for(problems, steps)

    def reference(self, circ, X, C0, steps: int):
        from circuits.swap.reference import safeguarded_swap

        return safeguarded_swap(X, C0, steps, circ.knobs.select_margin)
