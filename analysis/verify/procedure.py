"""Layer-by-layer verification of a circuit against its reference algorithm; returns a report, never asserts.

One procedure for every circuit, Lloyd's and the variants alike (the reference comes from ``circuit.spec``:
:class:`circuits.reference.Reference` or one of its subclasses in the variant modules of
:mod:`circuits.variants`). Two comparisons are made for every problem of a batch:

* **Step-wise** (localises a fault to a block): each block's output, decoded from the residual stream, against
  the reference operation applied to that block's decoded *input*. Assign layers of hard algorithms: the labels
  must minimise the reference's cost (distance, minus cosine, or distance against a trimming threshold) with ties
  as in :mod:`analysis.verify.checks`; of soft ones: the responsibilities ``Y`` must equal the reference's within
  ``tol_R``. Update layers: the centroids must equal the reference update of the block's input and ``N`` must
  hold ``|c|^2``; where a hook swaps the update head's normalisation, its *pattern* must equal the reference's
  weights.
* **Trajectory** (what a user compares with scikit-learn): the circuit's iterates against the reference run
  from the same initial centroids: per iteration the label agreement, the largest centroid error and the
  objectives, next to the certificate of that iteration's assignment (smallest margin ``beta * gap`` and the
  bound it implies on the attention mass that leaked off the chosen centroid).

The verdict is strict for hard algorithms: VERIFIED means every label of every iteration equals the reference's
and every centroid agrees within the tolerance; a tie resolved unlike the reference fails the run with that
reason. Tolerances are functions of the circuit's dtype and stated in the report: centroids within
``1e3 eps s + 64 eps max|x|``; soft responsibilities within ``tol_R = 32 (d + 2) eps (1 + 4 beta)`` (scores of
size up to ``4 beta`` carry a rounding of ``(d + 2) eps`` each, and softmax passes a score error ``delta`` to a
relative error ``2 delta`` of every weight); swapped update patterns within
``tol_W = 1e3 eps + 16 (d + 3) eps (M + 4 gamma) sqrt(n)`` (``log``/``exp`` of the hook cost
``|log w| eps <= 745 eps`` per weight, and scores of size ``M + 4 gamma`` carry a rounding that sparsemax,
1-Lipschitz in l2, passes on at most ``sqrt(n)``-fold). Soft trajectories amplify rounding like any float64
run of soft k-means does, so their centroids are compared with a noise floor: the gap between two float64 runs of
the reference itself (user frame and unit frame), times ``FLOOR_FACTOR``; the step-wise checks stay the
certificate. A float32 circuit is an approximation by construction and is reported as ``exact = False``; it is
held to the same float64 reference (a tie is only what float64 cannot order), and every assignment it makes is
checked against float32's resolution window (:func:`analysis.verify.checks.unresolved_decisions`): a point whose
two best candidates are closer than float32's rounding of their scores and of its inputs is *unresolved*, and
fails the run with cause ``resolution`` even where its label happens to equal the reference's. So VERIFIED means
the same for float32 as for float64: the labels are the reference's, and float32 decided each of them.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from analysis.capture import Capture, capture
from analysis.verify.checks import (
    FLOOR_FACTOR, assign_certificate, by_distance, check_costs, circuit_converged, circuit_n_iter, make_reference,
    max_stiffness, noise_floor, resolution_window, cause_failures, circuit_window, trajectory_verdict,
    circuit_input_window, resolution_failures, unresolved_decisions, update_weight_error, widest_tie_window,
)
from analysis.verify.report import (
    Check, IterationRecord, Mismatch, MismatchKind, Tie, Unresolved, VerificationReport, tolerances,
)
from circuits.build import KMeansCircuit
from circuits.encoding import EncodedBatch
from circuits.reference import one_hot, sq_distances
from circuits.sharpness import FLOAT64_UNDERFLOW
from circuits.variants.references import DegenerateUpdate


def verify_problem(cap: Capture, b: int = 0) -> VerificationReport:
    """Verify problem ``b`` of a captured batch against the circuit's reference algorithm.

    Where the reference algorithm itself is undefined (a spherical cluster whose members' directions cancel), the
    report says so and is not verified: there is nothing to compare with."""
    try:
        return _verify(cap, b)
    except DegenerateUpdate as exc:
        return _undefined_reference(cap, b, exc)


def verify(circuit: KMeansCircuit, encoded: EncodedBatch) -> list[VerificationReport]:
    """Run, capture and verify every problem of ``encoded``."""
    cap = capture(circuit, encoded)
    return [verify_problem(cap, b) for b in range(encoded.batch)]


def _is_lloyd(circ: KMeansCircuit) -> bool:
    return circ.spec.name == "lloyd"


def _reference_text(circ: KMeansCircuit, ref) -> str:
    if _is_lloyd(circ):
        return "Lloyd's k-means (circuits.reference.lloyd)"
    return f"{type(ref).__name__} ({type(ref).__module__}): {circ.spec.algorithm}"


def _undefined_reference(cap: Capture, b: int, exc: Exception) -> VerificationReport:
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
        reference=f"{circ.spec.name} reference ({circ.spec.reference_class.__module__}): undefined here",
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
    ref = make_reference(cap, b)
    trace = ref.run(X, C0, T)
    hard = ref.hard
    distance = hard and by_distance(circ)
    if distance:
        tol.tie_window = widest_tie_window(trace, X, resolution_window(circ, enc, b))
        tol.tie_break = tie_break_abs
    beta = max_stiffness(circ)
    tol_R = 32 * (d + 2) * eps * (1 + 4 * beta)
    member = max([blk.notes.get("member", 0.0) + 4 * blk.notes.get("gamma", 0.0) for blk in circ.blocks] + [0.0])
    tol_W = 1e3 * eps + 16 * (d + 3) * eps * member * math.sqrt(n)
    seq = enc.sequence
    from analysis.proof.bound import bound_for_capture

    # The proven finite-sharpness bound exists for Lloyd's, damped and trimmed circuits (None for the others).
    proven = bound_for_capture(cap, b)
    sharpness_bound = proven[0] if proven is not None else None

    mismatches: list[Mismatch] = []
    ties: list[Tie] = []
    failures: list[str] = []
    notes: list[str] = []
    if not _is_lloyd(circ):
        params = ", ".join(f"{key}={value:g}" for key, value in circ.params.items())
        notes += [f"variant {spec.name}" + (f" ({params})" if params else "") + f": {spec.algorithm}",
                  f"alteration: {spec.alteration}"]
    if hard:
        notes += circ.sharpness.warnings(seq.n_tokens)

    def bias_scale(state) -> float:
        # Spherical: the circuit's tie-break is tau j / |c_j| in cosine, |c_j| the stored (unnormalised) length.
        if spec.normalise_centroids:
            norms = np.linalg.norm(state.unit_centroids[b], axis=-1)
            return float(1.0 / norms.min()) if norms.min() > 0 else math.inf
        return 1.0

    own_rounding = circuit_window(circ, enc, b) if distance else None
    # float64's knobs are derived so that its tie-break exceeds its rounding (circuits/sharpness.py); a coarser
    # dtype's cannot be (float32's tie-break is capped), so each of its decisions is checked for resolution.
    check_resolution = distance and circ.dtype != torch.float64
    unresolved: list[Unresolved] = []

    coarse = circuit_input_window(circ, enc, b) if distance else None

    def check_hard(C, got, margins, layer, t, state, kind, expected=None):
        cost = ref.costs(X, C, t)
        E = ref.cost_uncertainty(cost, C)
        if kind == Check.STEP and coarse is not None and E is not None:
            # A block's decoded input carries the circuit dtype's rounding of the true centroids (float32's), so
            # against the reference step on that input, gaps within that rounding are ties of the rounded problem.
            E = E.copy()
            E[:, : C.shape[0]] += coarse(C)
        return check_costs(cost, got, margins, layer, t, tol.tie_window, bias_scale(state), kind, expected,
                           E=E, tie_break_abs=tie_break_abs,
                           E_circuit=own_rounding(C) if own_rounding is not None else None)

    # -- step-wise --------------------------------------------------------------------------------------------
    step_c_err: dict[int, float] = {}
    step_w_err: dict[int, float] = {}
    step_counts: dict[int, tuple[int, int, float]] = {}
    for lc in cap.layers:
        if lc.kind == "assign":
            t = circ.assignment_layers.index(lc.layer)
            C_in, Y = lc.pre.centroids[b], lc.post.assignments[b]
            margins, _ = assign_certificate(lc.attention, spec, b)
            if hard:
                found, tied = check_hard(C_in, lc.post.labels[b], margins, lc.layer, t, lc.pre, Check.STEP)
                mismatches.extend(found)
                ties.extend(tied)
                a_err = float(np.abs(Y - one_hot(lc.post.labels[b], Y.shape[1])).max())
                step_counts[t] = (sum(m.kind == MismatchKind.ERROR for m in found), len(tied), a_err)
                if check_resolution:
                    unresolved.extend(unresolved_decisions(sq_distances(X, C_in), lc.post.labels[b], tie_break_abs,
                                                           own_rounding(C_in), lc.layer, t))
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
                # The first update commits the initial centroids from C_stage.
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
                w_err = update_weight_error(lc.attention, W, seq, b)
                step_w_err[u] = w_err
                if w_err > tol_W:
                    failures.append(f"layer {lc.layer} (update {u}): attention pattern off the reference weights by"
                                    f" {w_err:.3g} > {tol_W:.3g}")
            unit_c = lc.post.unit_centroids[b]
            n_err = float(np.abs(lc.post.unit_sq_norms[b] - (unit_c**2).sum(-1)).max())
            if n_err > tol.sq_norm * max(1.0, float((unit_c**2).sum(-1).max())):
                failures.append(f"layer {lc.layer}: N differs from |c|^2 by {n_err:.3g} (unit-scaled) > {tol.sq_norm:.3g}")
    n_step_errors = sum(m.kind == MismatchKind.ERROR for m in mismatches)
    if n_step_errors:
        failures.append(f"{n_step_errors} assignment(s) differ from the reference's beyond the tie window")
    failures.extend(resolution_failures(unresolved, str(circ.dtype).replace("torch.", "")))

    # -- trajectory -------------------------------------------------------------------------------------------
    floor = None if hard else noise_floor(spec, enc, b, T, trace)
    diverged: int | None = None
    records = []
    R_circ = [cap.layers[layer].post.assignments[b] for layer in circ.assignment_layers]
    for t in range(T + 1):
        att = cap.assign_attention(t)
        margins, leaks = assign_certificate(att, spec, b)
        labels_t = cap.assignments(t)[b]
        if hard:
            traj, _ = check_hard(trace.centroids[t], labels_t, margins, circ.assignment_layers[t], t,
                                 cap.layers[circ.assignment_layers[t]].pre, Check.TRAJECTORY, trace.assignments[t])
            if diverged is None:
                mismatches.extend(traj)
                if any(m.kind == MismatchKind.TIE for m in traj):
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
    # Causes of the step-wise and trajectory errors alike (a float32 block can match the reference step on its own
    # rounded input while its trajectory leaves Lloyd's: the tie-break decided a gap float64 resolves).
    failures.extend(cause_failures(mismatches, tie_break_abs, s))
    # Ties are the reference's, float64's whatever the circuit's dtype (checks.resolution_window).
    notes.extend(_tie_notes(ties, hard, tol.tie_window, tol_R, "float64"))
    final_labels = cap.assignments(T)[b]
    if spec.sink_logit is not None:
        outliers = np.flatnonzero(final_labels < 0)
        shown = ", ".join(map(str, outliers[:20])) + (" ..." if len(outliers) > 20 else "")
        notes.append(f"{len(outliers)} outlier(s) at the final assignment (label -1)" + (f": points {shown}" if len(outliers) else ""))
    if not hard:
        notes.append(f"soft by design: responsibilities checked to {tol_R:.2g} (float64 at stiffness {beta:g});"
                     f" trajectory within {FLOOR_FACTOR:g}x the reference's own float64 noise floor"
                     f" ({float(floor.max()):.2g})")

    all_assign = [assign_certificate(cap.assign_attention(t), spec, b) for t in range(T + 1)]
    all_update = [] if spec.swapped_update_normalisation else [cap.layers[layer].attention for layer in circ.centroid_layers]
    hard_attention = hard and all(float(leak.max()) == 0.0 for _, leak in all_assign) and all(
        float(a.leak_bound[b].max()) == 0.0 for a in all_update)
    if hard and not hard_attention:
        worst = min(float(m.min()) for m, _ in all_assign)
        notes.append(f"some attention is not exactly hard (smallest assignment margin {worst:.3g}; margins above"
                     f" {FLOAT64_UNDERFLOW:.0f} give exactly one-hot patterns in float64)")
    exact = circ.dtype == torch.float64
    if not exact:
        what = "Lloyd's algorithm" if _is_lloyd(circ) else spec.name
        dtype_name = str(circ.dtype).replace("torch.", "")
        notes.append(f"{dtype_name} cannot hold beta * score exactly: this run is an approximation of {what}, held"
                     f" to its float64 reference" + (f"; every assignment was checked against {dtype_name}'s"
                                                      " resolution window" if check_resolution else ""))
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
        reference=_reference_text(circ, ref),
        sharpness_bound=sharpness_bound,
        unresolved=unresolved,
    )


def _tie_notes(ties: list[Tie], hard: bool, window: float, tol_R: float, dtype: str = "float64") -> list[str]:
    if not ties:
        return []
    if hard:
        lower = sum(t.chosen == min(t.candidates) for t in ties)
        return [f"{len(ties)} tied assignment(s) (nearest centroids equal within {dtype}'s resolution, at most"
                f" {window:.3g} in squared user units): {lower} went to the lower index"
                + (f", {len(ties) - lower} did not" if lower < len(ties) else "")]
    return [f"{len(ties)} label readout tie(s): the largest responsibilities are equal within {2 * tol_R:.2g},"
            " so the hard label (their argmax) may differ from the reference's while the responsibilities agree"]
