"""The safeguarded-swap construction as users run it: one problem, verified against its numpy reference and
compared with Lloyd's (``cluster --construction swap``), and held-out tasks, as a general model
(``evaluate --construction swap``).

The construction (:mod:`circuits.swap`) is built per shape ``(d, k)`` and number of steps and cached, like the
Lloyd circuits of the estimator. *Verified* is :class:`analysis.verify.swap.SwapReport`'s contract: the
transformer's result *is* its reference's (:func:`circuits.swap.reference.safeguarded_swap` without a tie-break)
at every step, the same candidate kept and every centroid within :data:`CENTROID_TOLERANCE` of the data's spread;
a difference the circuit's tie-break explains is NOT VERIFIED with that cause. Lloyd's
(:func:`circuits.reference.lloyd`, from the same initial centroids) is the yardstick the construction is meant to
beat, never to match. ``CENTROID_TOLERANCE``, ``spread`` and ``differences`` live in :mod:`analysis.verify.swap`
and are importable from here as before.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
from jaxtyping import Float

from analysis.verify.swap import CENTROID_TOLERANCE, differences, spread, verify_swap
from circuits import reference

__all__ = ["CAPACITY", "CENTROID_TOLERANCE", "CONSTRUCTIONS", "ConstructionConfig", "SwapModel",
           "SwapPathUnavailable", "choice_gap", "circuit_for", "cluster_with_swap", "differences", "label_agreement",
           "path_for", "run_on_path", "smallest_gap", "spread", "swap_circuit"]

#: The constructions ``--construction`` accepts (one today).
CONSTRUCTIONS = ("swap",)
#: The general evaluation draws its tasks as for a general checkpoint of this capacity (``d <= 64``, ``k <= 16``).
CAPACITY = (64, 16)


@functools.lru_cache(maxsize=16)
def swap_circuit(d: int, k: int, steps: int, beta: float, tie_break: float):
    from circuits.swap import build_swap_circuit

    return build_swap_circuit(d, k, steps, beta=beta, tie_break=tie_break)


def circuit_for(problems: list[tuple[np.ndarray, np.ndarray]], steps: int):
    """One circuit for ``problems`` (``[(X, C0), ...]`` of one shape) with its tie-break and beta chosen from their
    data as for Lloyd's circuit (:func:`circuits.sharpness.for_problem`, on the construction's own unit scaling and
    width): the finest tie-break float64 resolves on every one of them, and a beta that makes every larger gap hard.
    One far point makes the unit scale huge and the data's gaps tiny in it; a fixed tie-break would then decide
    labels the data does not tie."""
    from circuits.encoding import fit_unit_scaling
    from circuits.sharpness import for_problem
    from circuits.swap.build import CENTRE
    from circuits.swap.layout import swap_layout

    d, k = problems[0][0].shape[1], problems[0][1].shape[0]
    units = []
    for X, C0 in problems:
        scaling = fit_unit_scaling(X, C0, CENTRE)  # as SwapCircuit.encode scales a problem
        units.append((scaling.to_unit(X)[0], scaling.to_unit(C0)[0]))
    sharp, _ = for_problem(units, d, swap_layout(d, k).d_model)
    return swap_circuit(d, k, steps, sharp.beta, sharp.tie_break)


class SwapPathUnavailable(ValueError):
    """The requested execution path cannot run this problem (the message says why)."""


def _too_many(n: int, k: int) -> str:
    from analysis.capture import DENSE_MAX_TOKENS
    from circuits.swap.layout import SwapSequence

    tokens = SwapSequence(n, k).n_tokens
    return (f"{tokens} tokens is above the dense forward's limit of {DENSE_MAX_TOKENS} (a few (tokens)^2 float64"
            " matrices per layer)")


def path_for(n: int, k: int, path: str = "auto") -> str:
    """The path to ask :meth:`SwapCircuit.run` for: ``path``, except structured only when the problem's tokens are
    above :data:`analysis.capture.DENSE_MAX_TOKENS`, where ``dense`` is refused (:class:`SwapPathUnavailable`)."""
    from analysis.capture import DENSE_MAX_TOKENS
    from circuits.swap.layout import SwapSequence

    if SwapSequence(n, k).n_tokens <= DENSE_MAX_TOKENS:
        return path
    if path == "dense":
        raise SwapPathUnavailable(f"--path dense: {_too_many(n, k)}")
    return "structured"


def run_on_path(circ, X: Float[np.ndarray, "n d"], C0: Float[np.ndarray, "k d"], path: str):
    """``circ.run`` on ``path`` as :func:`path_for` says; a refusal of the structured path where the dense one may
    not run is :class:`SwapPathUnavailable`."""
    from circuits.structured import StructuredPathUnavailable

    asked = path_for(X.shape[0], C0.shape[0], path)
    try:
        return circ.run(X, C0, path=asked)
    except StructuredPathUnavailable as exc:
        more = f"; and {_too_many(X.shape[0], C0.shape[0])}" if asked != path else ""
        raise SwapPathUnavailable(f"{exc}{more}") from None


def cluster_with_swap(X: Float[np.ndarray, "n d"], C0: Float[np.ndarray, "k d"], iterations: int,
                      path: str = "auto") -> dict:
    """Run the construction on one problem on ``path`` (:func:`run_on_path`); the ``cluster --json`` document
    (see the module docstring)."""
    path_for(X.shape[0], C0.shape[0], path)  # refuse before building
    circ = circuit_for([(X, C0)], iterations)
    run = run_on_path(circ, X, C0, path)
    tie_break = circ.user_tie_break(X, C0)
    scale = float(np.sqrt(tie_break / circ.knobs.sharpness.tie_break))  # the encoder's unit scale
    checked = verify_swap(run, X, C0, circ.knobs.select_margin, tie_break)
    ref = checked.reference
    lloyd = reference.lloyd(X, C0, iterations)
    per_iteration = []
    for t in range(1, iterations + 1):
        error = float(np.abs(run.centroids[t] - ref.centroids[t]).max())
        per_iteration.append({
            "iteration": t, "choice": run.choices[t - 1], "reference_choice": ref.choices[t - 1],
            "label_agreement": label_agreement(X, run.centroids[t], ref.centroids[t]),
            "max_centroid_error": error,
            "objective_circuit": reference.objective(X, run.centroids[t]),
            "objective_reference": float(ref.objectives[t]),
            "objective_lloyd": float(lloyd.objectives[t]),
            # How far from a tie each hard decision of the step was (a margin near 0 is where a knob would matter):
            # beta times the smallest gap between a point's two nearest kept centroids, in the unit-scaled squared
            # distances the circuit compares (exp(-margin) bounds the weight of the runner-up), and how much better
            # the kept candidate's objective was than the next one's, relative (the select margin is 1e-10).
            "min_margin": circ.knobs.sharpness.beta * smallest_gap(X, run.centroids[t]) / scale**2,
            "choice_gap": choice_gap(run.candidate_objectives[t - 1]),
        })
    final = run.centroids[-1]
    inertia, lloyd_inertia = reference.objective(X, final), float(lloyd.objectives[-1])
    return {
        "variant": "construction:swap", "k": int(C0.shape[0]), "iterations": iterations,
        "labels": [int(v) for v in reference.assign(X, final)], "centroids": final.tolist(),
        "verified": checked.verified, "problems": checked.problems, "per_iteration": per_iteration,
        "n": int(X.shape[0]), "d": int(X.shape[1]), "inertia": inertia, "lloyd_inertia": lloyd_inertia,
        "ratio_to_lloyd": reference.objective_ratio(inertia, lloyd_inertia), "knobs": circ.knobs.to_dict(),
        "tie_break_user_units": tie_break, "layers": circ.n_layers, "path": run.path, "path_note": run.path_note,
        "notes": ["construction: 'verified' means the transformer equals its numpy reference (circuits/swap/"
                  "reference.py, no tie-break) at every step: the same candidate kept and centroids within "
                  f"{CENTROID_TOLERANCE:g} of the data's spread; objective_lloyd is Lloyd's from the same initial"
                  " centroids, which the construction is never above"],
    }


def label_agreement(X: Float[np.ndarray, "n d"], A: Float[np.ndarray, "k d"], B: Float[np.ndarray, "k d"]) -> float:
    """The fraction of points whose nearest centroid has the same index in ``A`` and in ``B``."""
    return float((reference.assign(X, A) == reference.assign(X, B)).mean())


def smallest_gap(X: Float[np.ndarray, "n d"], C: Float[np.ndarray, "k d"]) -> float:
    """The smallest gap, over points, between the squared distances to their two nearest centroids."""
    two = np.sort(reference.sq_distances(X, C), axis=1)[:, :2]
    return float((two[:, 1] - two[:, 0]).min())


def choice_gap(objectives: Float[np.ndarray, " 3"]) -> float | None:
    """How much larger the runner-up candidate's objective was than the kept one's, relative; ``None`` when every
    candidate had the same objective (then the tie order decided, as the reference's does)."""
    low, second = np.sort(objectives)[:2]
    return float((second - low) / low) if second > low and low > 0 else None


@dataclass(frozen=True)
class ConstructionConfig:
    """What the general evaluation reads from a model's config: the capacity its tasks are drawn for."""

    d: int = CAPACITY[0]
    k: int = CAPACITY[1]
    general: bool = True


class SwapModel:
    """The construction in the general evaluation's place of a checkpoint (:mod:`analysis.evaluation`):
    per task, its centroids after every step; its readout agreement is the fraction of points whose nearest
    centroid is the same under the circuit's centroids and under its numpy reference's."""

    name = "swap"
    config = ConstructionConfig()

    def trajectory(self, X: Float[np.ndarray, "batch n d"], C0: Float[np.ndarray, "batch k d"], steps: int
                   ) -> tuple[np.ndarray, np.ndarray]:
        from circuits.swap.reference import safeguarded_swap

        circ = circuit_for(list(zip(X, C0)), steps)
        cents, agree = [], []
        for x, c0 in zip(X, C0):
            run = circ.run(x, c0)
            ref = safeguarded_swap(x, c0, steps, circ.knobs.select_margin)
            cents.append(run.centroids)
            agree.append([label_agreement(x, a, b) for a, b in zip(run.centroids, ref.centroids)])
        return np.stack(cents, axis=1), np.mean(agree, axis=0)
