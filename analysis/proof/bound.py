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
from dataclasses import dataclass, field

import numpy as np
from jaxtyping import Float

from analysis.proof.registry import BOUNDED_VARIANTS
from circuits.blocks import ASSIGN, UPDATE
from circuits.reference import sq_distances

U = 2.0**-53
TINY = 5e-324
#: Outward rounding applied to every evaluated bound.
SLACK = 1 + 1e-9


def _up(x: float | np.ndarray):
    """Round a non-negative bound up, and never below the smallest positive float64."""
    return np.maximum(np.asarray(x, dtype=np.float64) * SLACK, TINY)


def _gamma(m: int) -> float:
    return m * U / (1 - m * U)


def _logsumexp(a: np.ndarray, axis: int = -1) -> np.ndarray | float:
    top = np.max(a, axis=axis, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    with np.errstate(under="ignore", over="ignore", divide="ignore"):
        out = np.log(np.sum(np.exp(a - top), axis=axis)) + np.squeeze(top, axis=axis)
    # Outward: a tiny relative and absolute push up covers the float evaluation of the sum.
    return out + 1e-12 * np.abs(out) + 1e-12


def _exp(a) -> np.ndarray | float:
    with np.errstate(under="ignore", over="ignore"):
        return np.exp(np.asarray(a, dtype=np.float64))


@dataclass
class LayerBound:
    """Bound for one layer. ``softmax_l1`` bounds ``sum_keys |softmax - hardmax|`` for every algorithmic query
    (point queries of an assign layer, centroid queries of an update layer)."""

    layer: int
    kind: str
    iteration: int
    softmax_l1: float
    log10_softmax_l1: float
    assignment_l1: float | None = None
    uncertified_labels: int | None = None
    centroid: float | None = None


@dataclass
class SharpnessBound:
    """Per-layer bounds and, per iteration ``t``, the bound on the centroid error in the user's units."""

    scale: float
    certified: bool
    layers: list[LayerBound]
    centroid_user: list[float]
    assumptions: str = ("real-arithmetic bound, valid for circuits whose obligations hold (kmeans-circuits prove);"
                        " float rounding inside the forward pass is covered by the verifier's tolerance, not here")
    notes: list[str] = field(default_factory=list)

    def iteration_bound(self, t: int) -> float:
        """Bound on ``max_j |c_circuit - c_hard|`` after ``t`` iterations, user units."""
        return self.centroid_user[t]

    def layer(self, layer: int) -> LayerBound:
        return next(lb for lb in self.layers if lb.layer == layer)


@dataclass
class HardTrajectory:
    """The hard circuit's trajectory in unit coordinates (float64, with its rounding bounds)."""

    centroids: list[Float[np.ndarray, "k d"]]
    labels: list[np.ndarray]
    certified: list[bool]


def commit_error(delta: float, head: float, eta: float) -> float:
    """Bound on ``|c~' - c'|`` after an update that commits ``c + eta (o - c)`` for a non-empty cluster, given
    ``delta >= |c~ - c|`` before it and ``head >= |o~ - mean|`` for the head's output: the two commits differ by
    ``(1 - eta)(c~ - c) + eta (o~ - mean)``. Lloyd's (``eta = 1``) discards the old error."""
    if eta == 1.0:
        return head
    return float(_up(abs(1 - eta) * delta + eta * head))


def tie_breaks(tie_break: float, k: int) -> np.ndarray:
    """``t_j`` as the circuit's weights hold them: ``tie_break * j`` rounded once to float64."""
    return np.array([float(tie_break * j) for j in range(k)])


def sharpness_bound(X: Float[np.ndarray, "n d"], C0: Float[np.ndarray, "k d"], iterations: int, beta: float,
                    beta_update: float, mask: float, tie_break: float, scale: float = 1.0, *, eta: float = 1.0,
                    sink: float | None = None, update_sink: float | None = None,
                    ) -> tuple[SharpnessBound, HardTrajectory]:
    """The bound for unit-scaled points ``X`` and initial centroids ``C0`` (as the circuit receives them).

    Lloyd's circuit by default; ``eta`` the damped variant's step (updates after the first); ``sink`` the assign
    heads' attention-sink logit and ``update_sink`` the update heads' (trimmed). Outliers get label -1.
    """
    X = np.asarray(X, dtype=np.float64)
    C = np.asarray(C0, dtype=np.float64).copy()
    n, d = X.shape
    k = C.shape[0]
    t = tie_breaks(tie_break, k)
    layers: list[LayerBound] = []
    centroid_user: list[float] = []
    traj = HardTrajectory([C.copy()], [], [])
    x_norm = np.sqrt((X**2).sum(axis=1)) * (1 + (d + 2) * U) + TINY
    r_x = float(x_norm.max()) if n else 0.0
    x_inf = np.abs(X).max(axis=1) if n else np.zeros(0)
    e = np.zeros(k)  # per-coordinate float error of the reference centroids
    sink_terms = np.array([] if update_sink is None else [float(update_sink)])
    certified = True
    notes: list[str] = []

    # Layer 0: the first update commits C0; centroid j attends to its own key (value 0), every other key scores
    # beta_update / 2 below it and only point keys carry a non-zero value.
    n_sinks = 0 if update_sink is None else 1
    log_off = math.log(n + k + n_sinks) - beta_update / 2
    log_delta = math.log(n * r_x) - beta_update / 2 if n and r_x > 0 else -math.inf
    delta = np.full(k, float(_up(_exp(log_delta))) if log_delta > -math.inf else 0.0)
    layers.append(LayerBound(0, UPDATE, 0, float(_up(2 * _exp(log_off))), (math.log(2) + log_off) / math.log(10),
                             centroid=float(delta.max())))
    centroid_user.append(float(_up(delta.max() * scale)))
    layer = 1
    for it in range(iterations + 1):
        # ---- assign layer: point queries against the centroids of iteration `it`.
        D = sq_distances(X, C)
        E = np.sqrt(d) * e  # Euclidean error of the float centroids
        g = _gamma(d + 2)
        rho = (g * D * (1 + 2 * g) + 2 * np.sqrt(D) * (1 + g) * E[None, :] + E[None, :] ** 2
               + U * (D + t[None, :])) * 1.01 + 1e-300
        V = D + t[None, :]
        if sink is not None:
            # The sink as a (k+1)-th candidate: V_sink = -L / beta (one division, rounded), no centroid error.
            v_sink = -sink / beta
            V = np.concatenate([V, np.full((n, 1), v_sink)], axis=1)
            rho = np.concatenate([rho, np.full((n, 1), 2 * U * abs(v_sink) + 1e-300)], axis=1)
        a = np.argmin(V, axis=1)
        rows = np.arange(n)
        Va, rho_a = V[rows, a], rho[rows, a]
        gap = V - Va[:, None] - rho - rho_a[:, None]
        gap[rows, a] = np.inf
        ok = bool(np.all(gap > 0)) if V.shape[1] > 1 else True
        if not ok and certified:
            certified = False
            notes.append(f"iteration {it}: the float reference cannot certify the nearest centroid of"
                         f" {int((gap <= 0).any(axis=1).sum())} point(s) (margins below rounding); bounds are inf from here")
        traj.labels.append(np.where(a == k, -1, a))
        traj.certified.append(certified)
        if not certified:
            # Assign layer of iteration s sits at 2s + 1, update layer of iteration s at 2s.
            layers.append(LayerBound(2 * it + 1, ASSIGN, it, math.inf, math.inf, math.inf, n))
            for s in range(it + 1, iterations + 1):
                layers.append(LayerBound(2 * s, UPDATE, s, math.inf, math.inf, centroid=math.inf))
                layers.append(LayerBound(2 * s + 1, ASSIGN, s, math.inf, math.inf, math.inf, n))
            centroid_user.extend([math.inf] * (iterations - it))
            break
        dist = np.sqrt(D * (1 + g)) + E[None, :]
        shift = 2 * dist * delta[None, :] + delta[None, :] ** 2
        if sink is not None:
            shift = np.concatenate([shift, np.zeros((n, 1))], axis=1)
        with np.errstate(invalid="ignore"):
            expo = -beta * (gap - shift - shift[rows, a][:, None])
        expo[rows, a] = -np.inf
        mask_expo = math.log(n + 1) - beta * (mask - (Va + rho_a) - shift[rows, a])
        log_eps = _logsumexp(np.concatenate([expo, mask_expo[:, None]], axis=1), axis=1)
        log_eps = np.minimum(log_eps, 0.0)  # eps <= 1 always
        eps = _up(_exp(log_eps))
        eps = np.minimum(eps, 1.0)
        worst = float(log_eps.max()) if n else -math.inf
        layers.append(LayerBound(layer, ASSIGN, it, float(_up(2 * eps.max())) if n else 0.0,
                                 (math.log(2) + worst) / math.log(10), float(_up(2 * eps.max())) if n else 0.0,
                                 int((eps >= 0.5).sum())))
        layer += 1
        if it == iterations:
            break
        # ---- update layer: centroids of iteration it + 1.
        c_norm = np.sqrt((C**2).sum(axis=1)) * (1 + (d + 2) * U) + E
        r_v = r_x + max(r_x, float((c_norm + delta).max()))
        new_delta = delta.copy()
        l1 = np.zeros(k)
        new_C = C.copy()
        new_e = e.copy()
        for j in range(k):
            members = a == j
            size = int(members.sum())
            if size:
                # z_i = exp(-beta_u (1 - y_ij)) in [exp(-beta_u eps_i), 1]; S = sum (1 - z_i) bounds how far the
                # member weights are from uniform: sum |w_i / W_T - 1 / |S_j|| <= 2 S / (|S_j| - S).
                with np.errstate(under="ignore"):
                    S = float(_up(np.sum(-np.expm1(-beta_update * eps[members]))))
                denom = size - S
                if denom > 0:
                    spread = min(2.0, float(_up(2 * S / denom)))
                    with np.errstate(over="ignore", under="ignore"):
                        log_num = float(_logsumexp(np.concatenate([beta_update * (eps[~members] - 1),
                                                                   [-beta_update / 2, math.log(k) - beta_update],
                                                                   sink_terms - beta_update])))
                    log_w = log_num - math.log(denom)
                    w_off = min(1.0, float(_up(_exp(min(log_w, 1.0)))))
                else:
                    spread, w_off = 2.0, 1.0
                head = min(float(_up(2 * r_x * spread + w_off * r_v)), float(_up(r_v)))  # |o_j - mean_j|
                l1[j] = min(2.0, float(_up(spread + 2 * w_off)))
                mean = X[members].mean(axis=0)
                e_mean = (size + 1) * U * 1.01 * float(x_inf[members].max())
                new_delta[j] = commit_error(float(delta[j]), head, eta)
                if eta == 1.0:
                    new_C[j], new_e[j] = mean, e_mean
                else:
                    new_C[j] = C[j] + eta * (mean - C[j])
                    # Reference rounding: inputs' errors pass as |1 - eta| e + eta e_mean; the subtraction, the
                    # product and the sum each round by u times at most eta (|m| + |c|) or |c| + eta (|m| + |c|).
                    c_inf, m_inf = float(np.abs(C[j]).max()), float(np.abs(mean).max())
                    new_e[j] = (abs(1 - eta) * e[j] + eta * e_mean
                                + 3 * U * (eta * (m_inf + c_inf + e_mean + e[j]) + c_inf + e[j])) * 1.01 + 1e-300
            else:
                # An empty cluster keeps its own key (score beta_u / 2, value c~_j); points score <= beta_u eps_i.
                with np.errstate(over="ignore", under="ignore"):
                    log_w = float(_logsumexp(np.concatenate([beta_update * (eps - 0.5),
                                                             [math.log(k) - beta_update / 2],
                                                             sink_terms - beta_update / 2])))
                w_off = min(1.0, float(_up(_exp(min(log_w, 1.0)))))
                move = min(float(_up(w_off * (r_v + c_norm[j] + delta[j]))), float(_up(r_v + c_norm[j] + delta[j])))
                # (c~ - c) + eta (o - c~): damping scales only the move (eta = 1: Lloyd's).
                new_delta[j] = float(_up(delta[j] + eta * move))
                l1[j] = min(2.0, float(_up(2 * w_off)))
        delta, C, e = new_delta, new_C, new_e
        traj.centroids.append(C.copy())
        worst_l1 = float(l1.max())
        layers.append(LayerBound(layer, UPDATE, it + 1, worst_l1,
                                 math.log10(worst_l1) if 0 < worst_l1 < math.inf else (math.inf if worst_l1 else -math.inf),
                                 centroid=float(delta.max())))
        centroid_user.append(float(_up(delta.max() * scale)))
        layer += 1
    return SharpnessBound(scale, certified, layers, centroid_user, notes=notes), traj


def _sink_logits(circ, kind: str) -> float | None:
    """The sink logit of the ``kind`` layers (``None`` without sinks), read from the weights the structured path runs."""
    if not getattr(circ.runnable.cfg, "use_attention_sinks", False):
        return None
    values = {float(circ.runnable.blocks[layer].attn.sinks.detach().reshape(-1)[0]) for layer in circ.layers_of(kind)}
    # Tied weights share one value; if they did not, the largest logit is the worst case for the update heads.
    return max(values) if kind == UPDATE or len(values) == 1 else None


def bound_for_capture(cap, b: int = 0) -> tuple[SharpnessBound, HardTrajectory] | None:
    """The bound for problem ``b`` of a captured run of Lloyd's circuit or the damped or trimmed variant (float64
    only; ``None`` otherwise, and for a damped ``eta`` whose ``1 - eta`` is not a float64)."""
    from fractions import Fraction

    import torch

    from circuits.encoding import read

    circ, enc = cap.circuit, cap.encoded
    if circ.variant not in BOUNDED_VARIANTS or circ.dtype != torch.float64:
        return None
    eta = float(circ.params.get("eta", 1.0)) if circ.variant == "damped" else 1.0
    if Fraction(1) - Fraction(eta) != Fraction(1.0 - eta):
        return None  # the norm units then do not hold |c|^2 exactly (update.MLP.damped_square_norm fails)
    sink = update_sink = None
    if circ.variant == "trimmed":
        sink, update_sink = _sink_logits(circ, ASSIGN), _sink_logits(circ, UPDATE)
        if sink is None:
            return None
    seq = enc.sequence
    X = read(circ.layout, enc.resid, "X", seq.points)[b]
    C0 = read(circ.layout, enc.resid, "C_stage", seq.centroids)[b]
    s = circ.sharpness
    return sharpness_bound(X, C0, circ.iterations, s.beta, s.beta_update, s.mask, s.tie_break,
                           float(enc.scaling.scale[b]), eta=eta, sink=sink, update_sink=update_sink)


def observed_softmax_l1(cap, traj: HardTrajectory, b: int = 0) -> dict[int, float]:
    """Observed ``max sum_keys |softmax - hardmax|`` per layer against the hard trajectory (for checking the bound)."""
    circ = cap.circuit
    seq = cap.encoded.sequence
    out: dict[int, float] = {}
    for lc in cap.layers:
        att = lc.attention
        if lc.kind == ASSIGN:
            it = circ.assignment_layers.index(lc.layer)
            if it >= len(traj.labels):
                continue
            p = att.pattern[b]  # points x centroids
            k = p.shape[1]
            hard = np.eye(k + 1)[traj.labels[it]]  # label -1: the sink (column k)
            sink = att.sink_mass[b] if att.sink_mass is not None else np.zeros(len(p))
            masked = np.abs(1 - p.sum(axis=1) - sink)  # point and BOS keys (hard weight 0)
            out[lc.layer] = float((np.abs(p - hard[:, :k]).sum(axis=1) + masked + np.abs(sink - hard[:, k])).max()) \
                if len(p) else 0.0
        elif lc.kind == UPDATE:
            it = circ.centroid_layers.index(lc.layer)
            if it > len(traj.labels):
                continue
            p = att.pattern[b]  # centroids x positions
            hard = np.zeros_like(p)
            for j in range(p.shape[0]):
                members = np.flatnonzero(traj.labels[it - 1] == j) + seq.points.start if it > 0 else np.array([], int)
                if len(members):
                    hard[j, members] = 1 / len(members)
                else:
                    hard[j, seq.centroid(j)] = 1.0
            sink = np.abs(1 - p.sum(axis=1)) if getattr(circ.runnable.cfg, "use_attention_sinks", False) else 0.0
            out[lc.layer] = float((np.abs(p - hard).sum(axis=1) + sink).max())
    return out


def format_bound(x: float | None) -> str:
    """Table text: ``0``, or ``<2.2e-308`` below float64's normal range (an outward-rounded subnormal, not a value)."""
    if x is None:
        return "n/a"
    if x == 0:
        return "0"
    if x < np.finfo(np.float64).tiny:
        return f"<{np.finfo(np.float64).tiny:.1e}"
    return f"{x:.1e}"


def bound_violations(cap, b: int = 0, proven: tuple[SharpnessBound, HardTrajectory] | None = None,
                     slack: float = 1e-13) -> list[str]:
    """Where a captured run exceeds its proven bound (empty when the bound holds), checked layer by layer.

    Compared, against the hard trajectory: each layer's ``sum |softmax - hardmax|``; each assign layer's
    ``|Y - one-hot|`` and its labels (only points the bound leaves uncertified may differ); each update layer's
    centroids (unit-scaled). ``slack`` (absolute) and the verifier's centroid tolerance stand for the float64
    rounding of the forward pass, which the bound does not cover.
    """
    proven = proven if proven is not None else bound_for_capture(cap, b)
    if proven is None:
        return []
    bound, traj = proven
    circ = cap.circuit
    scale = float(cap.encoded.scaling.scale[b])
    eps = float(np.finfo(np.float64).eps)
    c_slack = 1e3 * eps + 64 * eps * float(np.abs(np.concatenate([cap.encoded.X[b], cap.encoded.C0[b]])).max()) / scale
    observed = observed_softmax_l1(cap, traj, b)
    out = []
    for lb in bound.layers:
        if lb.layer not in observed or not math.isfinite(lb.softmax_l1):
            continue
        if observed[lb.layer] > lb.softmax_l1 + slack:
            out.append(f"layer {lb.layer} ({lb.kind}): |softmax - hardmax|_1 = {observed[lb.layer]:.3g} > bound {lb.softmax_l1:.3g}")
        lc = cap.layers[lb.layer]
        if lb.kind == ASSIGN and lb.assignment_l1 is not None and math.isfinite(lb.assignment_l1):
            it = circ.assignment_layers.index(lb.layer)
            Y = lc.post.assignments[b]
            hard_Y = np.eye(Y.shape[1] + 1)[traj.labels[it]][:, :-1]  # outliers (label -1): 0
            dev = float(np.abs(Y - hard_Y).sum(axis=1).max()) if len(Y) else 0.0
            if dev > lb.assignment_l1 + slack:
                out.append(f"layer {lb.layer}: |Y - one-hot|_1 = {dev:.3g} > bound {lb.assignment_l1:.3g}")
            wrong = int((lc.post.labels[b] != traj.labels[it]).sum())
            if wrong > lb.uncertified_labels:
                out.append(f"layer {lb.layer}: {wrong} labels differ from the hard trajectory, only"
                           f" {lb.uncertified_labels} uncertified")
        if lb.kind == UPDATE and lb.centroid is not None and math.isfinite(lb.centroid):
            it = circ.centroid_layers.index(lb.layer)
            err = float(np.sqrt(((lc.post.unit_centroids[b] - traj.centroids[it]) ** 2).sum(axis=1)).max())
            if err > lb.centroid + c_slack:
                out.append(f"layer {lb.layer}: centroids {err:.3g} from the hard trajectory > bound {lb.centroid:.3g}")
    return out
