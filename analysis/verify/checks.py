"""The comparisons a verification is made of: rounding windows, one assignment against its reference step,
certificates.

The trajectory of a hard circuit whose costs are squared distances is held to its certified reference run, in
exact arithmetic at the data's precision (:mod:`analysis.verify.decisions`). What is compared here is a block's
output against the reference step on the block's own decoded input (:func:`check_costs`): that input carries the
decoding's rounding, so two costs within what float64 can order there (:func:`distance_uncertainty`, per point
``i`` and centroid ``j``: the representation of points and centroids in the user's units, ``8 u sqrt(d D_ij)
(|x_i| + |c_j| + 2|mu|)``, and the rounding of ``D_ij`` itself, ``(d + 2) u D_ij``) tie: a gap there says nothing
about the block. An error whose gap lies within the circuit's tie-break ``t |j1 - j2|`` (the lower index chosen) is
marked as caused by the tie-break, one within the circuit's own rounding as a resolution failure.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from analysis.capture import Capture
from analysis.verify.report import Check, Mismatch, MismatchKind, Tie, Unresolved
from analysis.verify.windows import RowsOnDemand, circuit_uncertainty, distance_ties, distance_uncertainty
from analysis.verify.fast import blocks
from circuits import reference
from circuits.blocks import ASSIGN
from circuits.build import KMeansCircuit
from circuits.encoding import EncodedBatch
from circuits.reference import Costs
from circuits.sharpness import UNIT_ROUNDOFF, score_rounding

#: A soft trajectory may drift from the reference this many times the reference's own float64 noise floor.
FLOOR_FACTOR = 100.0

Window = Callable[[np.ndarray, np.ndarray], np.ndarray]


def resolution_window(circ: KMeansCircuit, enc: EncodedBatch, b: int = 0) -> Window:
    """``(C, D) -> E``: float64's window of the squared distances ``D`` to ``C`` in the user's units, for problem
    ``b`` (:func:`distance_uncertainty`), whatever the circuit's dtype: what the step-wise checks tie within (what a
    coarser dtype cannot resolve is :func:`circuit_window`'s)."""
    X, offset = enc.X[b], enc.scaling.offset[b]
    x_norms = np.linalg.norm(X, axis=1)
    return lambda C, D: distance_uncertainty(X, C, D, offset, UNIT_ROUNDOFF, x_norms)


def circuit_input_window(circ: KMeansCircuit, enc: EncodedBatch, b: int = 0) -> Callable[[np.ndarray], np.ndarray] | None:
    """``C -> E``: how far a circuit of a coarser dtype than float64 holds each squared distance from the one of
    its inputs' exact values (:func:`distance_uncertainty` at its unit roundoff); ``None`` for float64."""
    u = float(torch.finfo(circ.dtype).eps) / 2
    if u <= UNIT_ROUNDOFF:
        return None
    X, offset = enc.X[b], enc.scaling.offset[b]
    x_norms = np.linalg.norm(X, axis=1)
    return lambda C: distance_uncertainty(X, C, blocks.sq_distances(X, C), offset, u, x_norms)


def circuit_window(circ: KMeansCircuit, enc: EncodedBatch, b: int = 0) -> Callable[[np.ndarray], np.ndarray]:
    """``C -> E_circuit``: how far the circuit's own score for point ``i`` and centroid ``j`` may be from the exact
    squared distance, in squared user units, for problem ``b``: its score rounding (:func:`circuit_uncertainty`,
    ``gamma`` at the circuit dtype's unit roundoff) plus, where the circuit computes in a coarser dtype than
    float64, the representation of points and centroids in that dtype (:func:`distance_uncertainty` at its
    unit roundoff: a float32 circuit holds its inputs and its centroids rounded to float32)."""
    X, offset, s = enc.X[b], enc.scaling.offset[b], float(enc.scaling.scale[b])
    u = float(torch.finfo(circ.dtype).eps) / 2
    gamma = score_rounding(circ.layout.d, circ.layout.d_model) * u / UNIT_ROUNDOFF

    coarse = circuit_input_window(circ, enc, b)
    ux = np.linalg.norm((X - offset) / s, axis=1)

    def window(C: np.ndarray) -> np.ndarray:
        E = circuit_uncertainty(X, C, offset, s, gamma, circ.sharpness.tie_break, ux)
        return E if coarse is None else E + coarse(C)

    if coarse is None:
        # Rows of points on their own (each row of circuit_uncertainty reads its point alone): what a check that
        # reads a few entries asks for (circuit_rows), without the n x k matrix.
        window.rows = lambda C, points: circuit_uncertainty(X[points], C, offset, s, gamma, circ.sharpness.tie_break,
                                                            ux[points])
    return window


def unresolved_decisions(D: np.ndarray, got: np.ndarray, tie_break_abs: float, E_circuit: np.ndarray, layer: int,
                         iteration: int) -> list[Unresolved]:
    """Points whose assignment the circuit's dtype cannot decide: its two best candidates, by the cost the circuit
    minimises (``D_ij + t j``, ``t`` its tie-break in squared user units), are closer than their rounding
    windows ``E_circuit`` together. Such a label is whatever the rounding made it; it cannot be certified to be
    the reference's even where it happens to equal it. (An exact float64 tie that the tie-break sends to the
    lower index is decided, as long as ``t`` exceeds the rounding.)"""
    if D.shape[1] < 2:
        return []
    V = D + tie_break_abs * np.arange(D.shape[1])[None, :]
    two = np.argsort(V, axis=1, kind="stable")[:, :2]
    rows = np.arange(len(V))
    gap = V[rows, two[:, 1]] - V[rows, two[:, 0]]
    window = E_circuit[rows, two[:, 0]] + E_circuit[rows, two[:, 1]]
    return [Unresolved(int(i), layer, iteration, [int(two[i, 0]), int(two[i, 1])], int(got[i]), float(gap[i]),
                       float(window[i])) for i in np.flatnonzero(gap <= window)]


def by_distance(circ: KMeansCircuit) -> bool:
    """Whether the circuit's hard assignment minimises squared distances (every variant but spherical's cosines)."""
    return not circ.spec.normalise_centroids


def make_reference(cap: Capture, b: int = 0) -> reference.Reference:
    """The reference the circuit is held to, in the user's units. Distance costs keep no tie-break (their ties are
    the data's precision's: :mod:`analysis.verify.fast.certified`); cosine costs keep the circuit's tie-break as
    their tie rule."""
    circ, enc = cap.circuit, cap.encoded
    s = float(enc.scaling.scale[b])
    return circ.spec.reference(s, 0.0 if by_distance(circ) else circ.sharpness.tie_break * s**2, b)


def certified(ref: reference.Reference, circ: KMeansCircuit) -> bool:
    """Whether the reference runs certified, at the data's precision: a hard one whose costs are distances."""
    return ref.hard and by_distance(circ)


def run_reference(cap: Capture, b: int = 0):
    """Problem ``b``'s reference (:func:`make_reference`) and its run from the circuit's initial centroids, on the
    points the circuit received: a :class:`~analysis.verify.fast.certified.CertifiedRun` at the data's precision
    where :func:`certified`, else the reference's own :class:`~circuits.reference.Trace`."""
    from analysis.verify.fast.certified import certified_run

    enc, ref = cap.encoded, make_reference(cap, b)
    X, C0, T = enc.X[b], enc.C0[b], cap.circuit.iterations
    return ref, (certified_run(ref, X, C0, T) if certified(ref, cap.circuit) else ref.run(X, C0, T))


def trace_of(run) -> reference.Trace:
    """The trajectory of a run :func:`run_reference` made (a certified run's is its ``trace``)."""
    from analysis.verify.fast.certified import CertifiedRun

    return run.trace if isinstance(run, CertifiedRun) else run


def reference_trace(cap: Capture, b: int = 0) -> reference.Trace:
    """The reference's run from the circuit's initial centroids, on the points the circuit received (certified at
    the data's precision where :func:`certified`)."""
    return trace_of(run_reference(cap, b)[1])


@dataclass(frozen=True)
class At:
    """Where an assignment is checked: its layer, its iteration, and which comparison (step-wise or trajectory)."""

    layer: int
    iteration: int
    check: Check


@dataclass(frozen=True)
class TieRule:
    """How close two costs must be to tie (see :func:`check_costs`): a per-entry uncertainty ``E`` (distance costs)
    with the circuit's tie-break ``tie_break_abs`` and own rounding ``E_circuit`` for naming causes; or, without
    ``E`` (cosine costs), the tie-break the circuit applies scaled by ``bias_scale``, plus ``rounding``."""

    rounding: float
    bias_scale: float = 1.0
    E: np.ndarray | None = None
    tie_break_abs: float = 0.0
    E_circuit: np.ndarray | RowsOnDemand | None = None


def check_costs(cost: Costs, got: np.ndarray, margins: np.ndarray, at: At, rule: TieRule,
                expected: np.ndarray | None = None) -> tuple[list[Mismatch], list[Tie]]:
    """Labels ``got`` against the argmin of ``cost`` (or ``expected``); ties within the stated window.

    With a per-entry uncertainty ``rule.E`` (distance costs) two columns tie for a point when their costs differ
    by at most ``E_ij1 + E_ij2``; an error whose gap lies within the circuit's tie-break
    ``rule.tie_break_abs * |j1 - j2|`` and that went to the lower index is marked ``"tie-break"`` in
    ``Mismatch.cause``, one within the circuit's own rounding ``rule.E_circuit`` (centroid columns)
    ``"resolution"``. Without ``E`` (cosine costs) the window is ``bias_scale * |bias_1 - bias_2| + rounding``:
    the tie-break the circuit applies, plus float64 rounding.
    """
    E, E_circuit, tie_break_abs = rule.E, rule.E_circuit, rule.tie_break_abs
    layer, iteration, check = at.layer, at.iteration, at.check
    V, labels = cost.values, np.asarray(cost.labels)
    col_of = {int(label): c for c, label in enumerate(labels)}
    if expected is None:
        exp_col = np.argmin(V + cost.bias, axis=1) if E is None else blocks.assign_within_biased(V, cost.bias, E)
        expected = labels[exp_col]
    else:
        exp_col = _columns(labels, col_of, expected)
    if E is None:
        rows = np.arange(len(V))
        window = rule.bias_scale * np.abs(cost.bias[None, :] - cost.bias[exp_col][:, None]) + rule.rounding
        near = np.abs(V - V[rows, exp_col][:, None]) <= window  # what float64 cannot order
        tied = {int(i): near[i] for i in np.flatnonzero(near.sum(axis=1) > 1)}
        row_of = lambda i: (window[i], near[i])  # noqa: E731
    else:
        tied, row_of = distance_ties(V, E, exp_col)
    ties = [Tie(i, layer, iteration, [int(labels[c]) for c in np.flatnonzero(row)], int(got[i]), float(margins[i]))
            for i, row in tied.items()]
    mismatches = []
    for i in np.flatnonzero(np.asarray(expected) != got):
        e, g = int(expected[i]), int(got[i])
        g_col = col_of.get(g)
        gap = float(V[i, g_col] - V[i, exp_col[i]]) if g_col is not None else math.inf
        window_i, near_i = row_of(int(i))
        kind = MismatchKind.TIE if g_col is not None and near_i[g_col] else MismatchKind.ERROR
        w = float(window_i[g_col]) if g_col is not None else 0.0
        cause = ""
        if kind == MismatchKind.ERROR and E is not None and g >= 0 and e >= 0:
            if g < e and gap <= tie_break_abs * (e - g) + w:
                cause = "tie-break"
            elif E_circuit is not None and abs(gap) <= E_circuit[i, g] + E_circuit[i, e] + w:
                cause = "resolution"
        mismatches.append(Mismatch(int(i), layer, iteration, e, g, float(margins[i]), gap, kind, Check(check), w,
                                   cause, nearest=e))
    return mismatches, ties


def _columns(labels: np.ndarray, col_of: dict[int, int], expected) -> np.ndarray:
    """``[col_of[int(e)] for e in expected]`` as an array; without the loop where every label is its own column
    (``labels == arange``) and ``expected`` holds integer labels among them (then ``col_of[e] == e``)."""
    expected_arr = np.asarray(expected)
    if (expected_arr.ndim == 1 and expected_arr.size and expected_arr.dtype.kind in "iu"
            and np.array_equal(labels, np.arange(len(labels)))
            and int(expected_arr.min()) >= 0 and int(expected_arr.max()) < len(labels)):
        return expected_arr.astype(np.int64)
    return np.array([col_of[int(e)] for e in expected])


def circuit_converged(cap: Capture, b: int = 0) -> bool:
    """Whether the circuit reached a state that it then kept to its last iteration (:func:`circuit_n_iter`)."""
    return _settled_at(cap, b) is not None


def _hard(cap: Capture, b: int) -> bool:
    return cap.circuit.spec.reference(float(cap.encoded.scaling.scale[b]), 0.0, b).hard


def circuit_n_iter(cap: Capture, b: int = 0) -> int:
    """Iterations until the circuit's state stops changing: for hard assignments counted like scikit-learn's
    ``n_iter_`` (labels repeat, or centroids stand still); for soft ones, centroids standing still (their labels
    are only a readout); ``T`` where it never does."""
    settled = _settled_at(cap, b)
    return cap.circuit.iterations if settled is None else settled


def _settled_at(cap: Capture, b: int) -> int | None:
    """The first ``t`` at which the stopping rule holds (above) *and* the captured run bears it out: every later
    assignment equals the one at ``t - 1`` and every later centroid the one at ``t`` (the centroids at ``t - 1``
    may differ from those at ``t`` by the update's float64 rounding; the next update of the same mean gives them
    exactly). Lloyd's repeats a state once an assignment repeats; a run altered by hooks need not, so the rule alone
    would call a run converged whose own table shows it still moving."""
    T = cap.circuit.iterations
    centroids = [cap.centroids(t)[b] for t in range(T + 1)]
    labels = [cap.assignments(t)[b] for t in range(T + 1)]
    hard = _hard(cap, b)
    for t in range(1, T + 1):
        if hard:
            rule = (t >= 2 and np.array_equal(labels[t - 1], labels[t - 2])) or np.array_equal(centroids[t],
                                                                                               centroids[t - 1])
            kept = all(np.array_equal(labels[u], labels[t - 1]) for u in range(t, T + 1))
        else:
            rule, kept = np.array_equal(centroids[t], centroids[t - 1]), True
        if rule and kept and all(np.array_equal(centroids[u], centroids[t]) for u in range(t + 1, T + 1)):
            return t
    return None


def assign_certificate(att, spec, b: int) -> tuple[np.ndarray, np.ndarray]:
    """Per point: margin (best minus runner-up score among the candidates) and the bound on the mass that leaked.

    Candidates are the centroid keys, and the attention sink when the variant has one (masked keys sit
    ``beta (mask - 4)`` below every centroid and are left out of the sum)."""
    if spec.sink_logit is None:
        return att.margin[b], att.leak_bound[b]
    S = np.concatenate([att.scores[b], np.full((att.scores.shape[1], 1), spec.sink_logit)], axis=1)
    top2 = -np.sort(-S, axis=1)[:, :2] if S.shape[1] > 1 else np.concatenate([S, np.full_like(S, -np.inf)], axis=1)
    with np.errstate(under="ignore"):
        leak = np.exp(S - top2[:, :1]).sum(axis=1) - 1.0
    return top2[:, 0] - top2[:, 1], np.maximum(leak, 0.0)


def max_stiffness(circ) -> float:
    betas = [blk.notes.get("beta", 0.0) for blk in circ.blocks if blk.kind == ASSIGN]
    return max(betas) if betas else 0.0


def update_weight_error(att, W: np.ndarray, seq, b: int, j_rows=None) -> float:
    """Largest |pattern - W| over all keys of every centroid query (W: k x (n + 1), last column the own key)."""
    P = att.pattern[b]
    k = P.shape[0]
    expected = np.zeros_like(P)
    expected[:, seq.points] = W[:, :-1]
    expected[np.arange(k), seq.centroids.start + np.arange(k)] += W[:, -1]
    return float(np.abs(P - expected).max())


def noise_floor(spec, enc, b: int, T: int, trace) -> np.ndarray:
    """Largest centroid gap, per iterate, between the reference run in the user's frame and in the unit frame."""
    s = float(enc.scaling.scale[b])
    mu = enc.scaling.offset[b]
    unit_ref = spec.reference(1.0, 0.0, b)
    unit_trace = unit_ref.run((enc.X[b] - mu) / s, (enc.C0[b] - mu) / s, T)
    return np.abs(unit_trace.centroids * s + mu - trace.centroids).max(axis=(1, 2))
