"""Learned safeguarded swap, in numpy: safeguarded swap with a trained *extrapolated Lloyd* candidate.

Each step starts from the current centroids ``C``, Lloyd's trajectory ``L_t`` and the untrained safeguarded swap's
trajectory ``S_t`` (all three from the same ``C0``) and forms five candidates, in this *tie order*:

0. ``"lloyd"``: Lloyd's step ``M(C)`` (:func:`circuits.swap.reference.lloyd_step`);
1. ``"swap"``: Lloyd's step from ``swapped(C)`` (:func:`circuits.swap.reference.swapped`);
2. ``"learned"``: Lloyd's step from the *extrapolated* centroids ``C + alpha_t (M(C) - C)``, with ``alpha_t``
   the trained factor of step ``t`` (the last one for every later step). ``alpha = 0`` is Lloyd's step,
   ``alpha = 1`` two Lloyd's steps, ``alpha > 1`` an over-relaxed step followed by Lloyd's;
3. ``"reference"``: ``L_{t+1}``, Lloyd's step from ``L_t``;
4. ``"swap_reference"``: ``S_{t+1}``, the untrained safeguarded swap's step from ``S_t``
   (:func:`circuits.swap.reference.safeguarded_swap`; left out with ``swap_reference=False``).

It keeps the least ``objective_g * (1 + select_margin * g)``, the earlier candidate on exact ties
(:func:`circuits.swap.reference.select`). Consequences, exact in real arithmetic, for every input and every value
of the trained parameters:

* the objective never rises (candidate 0 never raises it);
* it is never above Lloyd's by more than a factor ``1 + 3 * select_margin`` (candidate 3), and, with the swap
  reference, never above the untrained safeguarded swap by more than ``1 + 4 * select_margin`` (candidate 4).

``candidates`` can leave out ``"swap"`` or ``"learned"`` (the ablations of ``benchmarks/bench_learned.py``); the
tie order of the rest is unchanged. Ties of the assignment and the swap are broken as in
:mod:`circuits.swap.reference` (``tie_break``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from jaxtyping import Float

from circuits import reference
from circuits.swap.reference import SwapTrajectory, lloyd_step, safeguarded_swap, swapped

#: Every candidate, in tie order; :attr:`LearnedTrajectory.choices` holds these names.
CANDIDATES: tuple[str, ...] = ("lloyd", "swap", "learned", "reference", "swap_reference")
#: The candidates an ablation may leave out (the safeguards cannot be).
OPTIONAL: tuple[str, ...] = ("swap", "learned", "swap_reference")


def alpha_at(alphas: Float[np.ndarray, " p"], t: int) -> float:
    """The extrapolation factor of step ``t`` (0-based): ``alphas[t]``, the last one for every later step."""
    return float(alphas[min(t, len(alphas) - 1)])


def reach(alphas: Float[np.ndarray, " p"]) -> float:
    """How far beyond the unit ball, as a factor, the extrapolated centroids ``C + alpha (M(C) - C)`` may lie
    when ``C`` and ``M(C)`` lie in it: ``max(1, 2 alpha - 1)`` for the largest factor."""
    return max(1.0, 2.0 * float(np.max(alphas)) - 1.0)


def extrapolated(X: Float[np.ndarray, "n d"], C: Float[np.ndarray, "k d"], alpha: float,
                 tie_break: float = 0.0) -> Float[np.ndarray, "k d"]:
    """The learned candidate: Lloyd's step from ``C + alpha (M(C) - C)``, ``M`` Lloyd's step."""
    M = lloyd_step(X, C, tie_break)
    return lloyd_step(X, C + alpha * (M - C), tie_break)


@dataclass
class LearnedTrajectory(SwapTrajectory):
    """A run: a :class:`~circuits.swap.reference.SwapTrajectory` (``choices`` among :data:`CANDIDATES`) with the
    untrained safeguarded swap's objectives beside and every candidate's objective per step (NaN where left out)."""

    swap_objectives: Float[np.ndarray, " steps_plus_1"]
    candidate_objectives: Float[np.ndarray, "steps candidates"]


def step_candidates(X: Float[np.ndarray, "n d"], C: Float[np.ndarray, "k d"], L: Float[np.ndarray, "k d"],
                    S: Float[np.ndarray, "k d"], alpha: float, keep: tuple[str, ...] = CANDIDATES,
                    tie_break: float = 0.0) -> dict[str, np.ndarray]:
    """A step's candidates from ``C`` by name (those of ``keep``, in tie order); ``L`` and ``S`` are Lloyd's and the
    untrained swap's chains' next states."""
    M = lloyd_step(X, C, tie_break)
    out = {"lloyd": M}
    if "swap" in keep:
        out["swap"] = lloyd_step(X, swapped(X, C, tie_break), tie_break)
    if "learned" in keep:
        out["learned"] = lloyd_step(X, C + alpha * (M - C), tie_break)
    out["reference"] = L
    if "swap_reference" in keep:
        out["swap_reference"] = S
    return out


def safety_chains(X: Float[np.ndarray, "n d"], C0: Float[np.ndarray, "k d"], steps: int,
                  select_margin: float = 0.0, tie_break: float = 0.0) -> SwapTrajectory:
    """The two safety nets from ``C0``: the untrained safeguarded swap's run, which holds Lloyd's trajectory beside
    it (``lloyd_centroids``). They do not depend on the trained parameters, so training computes them once."""
    return safeguarded_swap(X, C0, steps, select_margin, tie_break)


def _check(alphas, candidates: tuple[str, ...], k: int) -> np.ndarray:
    alphas = np.asarray(alphas, dtype=np.float64).reshape(-1)
    if len(alphas) == 0 or not np.all(np.isfinite(alphas)):
        raise ValueError("alphas must be a non-empty list of finite numbers")
    if not set(candidates) <= set(CANDIDATES) or not {"lloyd", "reference"} <= set(candidates):
        raise ValueError(f"candidates must be among {CANDIDATES} and keep lloyd and reference")
    if k < 2 and "swap" in candidates:
        raise ValueError("a swap needs k >= 2 centroids")
    return alphas


def learned_swap(X: Float[np.ndarray, "n d"], C0: Float[np.ndarray, "k d"], steps: int,
                 alphas: Float[np.ndarray, " p"] | list[float], select_margin: float = 0.0, tie_break: float = 0.0,
                 candidates: tuple[str, ...] = CANDIDATES, chains: SwapTrajectory | None = None) -> LearnedTrajectory:
    """``steps`` steps of learned safeguarded swap from ``C0`` with factors ``alphas`` (module docstring).

    ``chains`` (from :func:`safety_chains` with the same arguments and at least ``steps`` steps) saves recomputing
    the safety nets."""
    X, C0 = np.asarray(X, dtype=np.float64), np.asarray(C0, dtype=np.float64)
    alphas = _check(alphas, candidates, len(C0))
    if chains is None:
        chains = safety_chains(X, C0, steps, select_margin, tie_break)
    C = C0
    cs, choices, objs, allv = [C0], [], [chains.lloyd_objectives[0]], []
    for t in range(steps):
        L, S = chains.lloyd_centroids[t + 1], chains.centroids[t + 1]
        cands = step_candidates(X, C, L, S, alpha_at(alphas, t), candidates, tie_break)
        names = [name for name in CANDIDATES if name in cands]
        values = np.array([reference.objective(X, cands[name]) for name in names])
        # The margin's rank is the tie-order index among all candidates, so an ablation keeps the others' order.
        rank = np.array([CANDIDATES.index(name) for name in names], dtype=np.float64)
        best = int(np.argmin(values * (1.0 + select_margin * rank)))
        C = cands[names[best]]
        cs.append(C)
        choices.append(names[best])
        objs.append(values[best])
        allv.append([values[names.index(n)] if n in names else np.nan for n in CANDIDATES])
    return LearnedTrajectory(np.stack(cs), choices, np.array(objs), chains.lloyd_centroids[:steps + 1].copy(),
                             chains.lloyd_objectives[:steps + 1].copy(), chains.objectives[:steps + 1].copy(),
                             np.array(allv).reshape(steps, len(CANDIDATES)))
