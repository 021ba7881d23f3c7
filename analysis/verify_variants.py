"""Layer-by-layer verification of a variant circuit against its own reference algorithm.

Same two comparisons and the same :class:`~analysis.verify.VerificationReport` as Lloyd's circuit
(:mod:`analysis.verify`), with the variant's reference (:mod:`circuits.variants.references`) in place of Lloyd's:

* **Step-wise**, every block against the reference operation applied to that block's own decoded input.
  Assign layers: for hard algorithms the labels must minimise the variant's cost (distance, minus cosine,
  or distance against the trimming threshold), with ties reported as for Lloyd's; for soft ones the
  responsibilities ``Y`` must equal the reference's within ``tol_R``. Update layers: the centroids must equal the
  reference update of the block's input (``Y`` and ``C`` as read), and when a hook swaps the update head's
  normalisation, its *pattern* must equal the reference's weights (``update_weight_error``).
* **Trajectory**, the circuit's iterates against the reference run from the same initial centroids, with the
  same per-iteration fields as Lloyd's.

Tolerances, besides Lloyd's (:func:`analysis.verify.tolerances`):

* ``tol_R = 32 (d + 2) eps (1 + 4 beta)`` for soft responsibilities at unit-scaled stiffness ``beta``: scores of
  size up to ``4 beta`` carry a rounding of ``(d + 2) eps`` each, and softmax passes a score error ``delta`` to a
  relative error ``2 delta`` of every weight. It is the precision float64 offers at that stiffness, not slack.
* ``tol_W = 1e3 eps + 16 (d + 3) eps (M + 4 gamma) sqrt(n)`` for swapped update heads: ``log``/``exp`` of the hook
  costs ``|log w| eps <= 745 eps`` per weight, and scores of size ``M + 4 gamma`` (sparse/gumbel) carry a rounding
  that sparsemax (1-Lipschitz in l2) passes on at most ``sqrt(n)``-fold.
* Soft trajectories amplify rounding like any float64 run of soft k-means does; their centroids are compared
  with a *noise floor*: the gap between two float64 runs of the reference itself (in the user's frame and in
  the encoder's unit frame, i.e. with different rounding), times ``FLOOR_FACTOR``. The step-wise checks stay
  the certificate of exactness.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from analysis.capture import Capture
from analysis.verify import (
    IterationRecord, Mismatch, Tie, VerificationReport, circuit_converged, circuit_n_iter, resolution_window,
    tolerances, trajectory_verdict,
)
from circuits.reference import assign_within
from circuits.sharpness import FLOAT64_UNDERFLOW
from circuits.variants.references import Costs, DegenerateUpdate, Reference, one_hot

#: A soft trajectory may drift from the reference this many times the reference's own float64 noise floor.
FLOOR_FACTOR = 100.0


def check_costs(cost: Costs, got: np.ndarray, margins: np.ndarray, layer: int, iteration: int, rounding: float,
                bias_scale: float, check: str, expected: np.ndarray | None = None,
                E: np.ndarray | None = None) -> tuple[list[Mismatch], list[Tie]]:
    """Labels ``got`` against the argmin of ``cost`` (or ``expected``); ties within the stated window.

    Two columns tie for a point when their costs differ by at most ``bias_scale * |bias_1 - bias_2| + rounding``
    (the tie-break the circuit applies, plus float64 rounding); with a per-entry uncertainty ``E`` (distance
    costs, :func:`analysis.verify.distance_uncertainty`) by at most ``E_ij1 + E_ij2`` instead, as for Lloyd's.
    """
    V, labels = cost.values, np.asarray(cost.labels)
    col_of = {int(label): c for c, label in enumerate(labels)}
    if expected is None:
        exp_col = np.argmin(V + cost.bias, axis=1) if E is None else assign_within(V + cost.bias, E)
        expected = labels[exp_col]
    else:
        exp_col = np.array([col_of[int(e)] for e in expected])
    rows = np.arange(len(V))
    chosen = V[rows, exp_col]
    if E is None:
        window = bias_scale * np.abs(cost.bias[None, :] - cost.bias[exp_col][:, None]) + rounding
    else:
        window = E + E[rows, exp_col][:, None]
    within = np.abs(V - chosen[:, None]) <= window
    ties = [
        Tie(int(i), layer, iteration, [int(labels[c]) for c in np.flatnonzero(within[i])], int(got[i]), float(margins[i]))
        for i in np.flatnonzero(within.sum(axis=1) > 1)
    ]
    mismatches = []
    for i in np.flatnonzero(np.asarray(expected) != got):
        e, g = int(expected[i]), int(got[i])
        g_col = col_of.get(g)
        gap = float(V[i, g_col] - V[i, exp_col[i]]) if g_col is not None else math.inf
        kind = "tie" if g_col is not None and within[i, g_col] else "error"
        mismatches.append(Mismatch(int(i), layer, iteration, e, g, float(margins[i]), gap, kind, check))
    return mismatches, ties


def _assign_certificate(att, spec, b: int) -> tuple[np.ndarray, np.ndarray]:
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


def _max_stiffness(circ) -> float:
    betas = [blk.notes.get("beta", 0.0) for blk in circ.blocks if blk.kind == "assign"]
    return max(betas) if betas else 0.0


def _update_weight_error(att, W: np.ndarray, seq, b: int, j_rows=None) -> float:
    """Largest |pattern - W| over all keys of every centroid query (W: k x (n + 1), last column the own key)."""
    P = att.pattern[b]
    k = P.shape[0]
    expected = np.zeros_like(P)
    expected[:, seq.points] = W[:, :-1]
    expected[np.arange(k), seq.centroids.start + np.arange(k)] += W[:, -1]
    return float(np.abs(P - expected).max())


def _noise_floor(spec, enc, b: int, T: int, trace) -> np.ndarray:
    """Largest centroid gap, per iterate, between the reference run in the user's frame and in the unit frame."""
    s = float(enc.scaling.scale[b])
    mu = enc.scaling.offset[b]
    unit_ref = spec.reference(1.0, 0.0, b)
    unit_trace = unit_ref.run((enc.X[b] - mu) / s, (enc.C0[b] - mu) / s, T)
    return np.abs(unit_trace.centroids * s + mu - trace.centroids).max(axis=(1, 2))


def verify_variant_problem(cap: Capture, b: int = 0) -> VerificationReport:
    """Verify problem ``b`` of a captured batch of a variant circuit against the variant's reference.

    Where the reference algorithm itself is undefined (a spherical cluster whose members' directions cancel), the
    report says so and is not verified: there is nothing to compare with."""
    try:
        return _verify(cap, b)
    except DegenerateUpdate as exc:
        circ, enc = cap.circuit, cap.encoded
        X, C0 = enc.X[b], enc.C0[b]
        s = float(enc.scaling.scale[b])
        tol = tolerances(circ.dtype, circ.layout.d, s, float(np.abs(np.concatenate([X, C0])).max()))
        return VerificationReport(
            variant=circ.variant, dtype=str(circ.dtype).replace("torch.", ""), n=enc.n, d=enc.d, k=enc.k,
            iterations=circ.iterations, verified=False, exact=False, hard_attention=False, per_iteration=[],
            final_label_agreement=math.nan, final_min_margin=math.nan, final_leak_bound=math.nan, mismatches=[],
            ties=[], tolerances=tol, scale=s, n_iter=circuit_n_iter(cap, b), converged=circuit_converged(cap, b),
            failures=[f"the reference algorithm is undefined on this problem: {exc}"],
            notes=[f"variant {circ.spec.name}: {circ.spec.algorithm}"], variant_params=circ.params,
            reference=f"{circ.spec.name} reference (circuits.variants.references): undefined here",
        )


def _verify(cap: Capture, b: int) -> VerificationReport:
    circ, enc = cap.circuit, cap.encoded
    spec = circ.spec
    X, C0 = enc.X[b], enc.C0[b]
    T, d, n = circ.iterations, circ.layout.d, enc.n
    s = float(enc.scaling.scale[b])
    max_abs = float(np.abs(np.concatenate([X, C0])).max())
    tol = tolerances(circ.dtype, d, s, max_abs)
    eps = tol.eps
    tie_break_abs = circ.sharpness.tie_break * s**2
    # Distance costs: the reference is the variant with ties only within what float64 resolves (as for Lloyd's),
    # not within the circuit's tie-break, which a far point makes coarse.
    by_distance = not spec.normalise_centroids
    ref: Reference = spec.reference(s, 0.0 if by_distance else tie_break_abs, b)
    if ref.hard and by_distance:
        ref.tie_window = resolution_window(circ, enc, b)
    trace = ref.run(X, C0, T)
    hard = ref.hard
    beta = _max_stiffness(circ)
    tol_R = 32 * (d + 2) * eps * (1 + 4 * beta)
    member = max([blk.notes.get("member", 0.0) + 4 * blk.notes.get("gamma", 0.0) for blk in circ.blocks] + [0.0])
    tol_W = 1e3 * eps + 16 * (d + 3) * eps * member * math.sqrt(n)
    seq = enc.sequence
    from analysis.proof.bound import bound_for_capture

    # The proven finite-sharpness bound exists for the damped and trimmed variants (None for the others).
    proven = bound_for_capture(cap, b)
    sharpness_bound = proven[0] if proven is not None else None

    mismatches: list[Mismatch] = []
    ties: list[Tie] = []
    failures: list[str] = []
    params = ", ".join(f"{key}={value:g}" for key, value in circ.params.items())
    notes = [f"variant {spec.name}" + (f" ({params})" if params else "") + f": {spec.algorithm}",
             f"alteration: {spec.alteration}"]

    def bias_scale(state) -> float:
        # Spherical: the circuit's tie-break is tau j / |c_j| in cosine, |c_j| the stored (unnormalised) length.
        if spec.normalise_centroids:
            norms = np.linalg.norm(state.unit_centroids[b], axis=-1)
            return float(1.0 / norms.min()) if norms.min() > 0 else math.inf
        return 1.0

    # -- step-wise --------------------------------------------------------------------------------------------
    step_c_err: dict[int, float] = {}
    step_w_err: dict[int, float] = {}
    step_counts: dict[int, tuple[int, int, float]] = {}
    for lc in cap.layers:
        if lc.kind == "assign":
            t = circ.assignment_layers.index(lc.layer)
            C_in, Y = lc.pre.centroids[b], lc.post.assignments[b]
            margins, _ = _assign_certificate(lc.attention, spec, b)
            if hard:
                cost = ref.costs(X, C_in, t)
                found, tied = check_costs(cost, lc.post.labels[b], margins, lc.layer, t, tol.tie_window,
                                          bias_scale(lc.pre), "step", E=ref.cost_uncertainty(cost, C_in))
                mismatches.extend(found)
                ties.extend(tied)
                a_err = float(np.abs(Y - one_hot(lc.post.labels[b], Y.shape[1])).max())
                step_counts[t] = (sum(m.kind == "error" for m in found), len(tied), a_err)
            else:
                R_ref = ref.assign(X, C_in, t)
                a_err = float(np.abs(Y - R_ref).max())
                # The hard label is only a readout (argmax) of the responsibilities, which are what is checked; where
                # the largest ones are equal within tol_R the readout may go either way: a tie, reported as such.
                within = R_ref >= R_ref.max(axis=1, keepdims=True) - 2 * tol_R
                got_labels = lc.post.labels[b]
                tied = [Tie(int(i), lc.layer, t, [int(j) for j in np.flatnonzero(within[i])], int(got_labels[i]),
                            float(margins[i])) for i in np.flatnonzero(within.sum(axis=1) > 1)]
                ties.extend(tied)
                step_counts[t] = (0, len(tied), a_err)
                if a_err > tol_R:
                    failures.append(f"layer {lc.layer} (assign {t}): responsibilities off the reference step by"
                                    f" {a_err:.3g} > {tol_R:.3g}")
        elif lc.kind == "update":
            u = circ.centroid_layers.index(lc.layer)
            if u == 0:
                expected_c = C0
                W = np.zeros((C0.shape[0], n + 1))
                W[:, -1] = 1.0
            else:
                R_in, C_in = lc.pre.assignments[b], lc.pre.centroids[b]
                expected_c = ref.update(X, R_in, C_in, u)
                W = ref.update_weights(X, R_in, C_in, u)
            err = float(np.abs(lc.post.centroids[b] - expected_c).max())
            step_c_err[u] = err
            if err > tol.centroid:
                failures.append(f"layer {lc.layer} (update {u}): centroid off its reference step by {err:.3g} > {tol.centroid:.3g}")
            if spec.swapped_update_normalisation:
                w_err = _update_weight_error(lc.attention, W, seq, b)
                step_w_err[u] = w_err
                if w_err > tol_W:
                    failures.append(f"layer {lc.layer} (update {u}): attention pattern off the reference weights by"
                                    f" {w_err:.3g} > {tol_W:.3g}")
            unit_c = lc.post.unit_centroids[b]
            n_err = float(np.abs(lc.post.unit_sq_norms[b] - (unit_c**2).sum(-1)).max())
            if n_err > tol.sq_norm * max(1.0, float((unit_c**2).sum(-1).max())):
                failures.append(f"layer {lc.layer}: N differs from |c|^2 by {n_err:.3g} (unit-scaled) > {tol.sq_norm:.3g}")
    n_step_errors = sum(m.kind == "error" for m in mismatches)
    if n_step_errors:
        failures.append(f"{n_step_errors} assignment(s) differ from the reference's beyond the tie window")

    # -- trajectory -------------------------------------------------------------------------------------------
    floor = None if hard else _noise_floor(spec, enc, b, T, trace)
    diverged: int | None = None
    records = []
    R_circ = [cap.layers[layer].post.assignments[b] for layer in circ.assignment_layers]
    for t in range(T + 1):
        att = cap.assign_attention(t)
        margins, leaks = _assign_certificate(att, spec, b)
        labels_t = cap.assignments(t)[b]
        if hard:
            cost = ref.costs(X, trace.centroids[t], t)
            traj, _ = check_costs(cost, labels_t, margins, circ.assignment_layers[t], t, tol.tie_window,
                                  bias_scale(cap.layers[circ.assignment_layers[t]].pre), "trajectory",
                                  expected=trace.assignments[t], E=ref.cost_uncertainty(cost, trace.centroids[t]))
            if diverged is None:
                mismatches.extend(traj)
                if any(m.kind == "tie" for m in traj):
                    diverged = t
        if t == T:
            break
        C_next = cap.centroids(t + 1)[b]
        c_err = float(np.abs(C_next - trace.centroids[t + 1]).max())
        limit = tol.centroid if hard else max(tol.centroid, FLOOR_FACTOR * float(floor[: t + 2].max()))
        if diverged is None and c_err > limit:
            failures.append(f"iteration {t + 1}: centroids differ from the reference by {c_err:.3g} > {limit:.3g}")
        upd = cap.layers[circ.centroid_layers[t + 1]].attention
        errors_t, ties_t, a_err = step_counts[t]
        records.append(IterationRecord(
            iteration=t + 1,
            label_agreement=float(np.mean(labels_t == trace.assignments[t])),
            max_centroid_error=c_err,
            objective_circuit=ref.objective(X, C_next, R_circ[t + 1]),
            objective_reference=float(trace.objectives[t + 1]),
            min_margin=float(margins.min()),
            leak_bound=float(leaks.max()),
            update_min_margin=float(upd.margin[b].min()),
            update_leak_bound=float(upd.leak_bound[b].max()),
            step_centroid_error=step_c_err[t + 1],
            step_label_errors=errors_t,
            ties=ties_t,
            max_assignment_error=0.0 if hard else float(np.abs(R_circ[t] - trace.responsibilities[t]).max()),
            step_assignment_error=a_err,
            update_weight_error=step_w_err.get(t + 1, 0.0),
            outliers=int((labels_t < 0).sum()),
            proven_bound=sharpness_bound.iteration_bound(t + 1) if sharpness_bound is not None else None,
        ))
    trajectory_verdict(diverged, mismatches, failures, notes, ties_fail=hard)
    if ties and hard:
        notes.append(f"{len(ties)} tied assignment(s) (candidates equal within the tie window) went to the lower index")
    elif ties:
        notes.append(f"{len(ties)} label readout tie(s): the largest responsibilities are equal within {2 * tol_R:.2g},"
                     " so the hard label (their argmax) may differ from the reference's while the responsibilities"
                     " agree")
    final_labels = cap.assignments(T)[b]
    if spec.sink_logit is not None:
        outliers = np.flatnonzero(final_labels < 0)
        shown = ", ".join(map(str, outliers[:20])) + (" ..." if len(outliers) > 20 else "")
        notes.append(f"{len(outliers)} outlier(s) at the final assignment (label -1)" + (f": points {shown}" if len(outliers) else ""))
    if not hard:
        notes.append(f"soft by design: responsibilities checked to {tol_R:.2g} (float64 at stiffness {beta:g});"
                     f" trajectory within {FLOOR_FACTOR:g}x the reference's own float64 noise floor"
                     f" ({float(floor.max()):.2g})")

    all_assign = [_assign_certificate(cap.assign_attention(t), spec, b) for t in range(T + 1)]
    all_update = [] if spec.swapped_update_normalisation else [cap.layers[layer].attention for layer in circ.centroid_layers]
    hard_attention = hard and all(float(leak.max()) == 0.0 for _, leak in all_assign) and all(
        float(a.leak_bound[b].max()) == 0.0 for a in all_update)
    if hard and not hard_attention:
        worst = min(float(m.min()) for m, _ in all_assign)
        notes.append(f"some attention is not exactly hard (smallest assignment margin {worst:.3g}; margins above"
                     f" {FLOAT64_UNDERFLOW:.0f} give exactly one-hot patterns in float64)")
    exact = circ.dtype == torch.float64
    if not exact:
        notes.append(f"{circ.dtype} cannot hold the scores exactly: this run is an approximation of {spec.name}")
    final_margin, final_leak = all_assign[T]
    return VerificationReport(
        variant=circ.variant,
        dtype=str(circ.dtype).replace("torch.", ""),
        n=enc.n, d=enc.d, k=enc.k, iterations=T,
        verified=not failures,
        exact=exact,
        hard_attention=hard_attention,
        per_iteration=records,
        final_label_agreement=float(np.mean(final_labels == trace.assignments[T])),
        final_min_margin=float(final_margin.min()),
        final_leak_bound=float(final_leak.max()),
        mismatches=mismatches,
        ties=ties,
        tolerances=tol,
        scale=s,
        n_iter=circuit_n_iter(cap, b),
        converged=circuit_converged(cap, b),
        diverged_after_tie=diverged,
        failures=failures,
        notes=notes,
        variant_params=circ.params,
        reference=f"{type(ref).__name__} (circuits.variants.references): {spec.algorithm}",
        sharpness_bound=sharpness_bound,
    )
