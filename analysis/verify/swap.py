"""Verification of the hand-built general constructions (the safeguarded swap and the learned safeguarded swap):
a run against its numpy reference, step by step.

Contract (what VERIFIED means for :class:`ConstructionReport`, also named :class:`SwapReport`): the transformer's
run *is* its reference's, the algorithm as specified (:func:`circuits.swap.reference.safeguarded_swap`, or
:func:`circuits.learned.reference.learned_swap` with the circuit's factors, without a tie-break: exact float
comparisons, the lower index on equality, the circuit's select margin), from the same initial centroids: at every step the same candidate
kept, and every centroid coordinate within its column's tolerance of the reference's (:func:`column_tolerances`:
:data:`CENTROID_TOLERANCE` of that column's spread, plus :data:`MAGNITUDE_ULPS` float64 epsilons of that column's
magnitude, the term Lloyd's verifier has in the data's magnitude, :func:`analysis.verify.report.tolerances`). Per
column, because one number is set by the widest column: with one column at 1e8 and another at 1e-8 it would
swallow any error in the small one, and with a large common offset (1e8 + small values) a tolerance in the spread
alone is below one ulp of the data, where the circuit's correctly rounded mean and the reference's summed one
differ by an ulp. When they differ but the reference given the circuit's own tie-break (``tie_break`` in the user's
squared units) agrees with the circuit, the circuit's tie-break decided something the data does not tie (a problem
too wide for its fixed knobs: one far point makes the unit scale huge): NOT VERIFIED, with that cause first among
the problems, never a silent pass.

This certifies the construction's output per step, not block by block (the Lloyd circuit's
:class:`~analysis.verify.report.VerificationReport` does that), and says nothing about how the result compares with
Lloyd's: Lloyd's is the yardstick the construction is meant to beat (:mod:`analysis.constructions.swap`), never to match.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from jaxtyping import Float

#: Centroids agree with the reference within this fraction of each column's spread (largest ``|x_m - mean_m|``).
CENTROID_TOLERANCE = 1e-9
#: ... plus this many float64 epsilons of each column's magnitude (largest ``|x_m|`` of the points and the start):
#: Lloyd's verifier's term in the data's magnitude (:func:`analysis.verify.report.tolerances`).
MAGNITUDE_ULPS = 64
#: How the verdict states that tolerance (:meth:`ConstructionReport.verdict`).
TOLERANCE_UNITS = f"of each column's spread, plus {MAGNITUDE_ULPS} float64 epsilons of its magnitude"


def spread(X: Float[np.ndarray, "n d"]) -> float:
    """The data's spread: the largest ``|x - mean|`` over all coordinates (1 if that is 0)."""
    return float(np.abs(X - X.mean(axis=0)).max()) or 1.0


def column_tolerances(X: Float[np.ndarray, "n d"], C0: Float[np.ndarray, "k d"]) -> Float[np.ndarray, " d"]:
    """Per column ``m``, the largest centroid error that still agrees: ``CENTROID_TOLERANCE * spread_m +
    MAGNITUDE_ULPS * eps * magnitude_m``, ``spread_m`` the largest ``|x_m - mean_m|`` of the points and
    ``magnitude_m`` the largest ``|x_m|`` of the points and the initial centroids (every centroid is a mean of
    points or a start)."""
    X, C0 = np.asarray(X, dtype=np.float64), np.asarray(C0, dtype=np.float64)
    spread_m = np.abs(X - X.mean(axis=0)).max(axis=0)
    magnitude = np.maximum(np.abs(X).max(axis=0), np.abs(C0).max(axis=0))
    return CENTROID_TOLERANCE * spread_m + MAGNITUDE_ULPS * np.finfo(np.float64).eps * magnitude


def differences(run, ref, tolerance: Float[np.ndarray, " d"],
                candidates_at: Callable[[int], dict[str, np.ndarray]] | None = None) -> list[str]:
    """Where a circuit run and a reference trajectory part: a different candidate kept, or a centroid coordinate
    farther from the reference's than its column's ``tolerance`` (:func:`column_tolerances`); empty when they
    agree at every step.

    ``candidates_at(t)``: the reference's candidates of step ``t`` by name. With it, a different name kept is no
    difference where the reference's candidate of that name *is* the kept state (every coordinate within its
    tolerance): two candidates with the same centroids have the same objective in exact arithmetic, the tie
    order names the first, and a circuit whose objectives round apart by more than the select margin may name the
    other; the state, which is what the run computes, is the same."""
    tolerance = np.broadcast_to(np.asarray(tolerance, dtype=np.float64), np.shape(run.centroids)[-1:])
    out = []
    for t in range(1, len(run.centroids)):
        error = np.abs(np.asarray(run.centroids[t]) - np.asarray(ref.centroids[t])).max(axis=0)
        over = np.flatnonzero(~(error <= tolerance))
        if run.choices[t - 1] != ref.choices[t - 1] and not _same_state(candidates_at, t, run.choices[t - 1],
                                                                        ref.centroids[t], tolerance):
            out.append(f"step {t}: the circuit kept {run.choices[t - 1]!r}, the reference {ref.choices[t - 1]!r}")
        elif over.size:
            m = int(over[np.argmax(error[over] / np.maximum(tolerance[over], 1e-300))])
            out.append(f"step {t}: centroids {error[m]:.3g} from the reference's in column {m} (its tolerance"
                       f" {tolerance[m]:.3g}" + (f"; {len(over)} columns over" if len(over) > 1 else "") + ")")
    return out


#: The largest relative difference between the circuit's and the reference's objective of one candidate that
#: :func:`choice_rounding` calls rounding (the circuit's relative rounding is about ``(d + log2 n) 2**-53`` of the
#: scale of its unit-scaled distances over their mean; far beyond it the two candidates are different centroids).
ROUNDING_MAX = 1e-6


def choice_rounding(run, ref, X: Float[np.ndarray, "n d"], candidates_at: Callable[[int], dict[str, np.ndarray]],
                    t: int) -> str | None:
    """The cause of a run that first parts from its reference at step ``t`` by keeping another candidate, where the
    reference's objectives of the two candidates are closer, relative, than twice the circuit's own objectives of
    them are off the reference's (the circuit's averages of unit-scaled squared distances round; the select margin
    should cover that and here does not), and that is at most :data:`ROUNDING_MAX`: ``cause choice within
    rounding``. ``None`` otherwise, or where the run holds no candidate objectives. Asked only where the tie-break
    does not explain the difference."""
    from circuits import reference as lloyd

    values = getattr(run, "candidate_objectives", None)
    kept, want = run.choices[t - 1], ref.choices[t - 1]
    if values is None:
        return None
    cands = candidates_at(t)
    names = list(cands)
    exact = {c: lloyd.objective(X, cands[c]) for c in (kept, want)}
    got = {c: float(np.asarray(values)[t - 1][names.index(c)]) for c in (kept, want)}
    size = max(exact.values()) or 1e-300
    gap = abs(exact[kept] - exact[want]) / size
    off = max(abs(got[c] - exact[c]) for c in (kept, want)) / size
    # Beyond ROUNDING_MAX the circuit's candidate is another state (an assignment decided otherwise), not a rounding.
    if gap > 2 * off or off > ROUNDING_MAX:
        return None
    return (f"cause choice within rounding: at step {t} the reference's objectives of {kept!r} and {want!r} differ"
            f" by {gap:.2g} relative, and the circuit's own objectives of them are off by up to {off:.2g} relative"
            " (its averages of unit-scaled squared distances round), so rounding decided the choice")


def _same_state(candidates_at, t: int, name: str, kept: np.ndarray, tolerance: np.ndarray) -> bool:
    if candidates_at is None:
        return False
    other = candidates_at(t).get(name)
    return other is not None and bool((np.abs(np.asarray(other) - kept).max(axis=0) <= tolerance).all())


@dataclass(frozen=True)
class ConstructionReport:
    """One construction's run held to its reference (module docstring: what VERIFIED means here).

    ``problems``: where the run parts from the reference (:func:`differences`), the tie-break cause first where it
    applies; empty when verified. ``reference``: the reference trajectory (centroids, choices, objectives per step).
    ``spread``: the data's spread; ``tie_break``: the circuit's, in squared user units; ``tolerances``: the
    largest centroid error per column, in the user's units, that still agrees (:func:`column_tolerances`).
    """

    problems: list[str]
    reference: object
    spread: float
    tie_break: float
    tolerances: np.ndarray | None = None

    @property
    def verified(self) -> bool:
        return not self.problems

    @property
    def tolerance(self) -> float:
        """The widest column's tolerance (:attr:`tolerances` holds each column's)."""
        return float(np.max(self.tolerances)) if self.tolerances is not None else CENTROID_TOLERANCE * self.spread

    def verdict(self, name: str, altered_by: list[str] | tuple[str, ...] = ()):
        """The run's verdict in the one vocabulary (:mod:`analysis.verify.verdict`): ``name`` (``"the safeguarded
        swap"``) matches its numpy reference, or NOT VERIFIED against it with the first problem as the cause and
        what changed the run (``altered_by``: :func:`analysis.verify.verdict.alterations_named`)."""
        from analysis.verify import verdict as vv

        if self.verified:
            return vv.matches_construction(name, CENTROID_TOLERANCE, TOLERANCE_UNITS)
        more = len(self.problems) - 1
        return vv.failure(self.problems[0] + (f" (and {more} more)" if more > 0 else ""),
                          reference=f"{name} (numpy reference)", altered_by=altered_by)


#: The name this report had when the swap was the only construction (kept: docs/swap.md shows it).
SwapReport = ConstructionReport


def verify_against(run, X: Float[np.ndarray, "n d"], C0: Float[np.ndarray, "k d"],
                   reference: Callable[[float], object], tie_break: float,
                   candidates: Callable[[object, int], dict[str, np.ndarray]] | None = None) -> ConstructionReport:
    """Hold ``run`` to ``reference(0.0)`` (the reference trajectory, no tie-break); where they differ but
    ``reference(tie_break)`` (``tie_break`` in squared user units) agrees with the run, name that cause first.
    ``candidates(ref, t)``: a reference trajectory's candidates of step ``t`` by name (:func:`differences`)."""
    tolerance = column_tolerances(X, C0)
    ref = reference(0.0)
    at = None if candidates is None else (lambda t: candidates(ref, t))
    problems = differences(run, ref, tolerance, at)
    first = re.match(r"step (\d+): the circuit kept", problems[0]) if problems and at is not None else None
    if problems and not differences(run, reference(tie_break), tolerance):
        problems.insert(0, f"cause tie-break: the circuit's tie-break, {tie_break:.3g} squared data units on this"
                           " problem, decides what the data does not tie (float64 cannot resolve the problem's"
                           " gaps at its scale); the reference given that tie-break agrees with the circuit")
    elif first:
        rounding = choice_rounding(run, ref, X, at, int(first.group(1)))
        if rounding is not None:
            problems.insert(0, rounding)
    problems.extend(getattr(run, "problems", []))  # what the circuit found about itself (LearnedRun: its reach)
    return ConstructionReport(problems, ref, spread(X), tie_break, tolerance)


def verify_swap(run, X: Float[np.ndarray, "n d"], C0: Float[np.ndarray, "k d"], select_margin: float,
                tie_break: float) -> ConstructionReport:
    """Hold ``run`` (a :class:`~circuits.swap.build.SwapCircuit` run from ``C0`` on ``X``) to its reference run with
    the circuit's ``select_margin``; ``tie_break`` (squared user units) names the cause where the run differs."""
    from circuits.swap.reference import CANDIDATES, safeguarded_swap, step_candidates

    steps = len(run.centroids) - 1

    def candidates(ref, t: int) -> dict[str, np.ndarray]:
        return dict(zip(CANDIDATES, step_candidates(X, ref.centroids[t - 1], ref.lloyd_centroids[t])))

    return verify_against(run, X, C0, lambda tb: safeguarded_swap(X, C0, steps, select_margin, tb), tie_break,
                          candidates)


def verify_learned(run, X: Float[np.ndarray, "n d"], C0: Float[np.ndarray, "k d"], circuit) -> ConstructionReport:
    """Hold ``run`` (a :class:`~circuits.learned.build.LearnedCircuit` ``circuit``'s run from ``C0`` on ``X``) to
    :func:`~circuits.learned.reference.learned_swap` with the circuit's factors, margin and candidates."""
    from circuits.learned.reference import alpha_at, learned_swap, safety_chains, step_candidates
    from circuits.learned.stages import CIRCUIT_CANDIDATES

    steps = len(run.centroids) - 1

    def ref(tie_break: float):
        return learned_swap(X, C0, steps, circuit.alphas, circuit.knobs.select_margin, tie_break,
                            candidates=CIRCUIT_CANDIDATES, chains=chains if tie_break == 0.0 else None)

    chains = safety_chains(X, C0, steps, circuit.knobs.select_margin)

    def candidates(trajectory, t: int) -> dict[str, np.ndarray]:
        return step_candidates(X, trajectory.centroids[t - 1], chains.lloyd_centroids[t], chains.centroids[t],
                               alpha_at(circuit.alphas, t - 1), CIRCUIT_CANDIDATES)

    return verify_against(run, X, C0, ref, circuit.user_tie_break(X, C0), candidates)
