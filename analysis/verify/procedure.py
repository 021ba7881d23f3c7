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

import functools
import math

import numpy as np
import torch

from analysis.capture import Capture, Keep, capture
from analysis.scheduler import Scheduler, Task
from analysis.verify.checks import (
    FLOOR_FACTOR, At, assign_certificate, circuit_converged, circuit_n_iter, noise_floor,
)
from analysis.verify.decisions import NEAR_TIE, cause_failures, check_trajectory, tie_notes, trajectory_verdict
from analysis.verify.problem import Findings, CheckedProblem
from analysis.verify.report import (
    Check, IterationRecord, MismatchKind, Tie, VerificationReport, tolerances,
)
from analysis.verify.steps import check_blocks
from circuits.build import KMeansCircuit
from circuits.encoding import EncodedBatch
from circuits.sharpness import FLOAT64_UNDERFLOW
from circuits.variants.references import DegenerateUpdate


def verify_problem(cap: Capture, b: int = 0, scheduler: Scheduler | None = None,
                   prefetched=None) -> VerificationReport:
    """Verify problem ``b`` of a captured batch against the circuit's reference algorithm.

    Where the reference algorithm itself is undefined (a spherical cluster whose members' directions cancel), the
    report says so and is not verified: there is nothing to compare with. ``scheduler``: where the work goes
    (:mod:`analysis.scheduler`; by default the policy for this many points). ``prefetched``: the reference's run of
    this problem and its bound, started before the circuit ran (:func:`analysis.verify.prefetch.prefetch`), taken
    instead of running them here."""
    scheduler = scheduler if scheduler is not None else Scheduler.for_points(cap.encoded.n, threads=1)
    try:
        return _verify(cap, b, scheduler, prefetched)
    except DegenerateUpdate as exc:
        return _undefined_reference(cap, b, exc)


def reads(spec) -> Keep:
    """What :func:`verify_problem` reads of each layer of a captured run of a circuit of ``spec`` (so that a capture
    for it alone keeps that, :mod:`analysis.capture.keep`): every certificate and decoded state; an assign head's
    scores only where an attention sink's certificate is computed from them; an update head's pattern only where
    a swapped normalisation is checked against the reference's weights; never a query's readouts; a one-hot ``Y``
    as its labels (a soft one is read whole)."""
    return Keep(assign_columns=spec.sink_logit is not None, assign_readouts=False,
                update_columns=spec.swapped_update_normalisation, labels_only=not spec.soft_assignments)


def verify(circuit: KMeansCircuit, encoded: EncodedBatch) -> list[VerificationReport]:
    """Run, capture and verify every problem of ``encoded``."""
    cap = capture(circuit, encoded)
    return [verify_problem(cap, b) for b in range(encoded.batch)]


def _reference_text(circ: KMeansCircuit, ref) -> str:
    if circ.spec.unaltered:
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
        weight_edits=list(cap.weight_edits), added_hooks=list(cap.added_hooks),
    )


def _verify(cap: Capture, b: int, scheduler: Scheduler, prefetched=None) -> VerificationReport:
    """The stages in order: capture (:meth:`CheckedProblem.of`), per-block checks (:func:`check_blocks`),
    trajectory, certificate; then the report."""
    p = CheckedProblem.of(cap, b, prefetched)
    sharpness_bound = prefetched.bound if prefetched is not None else sharpness_task(cap, b, scheduler)
    found = Findings(notes=_variant_notes(p))
    check_blocks(p, found, scheduler)
    records, diverged, floor = _trajectory(p, found, sharpness_bound)
    _trajectory_notes(p, found, diverged, floor)
    hard_attention, (final_margin, final_leak) = _certificate(p, found)
    final_labels = cap.assignments(p.T)[b]
    return VerificationReport(
        variant=p.circ.variant, dtype=p.dtype_name, n=p.enc.n, d=p.enc.d, k=p.enc.k, iterations=p.T,
        verified=not found.failures, hard_attention=hard_attention,
        exact=p.circ.dtype == torch.float64 and p.spec.unaltered and hard_attention and not found.failures,
        per_iteration=records,
        final_label_agreement=float(np.mean(final_labels == p.trace.assignments[p.T])),
        final_min_margin=float(final_margin.min()), final_leak_bound=float(final_leak.max()),
        mismatches=found.mismatches, ties=found.ties, tolerances=p.tol, scale=p.scale,
        n_iter=circuit_n_iter(cap, b), converged=circuit_converged(cap, b), diverged_after_tie=diverged,
        failures=found.failures, notes=found.notes, variant_params=p.circ.params,
        reference=_reference_text(p.circ, p.ref), sharpness_bound=sharpness_bound, unresolved=found.unresolved,
        initial=found.initial, centroid_limit=found.centroid_limit, reference_name=reference_name(p.spec),
        weight_edits=list(cap.weight_edits), added_hooks=list(cap.added_hooks), **_first_failure(p, found),
    )


def reference_name(spec) -> str:
    """The reference's short name for the verdict: ``"Lloyd's k-means"``, ``"soft k-means"``, ``"damped Lloyd"``."""
    if spec.unaltered:
        return "Lloyd's k-means"
    head = spec.algorithm.split(":")[0].split(";")[0].strip()
    return f"{spec.name} k-means" if head.startswith("hard assignment") else head


def _first_failure(p: CheckedProblem, found: Findings) -> dict:
    """The first layer a check failed at, and what that layer does (``assign, t = 2``; ``update, t = 1``)."""
    if not found.failures:
        return {}
    layers = found.failing_layers + [m.layer for m in found.mismatches if m.kind == MismatchKind.ERROR]
    layers += [u.layer for u in found.unresolved]
    if p.hard and any(m.kind == MismatchKind.TIE and m.check == Check.TRAJECTORY for m in found.mismatches):
        layers += [m.layer for m in found.mismatches if m.kind == MismatchKind.TIE]
    if not layers:
        return {}
    layer = min(layers)
    circ = p.circ
    role = (f"assign, t = {circ.assignment_layers.index(layer)}" if layer in circ.assignment_layers
            else f"update, t = {circ.centroid_layers.index(layer)}" if layer in circ.centroid_layers else "")
    return {"first_failing_layer": layer, "first_failing_role": role}


def _variant_notes(p: CheckedProblem) -> list[str]:
    notes = []
    if not p.spec.unaltered:
        params = ", ".join(f"{key}={value:g}" for key, value in p.circ.params.items())
        notes += [f"variant {p.spec.name}" + (f" ({params})" if params else "") + f": {p.spec.algorithm}",
                  f"alteration: {p.spec.alteration}"]
    if p.hard:
        notes += p.circ.sharpness.warnings(p.enc.sequence.n_tokens)
    return notes


def _trajectory(p: CheckedProblem, found: Findings, bound) -> tuple[list[IterationRecord], int | None, np.ndarray | None]:
    """The circuit's iterates against the reference run from the same initial centroids: the iteration records
    for ``t = 1 .. T`` (record ``t``: the centroids after ``t`` updates and the assignment to them; ``t = 0`` goes
    to ``found.initial``), the
    iteration whose tie sent the run another way (``None``: none did), and a soft run's noise floor."""
    cap, b, T, circ = p.cap, p.b, p.T, p.circ
    floor = None if p.hard else noise_floor(p.spec, p.enc, b, T, p.trace)
    diverged: int | None = None
    limits, records = [], []
    for t in range(T + 1):
        certificate = assign_certificate(cap.assign_attention(t), p.spec, b)
        labels_t = cap.assignments(t)[b]
        c_err = float(np.abs(cap.centroids(t)[b] - p.trace.centroids[t]).max())
        limit = p.tol.centroid if p.hard else max(p.tol.centroid, FLOOR_FACTOR * float(floor[: t + 1].max()))
        limits.append(limit)
        if diverged is None and c_err > limit:
            found.failures.append(f"t = {t}: centroids differ from the reference by {c_err:.3g} > {limit:.3g}")
            found.failing_layers.append(circ.centroid_layers[t])
        if p.hard:
            layer = circ.assignment_layers[t]
            at = At(layer, t, Check.TRAJECTORY)
            if p.certified is not None:
                traj, ties = check_trajectory(p, t, labels_t, certificate[0], at)
            else:
                traj, ties = p.check_hard(p.trace.centroids[t], labels_t, certificate[0], at, cap.layers[layer].pre,
                                          p.trace.assignments[t])
            if diverged is None:
                # Ties are the reference trajectory's (the step-wise check's window only says what a block's
                # decoded input cannot order).
                found.mismatches.extend(traj)
                found.ties.extend(ties)
                errors_t, _, a_err = found.step_counts[t]
                found.step_counts[t] = (errors_t, len(ties), a_err)
                if any(m.kind == MismatchKind.TIE or m.cause == NEAR_TIE for m in traj):
                    diverged = t
        records.append(_iteration_record(p, found, t, certificate, c_err, bound))
    found.centroid_limit = max(limits)
    found.initial = records[0]
    return records[1:], diverged, floor


def _iteration_record(p: CheckedProblem, found: Findings, t: int, certificate, c_err: float, bound) -> IterationRecord:
    """Record ``t``: every number in it is at ``t`` (centroids after ``t`` updates, the assignment to them, the
    objective of both, the update layer that wrote them)."""
    cap, b, circ = p.cap, p.b, p.circ
    margins, leaks = certificate
    labels_t = cap.assignments(t)[b]
    R_t = cap.layers[circ.assignment_layers[t]].post.assignments[b]
    upd = cap.layers[circ.centroid_layers[t]].attention
    update_margin = None if upd.margin is None else float(upd.margin[b].min())
    update_leak = None if upd.leak_bound is None else float(upd.leak_bound[b].max())
    if update_margin is not None and not math.isfinite(update_margin):
        update_margin = update_leak = None  # a swapped normalisation has no softmax margin to certify
    errors_t, ties_t, a_err = found.step_counts[t]
    return IterationRecord(
        iteration=t,
        label_agreement=float(np.mean(labels_t == p.trace.assignments[t])),
        max_centroid_error=c_err,
        objective_circuit=(found.objective_circuit[t] if t in found.objective_circuit
                           else p.ref.objective(p.X, cap.centroids(t)[b], R_t)),
        objective_reference=float(p.trace.objectives[t]),
        min_margin=float(margins.min()),
        leak_bound=float(leaks.max()),
        update_min_margin=update_margin,
        update_leak_bound=update_leak,
        step_centroid_error=found.step_centroid_error[t],
        step_label_errors=errors_t,
        ties=ties_t,
        max_assignment_error=0.0 if p.hard else float(np.abs(R_t - p.trace.responsibilities[t]).max()),
        step_assignment_error=a_err,
        update_weight_error=found.step_weight_error.get(t, 0.0),
        outliers=int((labels_t < 0).sum()),
        proven_bound=(Task(functools.partial(_iteration_bound, bound, t)) if bound is not None and t > 0
                      else None),
    )


def sharpness_task(cap: Capture, b: int, scheduler: Scheduler) -> Task | None:
    """The proven finite-sharpness bound of problem ``b`` (Lloyd's, damped and trimmed circuits; ``None`` for the
    others), as a :class:`~analysis.scheduler.Task`. It plays no part in the verdict: its inputs are read now, the
    bound evaluated on a worker at scale (at a million points it is about 9 s of numpy, on the second core while
    the checks run), else when the report is first read."""
    from analysis.proof.bound.check import bound_inputs

    inputs = bound_inputs(cap, b)
    if inputs is None:
        return None
    compute = functools.partial(_evaluate_bound, *inputs)
    return scheduler.submit(compute) if scheduler.at_scale else Task(compute)


def _evaluate_bound(args: tuple, kwargs: dict):
    """The sharpness bound of :func:`analysis.proof.bound.sharpness_bound` (module-level, so a report pickled before
    its bound was read can carry it)."""
    from analysis.proof.bound import sharpness_bound

    return sharpness_bound(*args, **kwargs, trajectory_labels=False)[0]


def _iteration_bound(bound: Task, t: int) -> float:
    """The proven bound on the centroid error after ``t`` iterations, user units."""
    return bound.value().iteration_bound(t)


def _trajectory_notes(p: CheckedProblem, found: Findings, diverged: int | None, floor: np.ndarray | None) -> None:
    """The trajectory's verdict, the causes of the errors found, and notes on ties, outliers and softness."""
    trajectory_verdict(diverged, found.mismatches, found.failures, found.notes, ties_fail=p.hard)
    if diverged is not None and p.hard:
        # Where the circuit's trajectory meets the reference's again (the same fixed point), say from when.
        labels = [p.cap.assignments(t)[p.b] for t in range(p.T + 1)]
        same = [np.array_equal(labels[t], p.trace.assignments[t])
                and float(np.abs(p.cap.centroids(t)[p.b] - p.trace.centroids[t]).max()) <= p.tol.centroid
                for t in range(p.T + 1)]
        meet = next((t for t in range(diverged + 1, p.T + 1) if all(same[t:])), None)
        if meet is not None:
            found.notes.append(f"the trajectories meet again: from t = {meet} on, every label is the reference's and"
                               f" every centroid within {p.tol.centroid:.2g} of the reference's")
    # Causes of the step-wise and trajectory errors alike (a float32 block can match the reference step on its own
    # rounded input while its trajectory leaves Lloyd's: the tie-break decided a gap float64 resolves).
    found.failures.extend(cause_failures(found.mismatches, p.tie_break_abs, p.scale))
    # Ties are the reference's (at the data's precision for distance costs), whatever the circuit's dtype.
    found.notes.extend(tie_notes(found.ties, "distance" if p.certified is not None else
                                 "hard" if p.hard else "soft", p.tol_R))
    if p.spec.sink_logit is not None:
        outliers = np.flatnonzero(p.cap.assignments(p.T)[p.b] < 0)
        shown = ", ".join(map(str, outliers[:20])) + (" ..." if len(outliers) > 20 else "")
        found.notes.append(f"{len(outliers)} outlier(s) at the final assignment (label -1)"
                           + (f": points {shown}" if len(outliers) else ""))
    if not p.hard:
        found.notes.append(f"soft by design: responsibilities checked to {p.tol_R:.2g} (float64 at stiffness"
                           f" {p.beta:g}); trajectory within {FLOOR_FACTOR:g}x the reference's own float64 noise"
                           f" floor ({float(floor.max()):.2g})")


def _certificate(p: CheckedProblem, found: Findings) -> tuple[bool, tuple[np.ndarray, np.ndarray]]:
    """Whether every attention pattern was exactly hard, and the final assignment's certificate (margins, leak
    bounds); notes where attention was not hard and where the dtype makes the run an approximation."""
    cap, b, spec, T = p.cap, p.b, p.spec, p.T
    all_assign = [assign_certificate(cap.assign_attention(t), spec, b) for t in range(T + 1)]
    all_update = [] if spec.swapped_update_normalisation else [cap.layers[layer].attention
                                                                for layer in p.circ.centroid_layers]
    hard_attention = p.hard and all(float(leak.max()) == 0.0 for _, leak in all_assign) and all(
        float(a.leak_bound[b].max()) == 0.0 for a in all_update)
    if p.hard and not hard_attention:
        worst = min(float(m.min()) for m, _ in all_assign)
        found.notes.append(f"some attention is not exactly hard (smallest assignment margin {worst:.3g}; margins"
                           f" above {FLOAT64_UNDERFLOW:.0f} give exactly one-hot patterns in float64)")
    if p.circ.dtype != torch.float64:
        what = "Lloyd's algorithm" if spec.unaltered else spec.name
        found.notes.append(f"{p.dtype_name} cannot hold beta * score exactly: this run is an approximation of {what},"
                           f" held to its float64 reference" + (f"; every assignment was checked against"
                                                                f" {p.dtype_name}'s resolution window"
                                                                if p.check_resolution else ""))
    return hard_attention, all_assign[T]
