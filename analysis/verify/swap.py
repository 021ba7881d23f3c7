"""Verification of the hand-built general constructions (the safeguarded swap and the learned safeguarded swap):
a run against its numpy reference, step by step.

Contract (what VERIFIED means for :class:`ConstructionReport`, also named :class:`SwapReport`): the transformer's
run *is* its reference's, the algorithm as specified (:func:`circuits.swap.reference.safeguarded_swap`, or
:func:`circuits.learned.reference.learned_swap` with the circuit's factors, without a tie-break: exact float
comparisons, the lower index on equality, the circuit's select margin), from the same initial centroids: at every step the same candidate
kept, and every centroid within :data:`CENTROID_TOLERANCE` of the data's spread (:func:`spread`) of the
reference's. When they differ but the reference given the circuit's own tie-break (``tie_break`` in the user's
squared units) agrees with the circuit, the circuit's tie-break decided something the data does not tie (a problem
too wide for its fixed knobs: one far point makes the unit scale huge): NOT VERIFIED, with that cause first among
the problems, never a silent pass.

This certifies the construction's output per step, not block by block (the Lloyd circuit's
:class:`~analysis.verify.report.VerificationReport` does that), and says nothing about how the result compares with
Lloyd's: Lloyd's is the yardstick the construction is meant to beat (:mod:`analysis.swap`), never to match.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from jaxtyping import Float

#: Centroids agree with the reference within this fraction of the data's spread (largest ``|x - mean|``).
CENTROID_TOLERANCE = 1e-9


def spread(X: Float[np.ndarray, "n d"]) -> float:
    """The data's spread, the scale of :data:`CENTROID_TOLERANCE`: the largest ``|x - mean|`` (1 if that is 0)."""
    return float(np.abs(X - X.mean(axis=0)).max()) or 1.0


def differences(run, ref, size: float) -> list[str]:
    """Where a circuit run and a reference trajectory part: a different candidate kept, or centroids farther
    apart than :data:`CENTROID_TOLERANCE` of the data's ``size``; empty when they agree at every step."""
    out = []
    for t in range(1, len(run.centroids)):
        error = float(np.abs(run.centroids[t] - ref.centroids[t]).max())
        if run.choices[t - 1] != ref.choices[t - 1]:
            out.append(f"step {t}: the circuit kept {run.choices[t - 1]!r}, the reference {ref.choices[t - 1]!r}")
        elif error > CENTROID_TOLERANCE * size:
            out.append(f"step {t}: centroids {error:.3g} from the reference's ({error / size:.3g} of the spread)")
    return out


@dataclass(frozen=True)
class ConstructionReport:
    """One construction's run held to its reference (module docstring: what VERIFIED means here).

    ``problems``: where the run parts from the reference (:func:`differences`), the tie-break cause first where it
    applies; empty when verified. ``reference``: the reference trajectory (centroids, choices, objectives per step).
    ``spread``: the data's spread the tolerance is relative to; ``tie_break``: the circuit's, in squared user units.
    """

    problems: list[str]
    reference: object
    spread: float
    tie_break: float

    @property
    def verified(self) -> bool:
        return not self.problems

    @property
    def tolerance(self) -> float:
        """The largest centroid error, in the user's units, that still agrees."""
        return CENTROID_TOLERANCE * self.spread


#: The name this report had when the swap was the only construction (kept: docs/swap.md shows it).
SwapReport = ConstructionReport


def verify_against(run, X: Float[np.ndarray, "n d"], reference: Callable[[float], object], tie_break: float
                   ) -> ConstructionReport:
    """Hold ``run`` to ``reference(0.0)`` (the reference trajectory, no tie-break); where they differ but
    ``reference(tie_break)`` (``tie_break`` in squared user units) agrees with the run, name that cause first."""
    size = spread(X)
    ref = reference(0.0)
    problems = differences(run, ref, size)
    if problems and not differences(run, reference(tie_break), size):
        problems.insert(0, f"cause tie-break: the circuit's tie-break, {tie_break:.3g} squared data units on this"
                           " problem, decides what the data does not tie (float64 cannot resolve the problem's"
                           " gaps at its scale); the reference given that tie-break agrees with the circuit")
    return ConstructionReport(problems, ref, size, tie_break)


def verify_swap(run, X: Float[np.ndarray, "n d"], C0: Float[np.ndarray, "k d"], select_margin: float,
                tie_break: float) -> ConstructionReport:
    """Hold ``run`` (a :class:`~circuits.swap.build.SwapCircuit` run from ``C0`` on ``X``) to its reference run with
    the circuit's ``select_margin``; ``tie_break`` (squared user units) names the cause where the run differs."""
    from circuits.swap.reference import safeguarded_swap

    steps = len(run.centroids) - 1
    return verify_against(run, X, lambda tb: safeguarded_swap(X, C0, steps, select_margin, tb), tie_break)


def verify_learned(run, X: Float[np.ndarray, "n d"], C0: Float[np.ndarray, "k d"], circuit) -> ConstructionReport:
    """Hold ``run`` (a :class:`~circuits.learned.build.LearnedCircuit` ``circuit``'s run from ``C0`` on ``X``) to
    :func:`~circuits.learned.reference.learned_swap` with the circuit's factors, margin and candidates."""
    from circuits.learned.reference import learned_swap
    from circuits.learned.stages import CIRCUIT_CANDIDATES

    steps = len(run.centroids) - 1

    def ref(tie_break: float):
        return learned_swap(X, C0, steps, circuit.alphas, circuit.knobs.select_margin, tie_break,
                            candidates=CIRCUIT_CANDIDATES)

    return verify_against(run, X, ref, circuit.user_tie_break(X, C0))
