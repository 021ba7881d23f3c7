"""What every construction shares as users run it, driven by its declaration
(:class:`~analysis.constructions.spec.ConstructionSpec`): one problem run and held to its reference
(:func:`run_construction`), and held-out tasks as a general model (:class:`ConstructionModel`).

Every construction is a circuit of :class:`circuits.swap.build.SwapCircuit`'s kind (one step's blocks run
``steps`` times, a choice among candidates per step) held to a numpy reference by :mod:`analysis.verify.swap`.
Here: the execution path a problem may take (:func:`path_for`, :func:`run_on_path`), the sharpness chosen from the
data (:func:`sharpness_for`), the ``cluster --json`` document (:func:`cluster_document`), the per-step diagnostics
(:func:`label_agreement`, :func:`smallest_gap`, :func:`choice_gap`) and the evaluation's model (the trajectory
protocol of :mod:`analysis.evaluation.protocol`). Nothing here names a construction: what differs is the
declaration's.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from jaxtyping import Float

from analysis.errors import ProblemError
from circuits import reference

#: The general evaluation draws its tasks as for a general checkpoint of this capacity (``d <= 64``, ``k <= 16``).
CAPACITY = (64, 16)


class SwapPathUnavailable(ProblemError):
    """The requested execution path cannot run this problem (the message says why; ``field`` is ``"path"`` where the
    path asked for is at fault)."""


def group_names(step_groups=None) -> tuple[str, ...]:
    """The centroid groups' names of a step's :class:`~circuits.swap.layout.StepGroups` (the swap's when ``None``),
    in the order the token sequence holds them."""
    if step_groups is None:
        from circuits.swap.layout import SWAP_GROUPS as step_groups
    return tuple(name for name, _, _ in step_groups.groups)


def _too_many(n: int, k: int, groups: tuple[str, ...]) -> str:
    from analysis.capture.run import DENSE_MAX_TOKENS
    from circuits.swap.layout import SwapSequence

    tokens = SwapSequence(n, k, groups).n_tokens
    return (f"{tokens} tokens is above the dense forward's limit of {DENSE_MAX_TOKENS} (a few (tokens)^2 float64"
            " matrices per layer)")


def path_for(n: int, k: int, path: str = "auto", step_groups=None) -> str:
    """The path to ask :meth:`SwapCircuit.run` for: ``path``, except structured only when the problem's tokens (a
    sequence of the centroid groups of ``step_groups``, a :class:`~circuits.swap.layout.StepGroups`, the swap's when
    ``None``) are above :data:`analysis.capture.DENSE_MAX_TOKENS`, where ``dense`` is refused
    (:class:`SwapPathUnavailable`)."""
    from analysis.capture.run import DENSE_MAX_TOKENS
    from circuits.swap.layout import SwapSequence

    groups = group_names(step_groups)
    if SwapSequence(n, k, groups).n_tokens <= DENSE_MAX_TOKENS:
        return path
    if path == "dense":
        raise SwapPathUnavailable(f"dense: {_too_many(n, k, groups)}", "path")
    return "structured"


def run_on_path(circ, X: Float[np.ndarray, "n d"], C0: Float[np.ndarray, "k d"], path: str):
    """``circ.run`` on ``path`` as :func:`path_for` says; a refusal of the structured path where the dense one may
    not run is :class:`SwapPathUnavailable`."""
    from circuits.structured import StructuredPathUnavailable

    n, k, groups = X.shape[0], C0.shape[0], group_names(circ.SPEC)
    asked = path_for(n, k, path, circ.SPEC)
    try:
        return circ.run(X, C0, path=asked)
    except StructuredPathUnavailable as exc:
        more = f"; and {_too_many(n, k, groups)}" if asked != path else ""
        raise SwapPathUnavailable(f"{exc}{more}") from None


def sharpness_for(problems: list[tuple[np.ndarray, np.ndarray]], d_model: int, reach: float = 1.0):
    """The tie-break and beta for ``problems`` (``[(X, C0), ...]`` of one shape) as for Lloyd's circuit
    (:func:`circuits.sharpness.for_problem`, on the construction's own unit scaling and width ``d_model``).

    ``reach``: how far beyond the unit ball, as a factor, the centroids the circuit assigns to may lie (1 for
    swap; ``max(1, 2 alpha - 1)`` for the learned swap's extrapolated centroids). The tie-break must stay above the
    rounding of scores ``reach^2`` times larger, so it is ``reach^2`` times coarser, and beta follows it."""
    from circuits.encoding import fit_unit_scaling
    from circuits.sharpness import TIE_BREAK_CAP, for_problem
    from circuits.swap.build import CENTRE

    d = problems[0][0].shape[1]
    units = []
    for X, C0 in problems:
        scaling = fit_unit_scaling(X, C0, CENTRE)  # as SwapCircuit.encode scales a problem
        units.append((scaling.to_unit(X)[0], scaling.to_unit(C0)[0]))
    sharp, _ = for_problem(units, d, d_model)
    if reach > 1.0:
        sharp, _ = for_problem(units, d, d_model, given={"tie_break": min(sharp.tie_break * reach**2,
                                                                          TIE_BREAK_CAP)})
    return sharp


def label_agreement(X: Float[np.ndarray, "n d"], A: Float[np.ndarray, "k d"], B: Float[np.ndarray, "k d"]) -> float:
    """The fraction of points whose nearest centroid has the same index in ``A`` and in ``B``."""
    return float((reference.assign(X, A) == reference.assign(X, B)).mean())


def smallest_gap(X: Float[np.ndarray, "n d"], C: Float[np.ndarray, "k d"]) -> float:
    """The smallest gap, over points, between the squared distances to their two nearest centroids."""
    two = np.sort(reference.sq_distances(X, C), axis=1)[:, :2]
    return float((two[:, 1] - two[:, 0]).min())


def choice_gap(objectives: Float[np.ndarray, " candidates"]) -> float | None:
    """How much larger the next candidate's objective was than the kept (least) one's, relative, the next being the
    best candidate whose objective differs from the kept one's (candidates with exactly the kept objective are
    :func:`tied_with` it, the tie order decided among them); ``None`` when every candidate had the same objective
    (a tie: the tie order decided, as the reference's does) or the kept one's is 0."""
    values = np.asarray(objectives, dtype=np.float64)
    values = values[np.isfinite(values)]
    low = values.min()
    above = values[values > low]
    return float((above.min() - low) / low) if above.size and low > 0 else None


def tied_with(objectives: Float[np.ndarray, " candidates"], names: list[str], kept: str) -> list[str]:
    """The other candidates whose objective equals the kept one's exactly (NaN: a candidate left out)."""
    values = dict(zip(names, np.asarray(objectives, dtype=np.float64).tolist()))
    return [name for name in names if name != kept and values[name] == values[kept]]


#: How pages and tables name each candidate: the safety nets are trajectories run beside the construction, and
#: "reference" alone would read as the numpy reference the run is verified against.
CANDIDATE_LABELS = {"lloyd": "Lloyd step", "swap": "swap step", "learned": "learned step",
                    "reference": "Lloyd's chain", "swap_reference": "swap's chain"}


def exact_lloyd(X: Float[np.ndarray, "n d"], C0: Float[np.ndarray, "k d"], iterations: int
                ) -> tuple[np.ndarray, np.ndarray, tuple[int, int]]:
    """Lloyd's algorithm in exact arithmetic at the data's precision (the reference Lloyd's circuit is held to:
    :mod:`analysis.verify.fast.certified`): the one Lloyd's reference the constructions are compared with.
    Returns the centroids ``[iterations + 1, k, d]`` (``[0] = C0``, then the exact means correctly rounded), the
    objectives at each ``t`` (of the nearest centroid, in float64) and how many assignments float64's argmin
    (:func:`circuits.reference.assign`) would have made otherwise: ``(ties, decided)``, those of points tied at the
    data's precision and those exact arithmetic decides the other way."""
    from analysis.verify.fast.certified import certified_run

    X = np.asarray(X, dtype=np.float64)
    run = certified_run(reference.Reference(), X, np.asarray(C0, dtype=np.float64), iterations)
    cents = run.trace.centroids
    tied = decided = 0
    for t in range(iterations):
        differ = np.flatnonzero(reference.assign(X, cents[t]) != run.trace.assignments[t])
        at_tie = np.isin(differ, [tie.point for tie in run.ties[t]])
        tied, decided = tied + int(at_tie.sum()), decided + int((~at_tie).sum())
    return cents, np.array([reference.objective(X, C) for C in cents]), (tied, decided)


def chain_notes(per_iteration: list[dict], names: list[str], problems: list[str]) -> list[str]:
    """Where the circuit named another kept candidate than the reference for the same state (``problems``: the
    run's, which name the steps where the state differs), and where a candidate the circuit did not keep differs
    from the reference's by more than 1e-9 relative: named,
    since the verdict holds only the kept candidate to the reference. On iris (k = 3, seed 0) the circuit's Lloyd's
    candidates send two ties at the data's precision (float64 gaps 4.9e-32 and 3.6e-16) to the lower index by its
    tie-break, where the reference's float64 comparison orders them the other way."""
    out = []
    for rec in per_iteration:
        named = f"step {rec['iteration']}: the circuit kept"
        if rec["choice"] != rec["reference_choice"] and not any(p.startswith(named) for p in problems):
            out.append(f"{named} {CANDIDATE_LABELS[rec['choice']]}, the reference"
                       f" {CANDIDATE_LABELS[rec['reference_choice']]}: the same centroids (equal objectives; the"
                       " circuit's rounding of them exceeds the select margin, so it named the other)")
        for c in names:
            got, want = rec["candidate_objectives"][c], rec["reference_candidate_objectives"][c]
            if c != rec["choice"] and np.isfinite(want) and abs(got - want) > 1e-9 * max(abs(want), 1e-300):
                out.append(f"step {rec['iteration']}: the circuit's {CANDIDATE_LABELS[c]} candidate (not kept, so the"
                           f" result is unaffected) has objective {got:.10g}, the reference's {want:.10g}")
    return out


def cluster_document(circ, run, checked, X: Float[np.ndarray, "n d"], C0: Float[np.ndarray, "k d"],
                     construction) -> dict:
    """The ``cluster --json`` document of a ``construction``'s (its declaration's) ``run`` on one problem, held to
    its reference by ``checked`` (a :class:`~analysis.verify.swap.ConstructionReport`) and compared with Lloyd's
    from ``C0`` (:func:`exact_lloyd`); ``variant`` is ``construction:<name>``. Step ``t`` (``iteration``) is the
    state after ``t`` updates, ``t = 0`` the start."""
    from analysis.verify.swap import CENTROID_TOLERANCE, MAGNITUDE_ULPS
    from analysis.verify.verdict import alterations_named

    iterations = len(run.centroids) - 1
    tie_break = checked.tie_break
    scale = float(np.sqrt(tie_break / circ.knobs.sharpness.tie_break))  # the encoder's unit scale
    ref = checked.reference
    lloyd_centroids, lloyd_objectives, differ = exact_lloyd(X, C0, iterations)
    names = [c for c, _ in circ.SPEC.candidates]
    ref_values = construction.reference_candidates(X, ref)
    per_iteration = []
    for t in range(1, iterations + 1):
        values = np.asarray(run.candidate_objectives[t - 1], dtype=np.float64)
        per_iteration.append({
            "iteration": t, "choice": run.choices[t - 1], "reference_choice": ref.choices[t - 1],
            "label_agreement": label_agreement(X, run.centroids[t], ref.centroids[t]),
            "max_centroid_error": float(np.abs(run.centroids[t] - ref.centroids[t]).max()),
            "objective_circuit": reference.objective(X, run.centroids[t]),
            "objective_reference": float(ref.objectives[t]),
            "objective_lloyd": float(lloyd_objectives[t]),
            # Every candidate's objective as the circuit computed it (its own averages over points), and as the
            # reference did where it keeps them all (the learned one's).
            "candidate_objectives": dict(zip(names, values.tolist())),
            "reference_candidate_objectives": {c: ref_values[t - 1][c] for c in names},
            # How far from a tie each hard decision of the step was (a margin near 0 is where a knob would matter):
            # beta times the smallest gap between a point's two nearest kept centroids, in the unit-scaled squared
            # distances the circuit compares (exp(-margin) bounds the weight of the runner-up), and how much better
            # the kept candidate's objective was than the next different one's, relative (the select margin is
            # 1e-10), with the candidates exactly as good (the tie order kept the first of them).
            "min_margin": circ.knobs.sharpness.beta * smallest_gap(X, run.centroids[t]) / scale**2,
            "choice_gap": choice_gap(values),
            "tied_with": tied_with(values, names, run.choices[t - 1]),
        })
    final = run.centroids[-1]
    inertia, lloyd_inertia = reference.objective(X, final), float(lloyd_objectives[-1])
    altered = run.alterations
    verdict = checked.verdict(construction.title, alterations_named(weight_edits=altered.weight_edits,
                                                                    added_hooks=altered.hooks))
    notes = [f"construction: 'verified' means the transformer equals its numpy reference"
             f" ({construction.reference_note}, no"
             " tie-break) at every step: the same candidate kept and every centroid coordinate within"
             f" {CENTROID_TOLERANCE:g} of its column's spread plus {MAGNITUDE_ULPS} float64 epsilons of its"
             " magnitude; objective_lloyd is Lloyd's from the same initial centroids in exact arithmetic at the data's"
             " precision (circuits/precision.py: the nearest centroid, the lowest index on a tie the data cannot"
             " decide, exact means, an empty cluster keeps its centroid), at t = the step's index"]
    if altered:
        notes.append(alterations_note(altered, construction.title))
    notes.extend(chain_notes(per_iteration, names, checked.problems))
    if sum(differ):
        causes = [text for count, text in zip(differ, (
            f"{differ[0]} tied at the data's precision and sent to the lower index",
            f"{differ[1]} decided otherwise by exact arithmetic")) if count]
        notes.append(f"Lloyd's: {sum(differ)} assignment(s) differ from float64's argmin (what the construction's"
                     f" own Lloyd's chain uses): {', '.join(causes)}")
    return {
        "variant": f"construction:{construction.name}", "k": int(C0.shape[0]), "iterations": iterations,
        "labels": [int(v) for v in reference.assign(X, final)], "centroids": final.tolist(),
        **verdict.to_dict(), "verified": checked.verified, "problems": checked.problems,
        "objective_start": reference.objective(X, C0), "per_iteration": per_iteration, "candidates": names,
        "candidate_labels": {c: CANDIDATE_LABELS[c] for c in names},
        "n": int(X.shape[0]), "d": int(X.shape[1]), "inertia": inertia, "lloyd_inertia": lloyd_inertia,
        "ratio_to_lloyd": reference.objective_ratio(inertia, lloyd_inertia), "knobs": circ.knobs.to_dict(),
        "centroid_tolerances": [float(v) for v in checked.tolerances],
        "tie_break_user_units": tie_break, "layers": circ.n_layers, "path": run.path, "path_note": run.path_note,
        # Only where the circuit that ran was not the construction as built (a run of the command line never is).
        **({"weight_edits": altered.weight_edits} if altered.edited else {}),
        **({"added_hooks": list(altered.hooks)} if altered.hooks else {}),
        "notes": notes,
    }


def alterations_text(altered) -> str:
    """What of a run (or of a circuit now) was not the construction as built, a
    :class:`circuits.swap.build.Alterations`, in words."""
    from analysis.verify.report import weight_edits_text

    parts = ([f"weights changed since the build ({weight_edits_text(altered.weight_edits)})"] if altered.edited
             else []) + ([f"hooks added on {', '.join(altered.hooks)}"] if altered.hooks else [])
    return "; ".join(parts) or "the construction as built"


def alterations_note(altered, title: str) -> str:
    """The document's note on a run whose circuit was not the construction as built."""
    return (f"altered: {alterations_text(altered)}. The run is held to {title}'s reference all the same; what the"
            " construction guarantees by its weights (never above Lloyd's chain) need not hold of this run")


@dataclass
class ConstructionResult:
    """One construction's run on one problem: its declaration, the circuit, its run, the run held to its reference
    (``checked``, a :class:`~analysis.verify.swap.ConstructionReport`) and the ``cluster --json`` document; what its
    page draws (:mod:`analysis.report.construction`)."""

    construction: object
    circuit: object
    run: object
    checked: object
    doc: dict
    X: np.ndarray
    C0: np.ndarray


def run_construction(construction, X: Float[np.ndarray, "n d"], C0: Float[np.ndarray, "k d"], iterations: int,
                     path: str = "auto", factors: Float[np.ndarray, " p"] | list[float] | None = None
                     ) -> ConstructionResult:
    """Run ``construction`` (its :class:`~analysis.constructions.spec.ConstructionSpec`) on one problem on ``path``
    (:func:`run_on_path`; a path that cannot run it is refused before anything is built), held to its reference:
    the circuit for this problem (its knobs from the data; a trained one's ``factors``, the shipped checkpoint's by
    default), the run, the check and the ``cluster --json`` document (:func:`cluster_document`, with what the
    construction adds)."""
    path_for(X.shape[0], C0.shape[0], path, construction.step_groups())  # refuse before building
    circ = construction.circuit_for([(X, C0)], iterations, factors)
    run = run_on_path(circ, X, C0, path)
    checked = construction.verify(run, X, C0, circ)
    doc = cluster_document(circ, run, checked, X, C0, construction)
    if construction.extend_document is not None:
        construction.extend_document(doc, circ, run)
    return ConstructionResult(construction, circ, run, checked, doc, X, C0)


@dataclass(frozen=True)
class ConstructionConfig:
    """What the general evaluation reads from a model's config: the capacity its tasks are drawn for."""

    d: int = CAPACITY[0]
    k: int = CAPACITY[1]
    general: bool = True


class ConstructionModel:
    """A construction in the general evaluation's place of a checkpoint (:mod:`analysis.evaluation`): per task,
    its centroids after every step; its readout agreement is the fraction of points whose nearest centroid is the
    same under the circuit's centroids and under its numpy reference's (without tie-break). ``factors``: a trained
    construction's (the shipped checkpoint's when ``None``)."""

    config = ConstructionConfig()

    def __init__(self, construction, factors: Float[np.ndarray, " p"] | list[float] | None = None):
        self.construction = construction
        if factors is None:
            factors = construction.factors()
        self.factors = None if factors is None else np.asarray(factors, dtype=np.float64).reshape(-1)

    @property
    def name(self) -> str:
        return self.construction.name

    def circuit(self, problems: list[tuple[np.ndarray, np.ndarray]], steps: int):
        """One circuit for a batch of problems of one shape."""
        return self.construction.circuit_for(problems, steps, self.factors)

    def reference(self, circ, X: Float[np.ndarray, "n d"], C0: Float[np.ndarray, "k d"], steps: int):
        """The reference run of ``circ`` on one problem, without tie-break."""
        return self.construction.reference_run(circ, X, C0, steps)

    def trajectory(self, X: Float[np.ndarray, "batch n d"], C0: Float[np.ndarray, "batch k d"], steps: int
                   ) -> tuple[np.ndarray, np.ndarray]:
        circ = self.circuit(list(zip(X, C0)), steps)
        cents, agree = [], []
        for x, c0 in zip(X, C0):
            run = circ.run(x, c0)
            ref = self.reference(circ, x, c0, steps)
            cents.append(run.centroids)
            agree.append([label_agreement(x, a, b) for a, b in zip(run.centroids, ref.centroids)])
        return np.stack(cents, axis=1), np.mean(agree, axis=0)
