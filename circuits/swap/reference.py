"""Safeguarded swap, in numpy: the reference algorithm that :mod:`circuits.swap` builds as a transformer.

Each step starts from the current centroids ``C`` and Lloyd's own reference trajectory ``L_t`` (same start) and
forms three candidates, in this *tie order*:

0. ``"lloyd"``: Lloyd's step from ``C``;
1. ``"swap"``: Lloyd's step from ``swapped(C)``: the centroid with the least *removal cost* (the sum, over its
   points, of ``d2 - d1``, second-nearest minus nearest squared distance; the lower index on ties) moves onto the
   point farthest from its nearest centroid (largest ``d1``; the lower index on ties);
2. ``"reference"``: ``L_{t+1}``, Lloyd's step from ``L_t``.

It keeps the candidate ``g`` with the least ``objective_g * (1 + select_margin * g)``, the earlier one on exact
ties. With ``select_margin = 0`` that is the plain minimum (earlier candidate on ties). A positive margin makes a
later candidate win only when it is better by more than that relative amount, so candidates whose objectives are
equal (to rounding) are ordered by the tie order and not by rounding. Consequences, exact in real arithmetic:

* the objective never rises (candidate 0 is Lloyd's step from ``C``, which never raises it, and a later winner
  is at most as large);
* the objective is never above Lloyd's by more than a factor ``1 + 2 * select_margin``.

Lloyd's step is :func:`circuits.reference.update` after :func:`circuits.reference.assign` (empty clusters keep
their centroid). Ties, with ``tie_break`` (absolute, squared user units; default 0, then plain ``argmin`` and
``argmax``, the lower index on exact ties), as the transformer breaks them:

* a point's nearest centroid minimises ``d_ij + tie_break * j`` (:func:`circuits.reference.assign`), its
  second-nearest does the same over the other centroids, and ``d1``, ``d2`` are their squared distances;
* the centroid to move minimises ``removal_cost_j / n + tie_break * j``;
* the farthest point maximises ``d1_i - tie_break * i / n``.

The transformer's ``tie_break`` acts on unit-scaled coordinates: for a problem it is ``tie_break * scale**2`` in
the user's units (:meth:`circuits.swap.build.SwapCircuit.user_tie_break`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from jaxtyping import Float

from circuits import reference

#: The candidates in tie order; :attr:`SwapTrajectory.choices` holds these names.
CANDIDATES: tuple[str, ...] = ("lloyd", "swap", "reference")


def lloyd_step(X: Float[np.ndarray, "n d"], C: Float[np.ndarray, "k d"], tie_break: float = 0.0
               ) -> Float[np.ndarray, "k d"]:
    return reference.update(X, reference.assign(X, C, tie_break), C)


def nearest_two(X: Float[np.ndarray, "n d"], C: Float[np.ndarray, "k d"], tie_break: float = 0.0
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each point's nearest centroid and the squared distances ``d1``, ``d2`` to it and to the second-nearest."""
    D = reference.sq_distances(X, C)
    rows, penalty = np.arange(len(X)), tie_break * np.arange(len(C), dtype=np.float64)
    labels = reference.assign(X, C, tie_break)
    other = D + penalty
    other[rows, labels] = np.inf
    return labels, D[rows, labels], D[rows, other.argmin(axis=1)]


def removal_costs(X: Float[np.ndarray, "n d"], C: Float[np.ndarray, "k d"], tie_break: float = 0.0
                  ) -> Float[np.ndarray, " k"]:
    """Per centroid, the sum over its points of (second-nearest - nearest) squared distance (0 for an empty one)."""
    labels, d1, d2 = nearest_two(X, C, tie_break)
    return np.bincount(labels, weights=d2 - d1, minlength=len(C))


def swapped(X: Float[np.ndarray, "n d"], C: Float[np.ndarray, "k d"], tie_break: float = 0.0
            ) -> Float[np.ndarray, "k d"]:
    """``C`` with its least useful centroid moved onto the point farthest from its nearest centroid."""
    if len(C) < 2:
        raise ValueError("a swap needs k >= 2 centroids")
    n = len(X)
    _, d1, _ = nearest_two(X, C, tie_break)
    move = np.argmin(removal_costs(X, C, tie_break) / n + tie_break * np.arange(len(C)))
    out = np.array(C, dtype=np.float64, copy=True)
    out[move] = X[np.argmax(d1 - tie_break * np.arange(n) / n)]
    return out


def select(objectives: Float[np.ndarray, " 3"], select_margin: float = 0.0) -> int:
    """Index (tie order) of the candidate kept: least ``objective * (1 + select_margin * index)``, first on ties."""
    objectives = np.asarray(objectives, dtype=np.float64)
    return int(np.argmin(objectives * (1.0 + select_margin * np.arange(len(objectives)))))


def step_candidates(X: Float[np.ndarray, "n d"], C: Float[np.ndarray, "k d"], L_next: Float[np.ndarray, "k d"],
                    tie_break: float = 0.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A step's candidates from ``C``, in tie order (:data:`CANDIDATES`); ``L_next`` is Lloyd's chain's next state."""
    return lloyd_step(X, C, tie_break), lloyd_step(X, swapped(X, C, tie_break), tie_break), L_next


@dataclass
class SwapTrajectory:
    """A run of safeguarded swap: ``centroids[t]`` after ``t`` steps (``centroids[0] = C0``), with Lloyd's beside."""

    centroids: Float[np.ndarray, "steps_plus_1 k d"]
    choices: list[str]
    objectives: Float[np.ndarray, " steps_plus_1"]
    lloyd_centroids: Float[np.ndarray, "steps_plus_1 k d"]
    lloyd_objectives: Float[np.ndarray, " steps_plus_1"]


def safeguarded_swap(X: Float[np.ndarray, "n d"], C0: Float[np.ndarray, "k d"], steps: int,
                     select_margin: float = 0.0, tie_break: float = 0.0) -> SwapTrajectory:
    """``steps`` steps of safeguarded swap from ``C0`` (module docstring)."""
    X, C0 = np.asarray(X, dtype=np.float64), np.asarray(C0, dtype=np.float64)
    C, L = C0, C0
    cs, ls, choices = [C0], [C0], []
    objs, lobjs = [reference.objective(X, C0)], [reference.objective(X, C0)]
    for _ in range(steps):
        L = lloyd_step(X, L, tie_break)
        candidates = step_candidates(X, C, L, tie_break)
        values = np.array([reference.objective(X, c) for c in candidates])
        best = select(values, select_margin)
        C = candidates[best]
        cs.append(C)
        ls.append(L)
        choices.append(CANDIDATES[best])
        objs.append(values[best])
        lobjs.append(values[2])
    return SwapTrajectory(np.stack(cs), choices, np.array(objs), np.stack(ls), np.array(lobjs))
