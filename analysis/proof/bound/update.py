"""The sharpness bound's update layers (:func:`analysis.proof.bound.sharpness.sharpness_bound` evaluates them one
iteration after another): how far each soft centroid may lie from its hard one after the update, and each centroid
query's ``|softmax - hardmax|_1``. The notation is the derivation's in :mod:`analysis.proof.bound.sharpness`.

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

**Trimmed**, the update side (its assign side: :mod:`analysis.proof.bound.assign`). An outlier's soft ``y_ij`` is
at most ``eps_i`` for every ``j``, so in the update head an outlier is a non-member (score ``beta_u y_ij <= beta_u
eps_i``), exactly the role Lloyd's bound gives non-members, and the update bound carries over with members ``S_j`` =
the non-outlier points labelled ``j``. The update heads' own sink (logit ``L_u``, value 0) is one more off-support
key: ``exp(L_u - beta_u)`` joins ``W_j`` (``exp(L_u - beta_u / 2)`` for an empty cluster, one more key in the first
update). The observed ``|softmax - hardmax|_1`` counts the sink's mass too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from analysis.proof.bound.records import (
    U, BoundProblem, HardState, LayerBound, exp, logsumexp, round_up, round_up_scalar,
)
from circuits.blocks import UPDATE


def commit_error(delta: float, head: float, eta: float) -> float:
    """Bound on ``|c~' - c'|`` after an update that commits ``c + eta (o - c)`` for a non-empty cluster, given
    ``delta >= |c~ - c|`` before it and ``head >= |o~ - mean|`` for the head's output: the two commits differ by
    ``(1 - eta)(c~ - c) + eta (o~ - mean)``. Lloyd's (``eta = 1``) discards the old error."""
    if eta == 1.0:
        return head
    return float(round_up(abs(1 - eta) * delta + eta * head))


def first_update(p: BoundProblem, state: HardState, update_sink: bool) -> LayerBound:
    """Layer 0: the first update commits C0; centroid j attends to its own key (value 0), every other key scores
    beta_update / 2 below it and only point keys carry a non-zero value. Sets ``state.delta``."""
    n, k = len(p.X), len(state.C)
    log_off = math.log(n + k + (1 if update_sink else 0)) - p.beta_update / 2
    log_delta = math.log(n * p.r_x) - p.beta_update / 2 if n and p.r_x > 0 else -math.inf
    state.delta = np.full(k, float(round_up(exp(log_delta))) if log_delta > -math.inf else 0.0)
    return LayerBound(0, UPDATE, 0, float(round_up(2 * exp(log_off))), (math.log(2) + log_off) / math.log(10),
                      centroid=float(state.delta.max()))


def update_layer(p: BoundProblem, state: HardState, a: np.ndarray, eps: np.ndarray) -> np.ndarray:
    """Advance ``state`` by one update (centroids of the next iteration, their float error and ``delta``); returns
    each centroid query's bound on ``|softmax - hardmax|_1``."""
    d, k = p.X.shape[1], len(state.C)
    E = np.sqrt(d) * state.e
    c_norm = np.sqrt((state.C**2).sum(axis=1)) * (1 + (d + 2) * U) + E
    r_v = p.r_x + max(p.r_x, float((c_norm + state.delta).max()))
    new = HardState(state.C.copy(), state.e.copy(), state.delta.copy())
    l1 = np.zeros(k)
    # Per point, once for every cluster (elementwise, so each cluster's selection holds the values it would compute):
    # 1 - z_i's lower bound and a non-member's score term; the points sorted stably by label, so each cluster's
    # members are one block holding the rows of X[a == j] in their order. A stable order is unique, so the labels
    # (0..k) are sorted as the narrowest integers that hold them, which numpy sorts by radix: 10 ms at a million
    # points against 48 ms for the same order of intp labels.
    order = np.argsort(a.astype(np.min_scalar_type(k)), kind="stable")
    bounds = np.searchsorted(a[order], np.arange(k + 1)).tolist()
    with np.errstate(over="ignore", under="ignore", divide="ignore"):
        shifted, keep, top = off_mass_terms(p, eps, a, order, k)
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
    ``exp(a - top[j])`` (:func:`off_mass_terms`) as ``off[off_start[j]:off_end[j]]``."""

    spread: np.ndarray
    X: np.ndarray
    x_inf: np.ndarray
    off: np.ndarray
    off_start: list[int]
    off_end: list[int]
    top: np.ndarray


def off_mass_terms(p: BoundProblem, eps: np.ndarray, a: np.ndarray, order: np.ndarray,
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


def _member_updates(p: BoundProblem, old: HardState, new: HardState, l1: np.ndarray, filled: list[int],
                    bounds: list[int], terms: _PointTerms, r_v: float) -> None:
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
