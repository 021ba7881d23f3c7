"""The sharpness bound's assign layers (:func:`analysis.proof.bound.sharpness.sharpness_bound` evaluates them one
iteration after another): each point's hard label on the hard trajectory, its certified margins, and its mass off
that label. The notation is the derivation's in :mod:`analysis.proof.bound.sharpness`.

**Assign layer** (point query ``i``). Scores: centroid ``j``: ``beta (|x_i|^2 - |x_i - c~_j|^2 - t_j)``; point and BOS
keys ``<= -beta mask``. With ``eta_ij = 2 |x_i - c_j| Delta_j + Delta_j^2 >= ||x_i - c~_j|^2 - |x_i - c_j|^2|`` the
mass off ``a = a(i)`` is at most::

    eps_i = sum_{j != a} exp(-beta (V_ij - V_ia - eta_ij - eta_ia)) + (n + 1) exp(-beta (mask - V_ia - eta_ia))

(``|x_i|^2 >= 0`` dropped). ``|softmax - hardmax|_1 = 2 (1 - p_ia) <= 2 eps_i``, and ``Y_i = Y_stage_i`` is the
pattern over centroid keys, so ``|Y_i - e_a|_1 <= 2 eps_i``; the label (argmax of ``Y``) is ``a`` when ``eps_i < 1/2``.

**Trimmed** (assign sink logit ``L``; :mod:`circuits.variants.trimmed`). With ``NX = |x|^2`` exact the centroid
scores are exactly ``-beta V_ij`` and the sink is one more key of score ``L = -beta V_sink`` (``V_sink =
-L / beta``, evaluated with its rounding) and value 0, so it is a competitor like a centroid with ``Delta = 0``:
``a(i)`` is the argmin over the ``k`` centroids *and* the sink, its margin is the gap to the runner-up among all
``k + 1`` (an outlier's runner-up is its nearest centroid, a member's may be the sink), and ``eps_i`` sums over all of
them (masked keys still score ``<= -beta (mask + |x_i|^2)``). An outlier's hard ``Y`` is 0 and its soft ``Y`` holds
the mass off the sink, ``<= eps_i``: so ``|Y_i - 0|_1 <= eps_i``, every ``y_ij <= eps_i`` and its label reads -1 when
``eps_i < 1/2``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from analysis.proof.bound.records import U, BoundProblem, HardState, LayerBound, exp, gamma, logsumexp, round_up
# The textbook's distances (circuits.reference.sq_distances) bit for bit, a block of rows at a time: 2.7x faster
# on a chunk of the bound (tests/unit/test_verify_fast.py holds the two equal).
from analysis.verify.fast.blocks import sq_distances
from circuits.blocks import ASSIGN


@dataclass
class Margins:
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


def margins(p: BoundProblem, state: HardState) -> Margins:
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
    return Margins(a, gap, D, E, Va, rho_a)


#: Points per pass of an assign layer's bound (:func:`assign_pass`): its ``n x k`` temporaries (distances, rounding
#: bounds, gaps, exponents: about ten) exist for one chunk at a time, not for every point. Every step is elementwise
#: or per point (``tests/unit/test_bound_chunks.py`` holds the bound to the same numbers for chunks of 1, 3 and 64).
#: 8,192 points keep a chunk's temporaries (about 0.7 MB each at k = 10) near the core's cache: at a million points
#: the bound took 9.8 s of CPU against 10.8-11.1 s in chunks of 65,536 (docs/performance.md, "The eighth round").
BOUND_CHUNK = 1 << 13


def assign_pass(p: BoundProblem, state: HardState, it: int) -> tuple[np.ndarray, np.ndarray, int, LayerBound | None]:
    """Iteration ``it``'s assign layer over every point, :data:`BOUND_CHUNK` points at a time: the hard labels, each
    point's mass off its label ``eps_i``, the number of points whose nearest candidate the float reference cannot
    certify, and the layer's bound (``None``, and ``eps`` not evaluated, when that number is not 0)."""
    n = len(p.X)
    labels, eps, log_eps = np.empty(n, dtype=np.intp), np.empty(n), np.empty(n)
    uncertain = 0
    for start in range(0, n, BOUND_CHUNK):
        rows = slice(start, min(n, start + BOUND_CHUNK))
        part = replace(p, X=p.X[rows], x_inf=p.x_inf[rows])
        m = margins(part, state)
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


def _assign_eps(p: BoundProblem, state: HardState, m: Margins, n: int) -> tuple[np.ndarray, np.ndarray]:
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
