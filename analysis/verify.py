"""Layer-by-layer verification of a circuit against its reference algorithm; returns a report, never asserts.

Two comparisons are made for every problem of a batch:

* **Step-wise** (localises a fault to a block): each block's output, decoded from the residual stream, is
  compared with the reference operation applied to that block's decoded *input*. An assign layer must give
  every point its nearest centroid (``argmin |x - c_j|^2 + tie_break * j``); an update layer must move every
  centroid to the mean of its members (or keep it when it has none), and write ``|c|^2`` into ``N``.
* **Trajectory** (what a user compares with scikit-learn): the circuit's iterates against the reference run
  from the same initial centroids: per iteration the label agreement, the largest centroid error and the
  k-means objectives, next to the certificate of that iteration's assignment (smallest margin ``beta * gap`` and
  the bound it implies on the attention mass that leaked off the chosen centroid).

Label mismatches are split into *ties* and *errors*. A tie is a point whose two candidate centroids are equally
near up to the stated tie window: the tie-break term ``tie_break * |j1 - j2|`` (the circuit prefers the lower
index within it, by construction) plus a rounding allowance ``16 d eps (1 + max|x| / s)`` (eps of the circuit's
dtype, in squared units of the data scale ``s``: encoding ``(x - mean) / s`` itself rounds at ``eps max|x| / s``).
Ties are reported, not hidden, and never make a run fail; if a tie sends the trajectory another way than the
reference, the trajectory comparison stops counting from there and the report says so.

Tolerances are functions of the circuit's dtype and stated in the report: centroids must agree within
``1e3 eps s + 64 eps max|x|`` (relative precision of the mean, plus what the user's offset leaves representable).
A float32 circuit is an approximation by construction and is reported as ``exact = False`` whatever happens.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import numpy as np
import torch

from analysis.capture import Capture, capture
from circuits import reference
from circuits.build import KMeansCircuit
from circuits.encoding import EncodedBatch
from circuits.sharpness import FLOAT64_UNDERFLOW


@dataclass
class Mismatch:
    """A point whose assignment differs from the reference's at one layer."""

    point: int
    layer: int
    iteration: int
    expected: int
    got: int
    margin: float
    gap: float
    kind: str  # "tie" or "error"
    check: str  # "step" or "trajectory"


@dataclass
class Tie:
    """A point whose nearest centroids are equally near within the tie window at one assign layer."""

    point: int
    layer: int
    iteration: int
    candidates: list[int]
    chosen: int
    margin: float


@dataclass
class IterationRecord:
    """Iteration ``t``: assign to the centroids of ``t - 1``, then update to those of ``t``."""

    iteration: int
    label_agreement: float
    max_centroid_error: float
    objective_circuit: float
    objective_reference: float
    min_margin: float
    leak_bound: float
    update_min_margin: float
    update_leak_bound: float
    step_centroid_error: float
    step_label_errors: int
    ties: int
    # Variant circuits (analysis.verify_variants) also fill these; Lloyd's leaves the defaults.
    #: Largest |Y - R| against the reference trajectory's responsibilities (soft variants; 0 for hard ones).
    max_assignment_error: float = 0.0
    #: Largest |Y - R| against the reference assignment of this layer's own input (soft), or |Y - one-hot| (hard).
    step_assignment_error: float = 0.0
    #: Largest |pattern - reference weights| of an update head whose attention normalisation is swapped (0 if none).
    update_weight_error: float = 0.0
    #: Points the circuit left out (trimmed k-means outliers) at this iteration's assignment.
    outliers: int = 0
    #: Proven bound on ``max_centroid_error`` from the finite sharpness (``analysis.proof.bound``; user units, real
    #: arithmetic, so compare with ``max_centroid_error - tolerances.centroid``). ``None`` where no bound applies.
    proven_bound: float | None = None


@dataclass
class Tolerances:
    centroid: float
    tie_window: float
    sq_norm: float
    eps: float

    def window(self, j1: int, j2: int, tie_break_abs: float) -> float:
        """Two centroids ``j1``, ``j2`` tie for a point when their squared distances differ by at most this."""
        return tie_break_abs * abs(j1 - j2) + self.tie_window


@dataclass
class VerificationReport:
    """Per-problem verdict with its evidence. ``verified`` is the one-bit summary; the rest says why."""

    variant: str
    dtype: str
    n: int
    d: int
    k: int
    iterations: int
    verified: bool
    exact: bool
    hard_attention: bool
    per_iteration: list[IterationRecord]
    final_label_agreement: float
    final_min_margin: float
    final_leak_bound: float
    mismatches: list[Mismatch]
    ties: list[Tie]
    tolerances: Tolerances
    scale: float
    n_iter: int
    diverged_after_tie: int | None = None
    failures: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: The variant's parameters as built (distances unit-scaled); empty for Lloyd's circuit.
    variant_params: dict = field(default_factory=dict)
    #: The reference algorithm the circuit was checked against.
    reference: str = "Lloyd's k-means (circuits.reference.lloyd)"
    #: Per-layer proven bounds on |softmax - hardmax| and their effect (``analysis.proof.bound.SharpnessBound``).
    sharpness_bound: object = None

    @property
    def tie_mismatches(self) -> list[Mismatch]:
        """Disagreements with the reference that lie inside the tie window."""
        return [m for m in self.mismatches if m.kind == "tie"]

    @property
    def errors(self) -> list[Mismatch]:
        return [m for m in self.mismatches if m.kind == "error"]

    @property
    def min_margin(self) -> float:
        return min([r.min_margin for r in self.per_iteration] + [self.final_min_margin])

    @property
    def verdict(self) -> str:
        return verdict_text(self.verified, self.exact, self.dtype)

    def to_dict(self) -> dict:
        out = asdict(self)
        out["n_ties"] = len(self.ties)
        out["n_tie_mismatches"] = len(self.tie_mismatches)
        out["n_errors"] = len(self.errors)
        return _finite(out)

    def summary(self) -> str:
        """A per-iteration table and the verdict, for people."""
        bounded = any(r.proven_bound is not None for r in self.per_iteration)
        head = f"{'iter':>5} {'labels':>8} {'max |dc|':>10}{' proven |dc|' if bounded else ''} {'objective':>14} {'reference':>14} {'min margin':>11} {'leak bound':>10}"
        lines = [head]
        for r in self.per_iteration:
            lines.append(
                f"{r.iteration:>5} {r.label_agreement:>8.2%} {r.max_centroid_error:>10.2e}"
                + (f" {_bound_text(r.proven_bound):>11}" if bounded else "") + f" {r.objective_circuit:>14.8g}"
                f" {r.objective_reference:>14.8g} {r.min_margin:>11.3g} {r.leak_bound:>10.1e}"
            )
        lines.append(
            f"{'final':>5} {self.final_label_agreement:>8.2%} {'':>10}{' ' * 12 if bounded else ''} {'':>14} {'':>14} {self.final_min_margin:>11.3g}"
            f" {self.final_leak_bound:>10.1e}"
        )
        lines.append(
            f"{self.verdict}: {len(self.errors)} errors, {len(self.ties)} ties"
            f" ({len(self.tie_mismatches)} resolved unlike the reference),"
            f" hard attention everywhere: {self.hard_attention}; converged after {self.n_iter} iterations"
        )
        lines.extend(f"failure: {f}" for f in self.failures)
        lines.extend(f"note: {n}" for n in self.notes)
        if bounded:
            lines.append(f"note: proven |dc| bounds how far softmax attention moves the centroids from the hardmax"
                         f" trajectory, in real arithmetic; float64 rounding in the forward pass comes on top (checked"
                         f" within the centroid tolerance {self.tolerances.centroid:.2g})")
        return "\n".join(lines)


def verdict_text(verified: bool, exact: bool, dtype: str) -> str:
    """``VERIFIED (exact, float64)``; a float64 run that fails is held to exact tolerances, not called exact."""
    if not exact:
        return f"{'VERIFIED' if verified else 'NOT VERIFIED'} (approximate, {dtype})"
    return f"VERIFIED (exact, {dtype})" if verified else f"NOT VERIFIED ({dtype}, held to exact tolerances)"


def _bound_text(x: float | None) -> str:
    from analysis.proof.bound import format_bound

    return format_bound(x)


def _finite(obj):
    """JSON has no inf/nan: write them as strings."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return str(obj)
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_finite(v) for v in obj]
    return obj


def tolerances(dtype: torch.dtype, d: int, scale: float, max_abs: float) -> Tolerances:
    eps = float(torch.finfo(dtype).eps)
    ratio = 1.0 + max_abs / scale
    return Tolerances(
        centroid=1e3 * eps * scale + 64 * eps * max_abs,
        tie_window=16 * d * eps * ratio * scale**2,
        sq_norm=1e3 * eps,
        eps=eps,
    )


def check_assignment(X, C, got, margins, layer, iteration, tol: Tolerances, tie_break_abs: float, check: str,
                     expected=None) -> tuple[list[Mismatch], list[Tie]]:
    """Compare labels ``got`` with the nearest centroids of ``C`` (or with ``expected``); find tied points."""
    D = reference.sq_distances(X, C)
    if expected is None:
        expected = np.argmin(reference.tie_broken(D, tie_break_abs), axis=1)
    k = C.shape[0]
    chosen_d = D[np.arange(len(X)), expected]
    index_distance = np.abs(np.arange(k)[None, :] - expected[:, None])
    within = np.abs(D - chosen_d[:, None]) <= tol.window(0, 1, tie_break_abs) * index_distance + tol.tie_window
    ties = [
        Tie(int(i), layer, iteration, [int(j) for j in np.flatnonzero(within[i])], int(got[i]), float(margins[i]))
        for i in np.flatnonzero(within.sum(axis=1) > 1)
    ]
    mismatches = []
    for i in np.flatnonzero(expected != got):
        e, g = int(expected[i]), int(got[i])
        gap = float(D[i, g] - D[i, e]) if g >= 0 else math.inf
        kind = "tie" if g >= 0 and within[i, g] else "error"
        mismatches.append(Mismatch(int(i), layer, iteration, e, g, float(margins[i]), gap, kind, check))
    return mismatches, ties


def verify_problem(cap: Capture, b: int = 0) -> VerificationReport:
    """Verify problem ``b`` of a captured batch against its reference: Lloyd's, or the variant's own algorithm."""
    if getattr(cap.circuit, "spec", None) is not None:
        from analysis.verify_variants import verify_variant_problem

        return verify_variant_problem(cap, b)
    circ, enc = cap.circuit, cap.encoded
    X, C0 = enc.X[b], enc.C0[b]
    T = circ.iterations
    s = float(enc.scaling.scale[b])
    max_abs = float(np.abs(np.concatenate([X, C0])).max())
    tol = tolerances(circ.dtype, circ.layout.d, s, max_abs)
    tie_break_abs = circ.sharpness.tie_break * s**2
    ref = reference.lloyd(X, C0, T, tie_break=tie_break_abs)
    mismatches: list[Mismatch] = []
    ties: list[Tie] = []
    failures: list[str] = []
    notes = list(circ.sharpness.warnings(enc.sequence.n_tokens))
    from analysis.proof.bound import bound_for_capture

    proven = bound_for_capture(cap, b)
    sharpness_bound = proven[0] if proven is not None else None

    # Step-wise: each block against the reference operation applied to its own decoded input.
    step_c_err: dict[int, float] = {}
    step_counts: dict[int, tuple[int, int]] = {}
    for lc in cap.layers:
        if lc.kind == "assign":
            it = circ.assignment_layers.index(lc.layer)
            found, tied = check_assignment(X, lc.pre.centroids[b], lc.post.labels[b], lc.attention.margin[b],
                                           lc.layer, it, tol, tie_break_abs, "step")
            mismatches.extend(found)
            ties.extend(tied)
            step_counts[it] = (sum(m.kind == "error" for m in found), len(tied))
        elif lc.kind == "update":
            it = circ.centroid_layers.index(lc.layer)
            # The first update commits the initial centroids from C_stage; later ones move C to its members' mean.
            expected_c = C0 if it == 0 else reference.update(X, lc.pre.labels[b], lc.pre.centroids[b])
            err = float(np.abs(lc.post.centroids[b] - expected_c).max())
            step_c_err[it] = err
            if err > tol.centroid:
                failures.append(f"layer {lc.layer} (update {it}): centroid off its reference step by {err:.3g} > {tol.centroid:.3g}")
            unit_c = lc.post.unit_centroids[b]
            n_err = float(np.abs(lc.post.unit_sq_norms[b] - (unit_c**2).sum(-1)).max())
            if n_err > tol.sq_norm:
                failures.append(f"layer {lc.layer}: N differs from |c|^2 by {n_err:.3g} (unit-scaled) > {tol.sq_norm:.3g}")
    n_step_errors = sum(m.kind == "error" for m in mismatches)
    if n_step_errors:
        failures.append(f"{n_step_errors} assignment(s) differ from the nearest centroid beyond the tie window")

    # Trajectory: the circuit's iterates against the reference run from the same initial centroids.
    diverged: int | None = None
    records = []
    for t in range(T + 1):
        att = cap.assign_attention(t)
        labels_t = cap.assignments(t)[b]
        traj, _ = check_assignment(X, ref.centroids[t], labels_t, att.margin[b], circ.assignment_layers[t], t,
                                   tol, tie_break_abs, "trajectory", expected=ref.assignments[t])
        if diverged is None and any(m.kind == "tie" for m in traj):
            diverged = t
        if diverged is None:
            mismatches.extend(traj)
        if t == T:
            break
        C_next = cap.centroids(t + 1)[b]
        c_err = float(np.abs(C_next - ref.centroids[t + 1]).max())
        if diverged is None and c_err > tol.centroid:
            failures.append(f"iteration {t + 1}: centroids differ from the reference by {c_err:.3g} > {tol.centroid:.3g}")
        upd = cap.layers[circ.centroid_layers[t + 1]].attention
        errors_t, ties_t = step_counts[t]
        records.append(IterationRecord(
            iteration=t + 1,
            label_agreement=float(np.mean(labels_t == ref.assignments[t])),
            max_centroid_error=c_err,
            objective_circuit=reference.objective(X, C_next, cap.assignments(t + 1)[b]),
            objective_reference=float(ref.objectives[t + 1]),
            min_margin=float(att.margin[b].min()),
            leak_bound=float(att.leak_bound[b].max()),
            update_min_margin=float(upd.margin[b].min()),
            update_leak_bound=float(upd.leak_bound[b].max()),
            step_centroid_error=step_c_err[t + 1],
            step_label_errors=errors_t,
            ties=ties_t,
            proven_bound=sharpness_bound.iteration_bound(t + 1) if sharpness_bound is not None else None,
        ))
    trajectory_verdict(diverged, mismatches, failures, notes)
    if ties:
        notes.append(
            f"{len(ties)} tied assignment(s) (nearest centroids equal within the tie window) went to the lower index"
        )

    all_assign = [cap.assign_attention(t) for t in range(T + 1)]
    all_update = [cap.layers[layer].attention for layer in circ.centroid_layers]
    hard = all(float(a.leak_bound[b].max()) == 0.0 for a in all_assign + all_update)
    if not hard:
        worst = min(float(a.margin[b].min()) for a in all_assign)
        notes.append(
            f"some attention is not exactly hard (smallest assignment margin {worst:.3g}; margins above"
            f" {FLOAT64_UNDERFLOW:.0f} give exactly one-hot patterns in float64)"
        )
    exact = circ.dtype == torch.float64
    if not exact:
        notes.append(f"{circ.dtype} cannot hold beta * score exactly: this run is an approximation of Lloyd's algorithm")
    final_att = all_assign[T]
    return VerificationReport(
        variant=circ.variant,
        dtype=str(circ.dtype).replace("torch.", ""),
        n=enc.n, d=enc.d, k=enc.k, iterations=T,
        verified=not failures,
        exact=exact,
        hard_attention=hard,
        per_iteration=records,
        final_label_agreement=float(np.mean(cap.assignments(T)[b] == ref.assignments[T])),
        final_min_margin=float(final_att.margin[b].min()),
        final_leak_bound=float(final_att.leak_bound[b].max()),
        mismatches=mismatches,
        ties=ties,
        tolerances=tol,
        scale=s,
        n_iter=circuit_n_iter(cap, b),
        diverged_after_tie=diverged,
        failures=failures,
        notes=notes,
        sharpness_bound=sharpness_bound,
    )


def trajectory_verdict(diverged: int | None, mismatches: list[Mismatch], failures: list[str], notes: list[str]) -> None:
    """What the trajectory comparison adds to the verdict: a note if a tie sent it another way, a failure per
    label that differs beyond the tie window (shared by Lloyd's and the variants' verification)."""
    if diverged is not None:
        notes.append(
            f"a tie in the assignment to the centroids of iteration {diverged} was resolved differently from the"
            " reference; from there on the trajectory is compared for information only (the step-wise check still"
            " covers every layer)"
        )
    n_traj_errors = sum(m.kind == "error" and m.check == "trajectory" for m in mismatches)
    if n_traj_errors:
        failures.append(f"{n_traj_errors} label(s) differ from the reference trajectory beyond the tie window")


def circuit_n_iter(cap: Capture, b: int = 0) -> int:
    """Iterations until the circuit's state stops changing, counted like scikit-learn's ``n_iter_``."""
    T = cap.circuit.iterations
    return reference.iterations_run([cap.assignments(t)[b] for t in range(T + 1)],
                                    [cap.centroids(t)[b] for t in range(T + 1)])


def verify(circuit: KMeansCircuit, encoded: EncodedBatch) -> list[VerificationReport]:
    """Run, capture and verify every problem of ``encoded``."""
    cap = capture(circuit, encoded)
    return [verify_problem(cap, b) for b in range(encoded.batch)]
