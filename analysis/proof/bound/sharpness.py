"""Finite sharpness: a proven bound on how far each softmax is from hardmax, and what that does to the answer.

The hard-attention theorem (:mod:`analysis.proof.theorem`) says the circuit *with hardmax* is Lloyd's algorithm.
The circuit runs softmax with finite ``beta`` and ``beta_update``. This module bounds, for one concrete problem and in
exact real arithmetic, the distance between the softmax circuit and the hard one, layer by layer, from the margins
of the hard trajectory. Everything is in the encoder's unit-scaled coordinates; centroid bounds are also given in
the user's units (times the scale ``s``).

Notation: ``x_i`` the points (the float64 values the circuit receives), ``c_j`` the hard trajectory's centroids,
``t_j`` the tie-breaks, ``V_ij = |x_i - c_j|^2 + t_j``, ``a(i) = argmin_j V_ij``. ``Delta_j`` bounds
``|c~_j - c_j|`` for the soft circuit's centroid ``c~_j``. Facts used, all consequences of the proven obligations
and valid for softmax as well as hardmax: the MLPs copy exactly (``Y := Y_stage``, ``C := C_stage``,
``N := |C_stage|^2``, slots emptied), so ``N_j = |c~_j|^2`` exactly; point and BOS tokens only ever get
``N >= 0``; every leak into a token's staging slot that is not part of the algorithm is emptied by the next MLP;
``softmax(s)_key <= exp(s_key - s_top)`` for any key ``top``.

The assign layer's bound (and the trimmed variant's sink there) is derived and evaluated in
:mod:`analysis.proof.bound.assign`; the update layer's (the damped and trimmed variants' too) in
:mod:`analysis.proof.bound.update`. This module evaluates them along the hard trajectory, layer after layer
(:func:`sharpness_bound`).

**Rigour of the evaluation.** The hard trajectory's distances are computed in float64, and each carries a stated
rounding bound (``gamma_{d+2} D`` for the squared distance, ``(|S| + 1) u max|x|`` per coordinate for a mean,
``u = 2^-53``); a margin counts only after subtracting those bounds. If a float reference cannot certify which
centroid is nearest (margin below its rounding bound), the trajectory is uncertain and every bound from there on
is ``inf``. Exponents are evaluated in log space; every bound is rounded up and never reported below the smallest
positive float64 (a true value smaller than that is still bounded by it).

What is *not* covered: the floating-point rounding inside the circuit's own forward pass. Observed errors are
therefore compared with ``bound + the verifier's rounding tolerance`` (:mod:`analysis.verify`).
"""

from __future__ import annotations

import math

import numpy as np
from jaxtyping import Float

from analysis.proof.bound.assign import assign_pass
from analysis.proof.bound.records import (
    TINY, U, BoundProblem, HardState, HardTrajectory, LayerBound, SharpnessBound, round_up,
)
from analysis.proof.bound.update import first_update, update_layer
from circuits.blocks import ASSIGN, UPDATE


def tie_breaks(tie_break: float, k: int) -> np.ndarray:
    """``t_j`` as the circuit's weights hold them: ``tie_break * j`` rounded once to float64."""
    return np.array([float(tie_break * j) for j in range(k)])



def sharpness_bound(X: Float[np.ndarray, "n d"], C0: Float[np.ndarray, "k d"], iterations: int, beta: float,
                    beta_update: float, mask: float, tie_break: float, scale: float = 1.0, *, eta: float = 1.0,
                    sink: float | None = None, update_sink: float | None = None, trajectory_labels: bool = True,
                    ) -> tuple[SharpnessBound, HardTrajectory]:
    """The bound for unit-scaled points ``X`` and initial centroids ``C0`` (as the circuit receives them).

    Lloyd's circuit by default; ``eta`` the damped variant's step (updates after the first); ``sink`` the assign
    heads' attention-sink logit and ``update_sink`` the update heads' (trimmed). Outliers get label -1. (The
    parameters are the circuit's knobs one by one, as :func:`analysis.proof.bound.bound_for_capture` and the tests
    pass them.) ``trajectory_labels=False``: the trajectory's labels are not kept (its ``labels`` is empty), for a
    caller that reads the bound alone (an ``n``-sized array per iteration: 88 MB at a million points, T = 10).
    """
    X = np.asarray(X, dtype=np.float64)
    state = HardState(np.asarray(C0, dtype=np.float64).copy(), np.zeros(len(C0)), np.zeros(len(C0)))
    n, d = X.shape
    x_norm = np.sqrt((X**2).sum(axis=1)) * (1 + (d + 2) * U) + TINY
    p = BoundProblem(X, tie_breaks(tie_break, len(C0)), beta, beta_update, mask, eta, sink,
                 np.array([] if update_sink is None else [float(update_sink)]),
                 float(x_norm.max()) if n else 0.0, np.abs(X).max(axis=1) if n else np.zeros(0))
    traj = HardTrajectory([state.C.copy()], [], [])
    first = first_update(p, state, update_sink is not None)
    layers, centroid_user, notes = [first], [float(round_up(state.delta.max() * scale))], []
    certified = True
    for it in range(iterations + 1):
        a, eps, uncertain, bound = assign_pass(p, state, it)
        if uncertain and certified:
            certified = False
            notes.append(f"iteration {it}: the float reference cannot certify the nearest centroid of"
                         f" {uncertain} point(s) (margins below rounding); bounds are inf from here")
        if trajectory_labels:
            traj.labels.append(np.where(a == len(state.C), -1, a))
        traj.certified.append(certified)
        if not certified:
            layers.extend(_uncertified(it, iterations, n))
            centroid_user.extend([math.inf] * (iterations - it))
            break
        layers.append(bound)
        if it == iterations:
            break
        l1 = update_layer(p, state, a, eps)
        traj.centroids.append(state.C.copy())
        worst_l1 = float(l1.max())
        log_l1 = math.log10(worst_l1) if 0 < worst_l1 < math.inf else (math.inf if worst_l1 else -math.inf)
        layers.append(LayerBound(2 * it + 2, UPDATE, it + 1, worst_l1, log_l1, centroid=float(state.delta.max())))
        centroid_user.append(float(round_up(state.delta.max() * scale)))
    return SharpnessBound(scale, certified, layers, centroid_user, notes=notes), traj


def _uncertified(it: int, iterations: int, n: int) -> list[LayerBound]:
    """Infinite bounds from iteration ``it``'s assign layer on (assign layer of iteration s at 2s + 1, update
    layer at 2s)."""
    out = [LayerBound(2 * it + 1, ASSIGN, it, math.inf, math.inf, math.inf, n)]
    for s in range(it + 1, iterations + 1):
        out.append(LayerBound(2 * s, UPDATE, s, math.inf, math.inf, centroid=math.inf))
        out.append(LayerBound(2 * s + 1, ASSIGN, s, math.inf, math.inf, math.inf, n))
    return out
