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

**Assign layer** (point query ``i``). Scores: centroid ``j``: ``beta (|x_i|^2 - |x_i - c~_j|^2 - t_j)``; point and BOS
keys ``<= -beta mask``. With ``eta_ij = 2 |x_i - c_j| Delta_j + Delta_j^2 >= ||x_i - c~_j|^2 - |x_i - c_j|^2|`` the
mass off ``a = a(i)`` is at most::

    eps_i = sum_{j != a} exp(-beta (V_ij - V_ia - eta_ij - eta_ia)) + (n + 1) exp(-beta (mask - V_ia - eta_ia))

(``|x_i|^2 >= 0`` dropped). ``|softmax - hardmax|_1 = 2 (1 - p_ia) <= 2 eps_i``, and ``Y_i = Y_stage_i`` is the
pattern over centroid keys, so ``|Y_i - e_a|_1 <= 2 eps_i``; the label (argmax of ``Y``) is ``a`` when ``eps_i < 1/2``.

**Update layer** (centroid query ``j``, members ``S_j = {i : a(i) = j}``). Scores: point ``i``: ``beta_u y_ij``
with ``y_ij >= 1 - eps_i`` for members and ``<= eps_i`` otherwise; own key ``beta_u / 2``; other keys 0. For a
non-empty cluster write ``z_i = exp(-beta_u (1 - y_ij)) in [exp(-beta_u eps_i), 1]`` and
``S = sum_{S_j} (1 - exp(-beta_u eps_i))``. The normalised member weights ``z_i / sum z`` satisfy
``sum |z_i / sum z - 1/|S_j|| <= sum |z_i - mean z| / sum z <= 2 S / (|S_j| - S)`` (and always ``<= 2``), and the
off-support mass is::

    W_j <= (sum_{i not in S_j} exp(beta_u (eps_i - 1)) + exp(-beta_u / 2) + k exp(-beta_u)) / (|S_j| - S)

so ``|o_j - mean_{S_j} x| <= 2 r_x min(2, 2 S / (|S_j| - S)) + W_j R`` (``r_x = max |x_i|``, ``R`` bounds
``|value - target|`` over all keys, and also bounds the error outright) and ``|softmax - hardmax|_1 <=
min(2, 2 S / (|S_j| - S)) + 2 W_j``. An empty cluster attends to its own key (value ``c~_j``) with off-support mass
``W_j <= sum_i exp(beta_u (eps_i - 1/2)) + k exp(-beta_u / 2)``, so ``Delta_j`` grows by at most ``W_j`` times the
largest distance of a value from ``c~_j``. The first update commits ``c0 + o_j`` where every key but the own
(value 0) scores ``beta_u / 2`` below it: ``|o_j| <= n exp(-beta_u / 2) r_x``.

**Rigour of the evaluation.** The hard trajectory's distances are computed in float64, and each carries a stated
rounding bound (``gamma_{d+2} D`` for the squared distance, ``(|S| + 1) u max|x|`` per coordinate for a mean,
``u = 2^-53``); a margin counts only after subtracting those bounds. If a float reference cannot certify which
centroid is nearest (margin below its rounding bound), the trajectory is uncertain and every bound from there on
is ``inf``. Exponents are evaluated in log space; every bound is rounded up and never reported below the smallest
positive float64 (a true value smaller than that is still bounded by it).

What is *not* covered: the floating-point rounding inside the circuit's own forward pass. Observed errors are
therefore compared with ``bound + the verifier's rounding tolerance`` (:mod:`analysis.verify`).

**Damped** (``eta``; :mod:`circuits.variants.damped`). The heads are Lloyd's, so the assign bound and the update
head's bound on ``|o_j - m_j|`` (``m_j`` the hard head output: the members' mean, or ``c_j`` for an empty cluster)
carry over unchanged. Only the commit differs: the MLP writes ``c~_j + eta (o_j - c~_j)`` where the hard circuit
writes ``c_j + eta (m_j - c_j)``; the difference is ``(1 - eta)(c~_j - c_j) + eta (o_j - m_j)``, so
``Delta_j' <= |1 - eta| Delta_j + eta |o_j - m_j|``: a damped step carries a fraction ``|1 - eta|`` of the old error
forward instead of discarding it (Lloyd's, ``eta = 1``, discards it). For an empty cluster write the difference as
``(c~_j - c_j) + eta (o_j - c~_j)``: ``Delta_j' <= Delta_j + eta |o_j - c~_j|``, with ``|o_j - c~_j|`` bounded as for
Lloyd's. ``N_j = |c~_j|^2`` still holds exactly only because the norm units read ``(1 - eta) C + eta C_stage``
with ``1 - eta`` a float64 (obligation ``update.MLP.damped_square_norm``); for an ``eta`` where it is not, no bound
is given. The first update commits fully, as Lloyd's. The float64 reference evaluates ``c + eta (m - c)``; its
per-coordinate error grows by ``|1 - eta| e + eta e_mean`` plus three roundings.

**Trimmed** (assign sink logit ``L``; :mod:`circuits.variants.trimmed`). With ``NX = |x|^2`` exact the centroid
scores are exactly ``-beta V_ij`` and the sink is one more key of score ``L = -beta V_sink`` (``V_sink =
-L / beta``, evaluated with its rounding) and value 0, so it is a competitor like a centroid with ``Delta = 0``:
``a(i)`` is the argmin over the ``k`` centroids *and* the sink, its margin is the gap to the runner-up among all
``k + 1`` (an outlier's runner-up is its nearest centroid, a member's may be the sink), and ``eps_i`` sums over all of
them (masked keys still score ``<= -beta (mask + |x_i|^2)``). An outlier's hard ``Y`` is 0 and its soft ``Y`` holds
the mass off the sink, ``<= eps_i``: so ``|Y_i - 0|_1 <= eps_i``, every ``y_ij <= eps_i`` and its label reads -1 when
``eps_i < 1/2``. In the update head an outlier is therefore a non-member (score ``beta_u y_ij <= beta_u eps_i``),
exactly the role Lloyd's bound gives non-members, so the update bound carries over with members ``S_j`` = the
non-outlier points labelled ``j``. The update heads' own sink (logit ``L_u``, value 0) is one more off-support key:
``exp(L_u - beta_u)`` joins ``W_j`` (``exp(L_u - beta_u / 2)`` for an empty cluster, one more key in the first
update). The observed ``|softmax - hardmax|_1`` counts the sink's mass too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
from jaxtyping import Float

from analysis.proof.bound.records import (
    TINY, U, HardTrajectory, LayerBound, SharpnessBound, exp, gamma, logsumexp, round_up,
    round_up_scalar,
)
# The textbook's distances (circuits.reference.sq_distances) bit for bit, a block of rows at a time: 2.7x faster
# on a chunk of the bound (tests/unit/test_verify_fast.py holds the two equal).
from analysis.verify.fast.blocks import sq_distances
from circuits.blocks import ASSIGN, UPDATE


def commit_error(delta: float, head: float, eta: float) -> float:
    """Bound on ``|c~' - c'|`` after an update that commits ``c + eta (o - c)`` for a non-empty cluster, given
    ``delta >= |c~ - c|`` before it and ``head >= |o~ - mean|`` for the head's output: the two commits differ by
    ``(1 - eta)(c~ - c) + eta (o~ - mean)``. Lloyd's (``eta = 1``) discards the old error."""
    if eta == 1.0:
        return head
    return float(round_up(abs(1 - eta) * delta + eta * head))


def tie_breaks(tie_break: float, k: int) -> np.ndarray:
    """``t_j`` as the circuit's weights hold them: ``tie_break * j`` rounded once to float64."""
    return np.array([float(tie_break * j) for j in range(k)])


@dataclass(frozen=True)
class _Problem:
    """What stays fixed along the bound: the unit-scaled points with their norms (rounded up) and largest
    coordinate, the tie-breaks, the knobs, the damped step ``eta`` and the sinks (``sink_terms``: the update heads'
    logit, or empty)."""

    X: np.ndarray
    t: np.ndarray
    beta: float
    beta_update: float
    mask: float
    eta: float
    sink: float | None
    sink_terms: np.ndarray
    r_x: float
    x_inf: np.ndarray


@dataclass
class _State:
    """The hard trajectory at one iteration: centroids ``C``, their per-coordinate float error ``e``, and ``delta``,
    the bound on each soft centroid's distance from its hard one."""

    C: np.ndarray
    e: np.ndarray
    delta: np.ndarray


@dataclass
class _Margins:
    """An assign layer's hard decisions: labels ``a`` (``k``: the sink), the certified gaps to every other
    candidate (``inf`` at ``a``), the distances ``D`` and centroid errors ``E``, and ``V``, rounding at ``a``."""

    a: np.ndarray
    gap: np.ndarray
    D: np.ndarray
    E: np.ndarray
    Va: np.ndarray
    rho_a: np.ndarray

    @property
    def certified(self) -> bool:
        return bool(np.all(self.gap > 0)) if self.gap.shape[1] > 1 else True


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
    state = _State(np.asarray(C0, dtype=np.float64).copy(), np.zeros(len(C0)), np.zeros(len(C0)))
    n, d = X.shape
    x_norm = np.sqrt((X**2).sum(axis=1)) * (1 + (d + 2) * U) + TINY
    p = _Problem(X, tie_breaks(tie_break, len(C0)), beta, beta_update, mask, eta, sink,
                 np.array([] if update_sink is None else [float(update_sink)]),
                 float(x_norm.max()) if n else 0.0, np.abs(X).max(axis=1) if n else np.zeros(0))
    traj = HardTrajectory([state.C.copy()], [], [])
    first = _first_update(p, state, update_sink is not None)
    layers, centroid_user, notes = [first], [float(round_up(state.delta.max() * scale))], []
    certified = True
    for it in range(iterations + 1):
        a, eps, uncertain, bound = _assign_pass(p, state, it)
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
        l1 = _update_layer(p, state, a, eps)
        traj.centroids.append(state.C.copy())
        worst_l1 = float(l1.max())
        layers.append(LayerBound(2 * it + 2, UPDATE, it + 1, worst_l1,
                                 math.log10(worst_l1) if 0 < worst_l1 < math.inf else (math.inf if worst_l1 else -math.inf),
                                 centroid=float(state.delta.max())))
        centroid_user.append(float(round_up(state.delta.max() * scale)))
    return SharpnessBound(scale, certified, layers, centroid_user, notes=notes), traj


def _first_update(p: _Problem, state: _State, update_sink: bool) -> LayerBound:
    """Layer 0: the first update commits C0; centroid j attends to its own key (value 0), every other key scores
    beta_update / 2 below it and only point keys carry a non-zero value. Sets ``state.delta``."""
    n, k = len(p.X), len(state.C)
    log_off = math.log(n + k + (1 if update_sink else 0)) - p.beta_update / 2
    log_delta = math.log(n * p.r_x) - p.beta_update / 2 if n and p.r_x > 0 else -math.inf
    state.delta = np.full(k, float(round_up(exp(log_delta))) if log_delta > -math.inf else 0.0)
    return LayerBound(0, UPDATE, 0, float(round_up(2 * exp(log_off))), (math.log(2) + log_off) / math.log(10),
                      centroid=float(state.delta.max()))


def _uncertified(it: int, iterations: int, n: int) -> list[LayerBound]:
    """Infinite bounds from iteration ``it``'s assign layer on (assign layer of iteration s at 2s + 1, update
    layer at 2s)."""
    out = [LayerBound(2 * it + 1, ASSIGN, it, math.inf, math.inf, math.inf, n)]
    for s in range(it + 1, iterations + 1):
        out.append(LayerBound(2 * s, UPDATE, s, math.inf, math.inf, centroid=math.inf))
        out.append(LayerBound(2 * s + 1, ASSIGN, s, math.inf, math.inf, math.inf, n))
    return out


def _margins(p: _Problem, state: _State) -> _Margins:
    """The hard assignment to ``state.C`` (and the sink, as a (k+1)-th candidate) with its certified gaps."""
    X, n, d = p.X, len(p.X), p.X.shape[1]
    D = sq_distances(X, state.C)
    E = np.sqrt(d) * state.e  # Euclidean error of the float centroids
    g = gamma(d + 2)
    # rho = (g D (1 + 2 g) + 2 sqrt(D) (1 + g) E + E^2 + U (D + t)) 1.01 + 1e-300 and V = D + t, evaluated in place:
    # the same float64 operations in the same order, in two chunk-sized buffers instead of a dozen
    # (tests/unit/test_bound_chunks.py holds it to the expression).
    rho = np.multiply(g, D)
    rho *= 1 + 2 * g
    term = np.sqrt(D)
    term *= 2
    term *= 1 + g
    term *= E[None, :]
    rho += term
    rho += E[None, :] ** 2
    np.add(D, p.t[None, :], out=term)
    term *= U
    rho += term
    rho *= 1.01
    rho += 1e-300
    V = np.add(D, p.t[None, :], out=term)
    if p.sink is not None:
        # The sink as a (k+1)-th candidate: V_sink = -L / beta (one division, rounded), no centroid error.
        v_sink = -p.sink / p.beta
        V = np.concatenate([V, np.full((n, 1), v_sink)], axis=1)
        rho = np.concatenate([rho, np.full((n, 1), 2 * U * abs(v_sink) + 1e-300)], axis=1)
    a = np.argmin(V, axis=1)
    rows = np.arange(n)
    Va, rho_a = V[rows, a], rho[rows, a]
    gap = np.subtract(V, Va[:, None])
    gap -= rho
    gap -= rho_a[:, None]
    gap[rows, a] = np.inf
    return _Margins(a, gap, D, E, Va, rho_a)


#: Points per pass of an assign layer's bound (:func:`_assign_pass`): its ``n x k`` temporaries (distances, rounding
#: bounds, gaps, exponents: about ten) exist for one chunk at a time, not for every point. Every step is elementwise
#: or per point (``tests/unit/test_bound_chunks.py`` holds the bound to the same numbers for chunks of 1, 3 and 64).
#: 8,192 points keep a chunk's temporaries (about 0.7 MB each at k = 10) near the core's cache: at a million points
#: the bound took 9.8 s of CPU against 10.8-11.1 s in chunks of 65,536 (docs/performance.md, "The eighth round").
BOUND_CHUNK = 1 << 13


def _assign_pass(p: _Problem, state: _State, it: int) -> tuple[np.ndarray, np.ndarray, int, LayerBound | None]:
    """Iteration ``it``'s assign layer over every point, :data:`BOUND_CHUNK` points at a time: the hard labels, each
    point's mass off its label ``eps_i``, the number of points whose nearest candidate the float reference cannot
    certify, and the layer's bound (``None``, and ``eps`` not evaluated, when that number is not 0)."""
    n = len(p.X)
    labels, eps, log_eps = np.empty(n, dtype=np.intp), np.empty(n), np.empty(n)
    uncertain = 0
    for start in range(0, n, BOUND_CHUNK):
        rows = slice(start, min(n, start + BOUND_CHUNK))
        part = replace(p, X=p.X[rows], x_inf=p.x_inf[rows])
        m = _margins(part, state)
        labels[rows] = m.a
        if not m.certified:
            uncertain += int((m.gap <= 0).any(axis=1).sum())
        if not uncertain:
            eps[rows], log_eps[rows] = _assign_eps(part, state, m, n)
    if uncertain:
        return labels, eps, uncertain, None
    worst = float(log_eps.max()) if n else -math.inf
    l1 = float(round_up(2 * eps.max())) if n else 0.0
    return labels, eps, 0, LayerBound(2 * it + 1, ASSIGN, it, l1, (math.log(2) + worst) / math.log(10), l1,
                                      int((eps >= 0.5).sum()))


def _assign_eps(p: _Problem, state: _State, m: _Margins, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Each point's mass off its hard label, ``eps_i`` (at most 1), and its log, for the points of ``p`` (a chunk of
    the ``n`` points: the masked keys are every point's)."""
    rows, a, delta = np.arange(len(p.X)), m.a, state.delta
    d = p.X.shape[1]
    # The expressions of the module docstring, evaluated in place (the same float64 operations in the same order).
    shift = np.sqrt(m.D * (1 + gamma(d + 2)))
    shift += m.E  # dist
    shift *= 2
    shift *= delta
    shift += delta**2  # 2 dist delta + delta^2
    if p.sink is not None:
        shift = np.concatenate([shift, np.zeros((len(rows), 1))], axis=1)
    shift_a = shift[rows, a]
    # The exponents of every candidate and, last, of the masked keys: log_eps is their log sum exp per point.
    exponents = np.empty((len(rows), shift.shape[1] + 1))
    expo = exponents[:, :-1]
    with np.errstate(invalid="ignore"):
        np.subtract(m.gap, shift, out=expo)
        expo -= shift_a[:, None]
        expo *= -p.beta
    expo[rows, a] = -np.inf
    exponents[:, -1] = math.log(n + 1) - p.beta * (p.mask - (m.Va + m.rho_a) - shift_a)
    log_eps = logsumexp(exponents, axis=1)
    log_eps = np.minimum(log_eps, 0.0)  # eps <= 1 always
    return np.minimum(round_up(exp(log_eps)), 1.0), log_eps


def _update_layer(p: _Problem, state: _State, a: np.ndarray, eps: np.ndarray) -> np.ndarray:
    """Advance ``state`` by one update (centroids of the next iteration, their float error and ``delta``); returns
    each centroid query's bound on ``|softmax - hardmax|_1``."""
    d, k = p.X.shape[1], len(state.C)
    E = np.sqrt(d) * state.e
    c_norm = np.sqrt((state.C**2).sum(axis=1)) * (1 + (d + 2) * U) + E
    r_v = p.r_x + max(p.r_x, float((c_norm + state.delta).max()))
    new = _State(state.C.copy(), state.e.copy(), state.delta.copy())
    l1 = np.zeros(k)
    # Per point, once for every cluster (elementwise, so each cluster's selection holds the values it would compute):
    # 1 - z_i's lower bound and a non-member's score term; the points sorted stably by label, so each cluster's
    # members are one block holding the rows of X[a == j] in their order. A stable order is unique, so the labels
    # (0..k) are sorted as the narrowest integers that hold them, which numpy sorts by radix: 10 ms at a million
    # points against 48 ms for the same order of intp labels.
    order = np.argsort(a.astype(np.min_scalar_type(k)), kind="stable")
    bounds = np.searchsorted(a[order], np.arange(k + 1)).tolist()
    with np.errstate(over="ignore", under="ignore", divide="ignore"):
        shifted, keep, top = _off_mass_terms(p, eps, a, order, k)
        # Row j's kept terms, shifted[j][keep[j]], are the j-th block of the row-major selection (the same values in
        # the same order, contiguous like the selection of one row).
        ends = np.cumsum(keep.sum(axis=1)).tolist()
        terms = _PointTerms((-np.expm1(-p.beta_update * eps))[order], p.X[order], p.x_inf[order], shifted[keep],
                            [0, *ends[:-1]], ends, top)
        filled = [j for j in range(k) if bounds[j + 1] > bounds[j]]
        if filled:
            _member_updates(p, state, new, l1, filled, bounds, terms, r_v)
        for j in range(k):
            if bounds[j + 1] > bounds[j]:
                continue
            # An empty cluster keeps its own key (score beta_u / 2, value c~_j); points score <= beta_u eps_i.
            log_w = float(logsumexp(np.concatenate([p.beta_update * (eps - 0.5), [math.log(k) - p.beta_update / 2],
                                                    p.sink_terms - p.beta_update / 2])))
            w_off = min(1.0, float(round_up(exp(min(log_w, 1.0)))))
            reach = r_v + c_norm[j] + state.delta[j]
            move = min(float(round_up(w_off * reach)), float(round_up(reach)))
            # (c~ - c) + eta (o - c~): damping scales only the move (eta = 1: Lloyd's).
            new.delta[j] = float(round_up(state.delta[j] + p.eta * move))
            l1[j] = min(2.0, float(round_up(2 * w_off)))
    state.C, state.e, state.delta = new.C, new.e, new.delta
    return l1


@dataclass(frozen=True)
class _PointTerms:
    """An update layer's per-point terms, sorted stably by hard label: ``spread`` = ``1 - exp(-beta_u eps_i)``,
    the points ``X`` and their largest coordinates ``x_inf``; and per centroid query ``j`` its off-support terms
    ``exp(a - top[j])`` (:func:`_off_mass_terms`) as ``off[off_start[j]:off_end[j]]``."""

    spread: np.ndarray
    X: np.ndarray
    x_inf: np.ndarray
    off: np.ndarray
    off_start: list[int]
    off_end: list[int]
    top: np.ndarray


def _off_mass_terms(p: _Problem, eps: np.ndarray, a: np.ndarray, order: np.ndarray,
                    k: int) -> tuple[np.ndarray, ...]:
    """For every centroid query ``j``, what :func:`~analysis.proof.bound.records.logsumexp_vector` evaluates on its
    off-support scores ``a_j`` (the non-members' ``beta_u (eps_i - 1)`` in point order, then ``-beta_u / 2``,
    ``log k - beta_u`` and the sinks' ``L_u - beta_u``), for all queries at once: ``top[j]`` = ``max a_j`` (0 where
    not finite; a maximum is exact, so it is the largest of the other clusters' maxima and the constants'), and
    ``exp(a_j - top[j])`` elementwise as ``shifted[j][keep[j]]``. Each query's sum is then taken over its own array,
    as before."""
    n, beta_u = len(a), p.beta_update
    scores = np.concatenate([beta_u * (eps - 1), [-beta_u / 2, math.log(k) - beta_u], p.sink_terms - beta_u])
    # Each group's largest score (the labels 0..k-1, and k: the assign sink's outliers); -inf for an empty group.
    starts = np.searchsorted(a[order], np.arange(k + 2))
    filled = starts[:-1] < starts[1:]
    group_top = np.full(k + 1, -np.inf)
    if n:
        group_top[filled] = np.maximum.reduceat(scores[:n][order], starts[:-1][filled])
    others_top = np.where(np.eye(k, k + 1, dtype=bool), -np.inf, group_top[None, :]).max(axis=1)
    top = np.maximum(others_top, np.max(scores[n:]))
    top = np.where(np.isfinite(top), top, 0.0)
    keep = np.ones((k, len(scores)), dtype=bool)
    keep[:, :n] = a[None, :] != np.arange(k)[:, None]
    return exp(scores[None, :] - top[:, None]), keep, top


def _member_updates(p: _Problem, old: _State, new: _State, l1: np.ndarray, filled: list[int], bounds: list[int],
                    terms: _PointTerms, r_v: float) -> None:
    """The non-empty clusters ``filled`` (cluster ``j``'s members: block ``bounds[j]:bounds[j + 1]`` of the sorted
    terms): writes each one's next centroid, float error and ``delta`` into ``new`` and its query's bound on
    ``|softmax - hardmax|_1`` into ``l1``. (The caller ignores over- and underflow.)

    Each cluster's sums are its own ``np.add.reduce`` over its own block (what ``np.sum`` and ``.sum(axis=0)``
    call; a segmented reduction would add in another order); the ``log`` and ``exp`` of all clusters are one call
    each (elementwise, the values one call per cluster gives); the rest is float arithmetic on Python floats,
    the float64 operations the array scalars performed."""
    reduce = np.add.reduce
    sizes = [bounds[j + 1] - bounds[j] for j in filled]
    # z_i = exp(-beta_u (1 - y_ij)) in [exp(-beta_u eps_i), 1]; S = sum (1 - z_i) bounds how far the member weights
    # are from uniform: sum |w_i / W_T - 1 / |S_j|| <= 2 S / (|S_j| - S).
    S = [round_up_scalar(reduce(terms.spread[bounds[j]:bounds[j + 1]])) for j in filled]
    spread, w_off = [2.0] * len(filled), [1.0] * len(filled)
    live = [i for i in range(len(filled)) if sizes[i] - S[i] > 0]
    if live:
        # records.log_sum_shifted and records.exp's np.exp of a float64, for every live query at once.
        sums = np.array([reduce(terms.off[terms.off_start[filled[i]]:terms.off_end[filled[i]]]) for i in live])
        out = np.log(sums) + terms.top[[filled[i] for i in live]]
        log_num = (out + 1e-12 * np.abs(out) + 1e-12).tolist()
        log_w = [log_num[n] - math.log(sizes[i] - S[i]) for n, i in enumerate(live)]
        w = np.exp(np.array([min(value, 1.0) for value in log_w])).tolist()
        for n, i in enumerate(live):
            spread[i] = min(2.0, round_up_scalar(2 * S[i] / (sizes[i] - S[i])))
            w_off[i] = min(1.0, round_up_scalar(w[n]))
    for i, j in enumerate(filled):
        members = slice(bounds[j], bounds[j + 1])
        head = min(round_up_scalar(2 * p.r_x * spread[i] + w_off[i] * r_v), round_up_scalar(r_v))  # |o_j - mean_j|
        mean = reduce(terms.X[members], axis=0) / sizes[i]  # what .mean(axis=0) computes
        e_mean = (sizes[i] + 1) * U * 1.01 * float(np.maximum.reduce(terms.x_inf[members]))
        new.delta[j] = commit_error(float(old.delta[j]), head, p.eta)
        if p.eta == 1.0:
            new.C[j], new.e[j] = mean, e_mean
        else:
            eta, C, e = p.eta, old.C, old.e
            new.C[j] = C[j] + eta * (mean - C[j])
            # Reference rounding: inputs' errors pass as |1 - eta| e + eta e_mean; the subtraction, the product and
            # the sum each round by u times at most eta (|m| + |c|) or |c| + eta (|m| + |c|).
            c_inf, m_inf = float(np.abs(C[j]).max()), float(np.abs(mean).max())
            new.e[j] = (abs(1 - eta) * e[j] + eta * e_mean
                        + 3 * U * (eta * (m_inf + c_inf + e_mean + e[j]) + c_inf + e[j])) * 1.01 + 1e-300
        l1[j] = min(2.0, round_up_scalar(spread[i] + 2 * w_off[i]))
