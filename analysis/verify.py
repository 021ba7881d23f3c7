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
near within what the computation resolves, and nothing more: per point ``i`` and centroid ``j`` the verifier
bounds the uncertainty ``E_ij`` of the squared distance (user units) by the circuit's score rounding
``gamma m_ij s^2`` (:mod:`circuits.sharpness` derives ``gamma`` and ``m_ij = 2|x_i||c_j| + |c_j|^2 + t j`` in
unit coordinates), plus the representation of points and centroids in the user's units
(``8 u sqrt(d D_ij) (|x_i| + |c_j| + 2|mu|)``) and its own rounding of ``D_ij`` (``(d + 2) u D_ij``). Two
centroids tie for a point when their distances differ by at most ``E_ij1 + E_ij2``; the reference then takes
the lower index, as the circuit's tie-break does. Ties are reported, never hidden. The circuit's tie-break
``t`` is uniform while ``E`` shrinks with a point's magnitude, so a gap that float64 resolves can still lie
within ``t |j1 - j2|``: such a point is an error, named as caused by the tie-break (the data's dynamic range
exceeds what one tie-break resolves).

The verdict is strict: VERIFIED means every label of every iteration equals the reference's and every centroid
agrees within the tolerance. A tie resolved unlike the reference, or a trajectory that left the reference's after
one, fails the run with that reason.

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
from circuits.sharpness import FLOAT64_UNDERFLOW, UNIT_ROUNDOFF, score_rounding


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
    #: The tie window ``E_ij1 + E_ij2`` of the two centroids (user units; Lloyd's verification).
    window: float = 0.0
    #: Why an error happened where it is known: ``"tie-break"`` when the gap lies within the circuit's tie-break.
    cause: str = ""


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
    #: Lloyd's: the widest window ``E_ij1 + E_ij2`` between a point's two nearest reference centroids (user units);
    #: variants: the rounding allowance added to their tie-break.
    tie_window: float
    sq_norm: float
    eps: float
    #: The circuit's tie-break ``t`` in squared user units (Lloyd's; 0 where the window above already holds it).
    tie_break: float = 0.0

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
    #: Whether two consecutive iterates of the circuit were equal within its iterations.
    converged: bool = True
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
            f" hard attention everywhere: {self.hard_attention}; "
            + (f"converged after {self.n_iter} iterations" if self.converged
               else f"did not converge within {self.iterations} iterations")
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


def distance_uncertainty(X: np.ndarray, C: np.ndarray, D: np.ndarray, offset: np.ndarray, scale: float,
                         gamma: float, tie_break: float, u: float = UNIT_ROUNDOFF) -> np.ndarray:
    """``E_ij``: how far the squared distance ``D_ij`` may be from what the circuit computed (module docstring).

    ``X`` (n, d), ``C`` (k, d) and ``D`` in user units; ``offset``/``scale`` the encoder's; ``gamma`` and
    ``tie_break`` (unit-scaled) the circuit's; ``u`` the unit roundoff of the circuit's dtype.
    """
    d = X.shape[1]
    ux = np.linalg.norm((X - offset) / scale, axis=1)
    uc = np.linalg.norm((C - offset) / scale, axis=1)
    m = 2 * ux[:, None] * uc[None, :] + uc[None, :] ** 2 + tie_break * np.arange(C.shape[0])[None, :]
    mu = float(np.linalg.norm(offset))
    represent = 8 * u * np.sqrt(d * D) * (np.linalg.norm(X, axis=1)[:, None] + np.linalg.norm(C, axis=1)[None, :] + 2 * mu)
    return gamma * scale**2 * m + represent + (d + 2) * UNIT_ROUNDOFF * D


def check_assignment(X, C, got, margins, layer, iteration, E: np.ndarray, tie_break_abs: float, check: str,
                     expected=None) -> tuple[list[Mismatch], list[Tie]]:
    """Compare labels ``got`` with the nearest centroids of ``C`` (or with ``expected``); find tied points.

    ``E`` is the per-entry uncertainty of the squared distances (:func:`distance_uncertainty`); centroids within
    ``E_ij + E_ie`` of the expected one tie with it. An error whose gap lies within the circuit's tie-break
    ``tie_break_abs * |j1 - j2|`` is marked ``"tie-break"`` in ``Mismatch.cause``.
    """
    D = reference.sq_distances(X, C)
    if expected is None:
        expected = reference.assign_within(D, E)
    rows = np.arange(len(X))
    chosen_d, chosen_e = D[rows, expected], E[rows, expected]
    within = np.abs(D - chosen_d[:, None]) <= E + chosen_e[:, None]
    ties = [
        Tie(int(i), layer, iteration, [int(j) for j in np.flatnonzero(within[i])], int(got[i]), float(margins[i]))
        for i in np.flatnonzero(within.sum(axis=1) > 1)
    ]
    mismatches = []
    for i in np.flatnonzero(expected != got):
        e, g = int(expected[i]), int(got[i])
        gap = float(D[i, g] - D[i, e]) if g >= 0 else math.inf
        kind = "tie" if g >= 0 and within[i, g] else "error"
        window = float(E[i, g] + E[i, e]) if g >= 0 else 0.0
        cause = "tie-break" if kind == "error" and g < e and gap <= tie_break_abs * (e - g) + window else ""
        mismatches.append(Mismatch(int(i), layer, iteration, e, g, float(margins[i]), gap, kind, check, window, cause))
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
    window = resolution_window(circ, enc, b)
    ref = reference.lloyd(X, C0, T, tie_window=window)
    tol.tie_window = _widest_tie_window(ref, X, window)
    tol.tie_break = tie_break_abs
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
            C_in = lc.pre.centroids[b]
            found, tied = check_assignment(X, C_in, lc.post.labels[b], lc.attention.margin[b], lc.layer, it,
                                           window(C_in, reference.sq_distances(X, C_in)), tie_break_abs, "step")
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
    failures.extend(tie_break_failures(mismatches, tie_break_abs, s))

    # Trajectory: the circuit's iterates against the reference run from the same initial centroids.
    diverged: int | None = None
    records = []
    for t in range(T + 1):
        att = cap.assign_attention(t)
        labels_t = cap.assignments(t)[b]
        C_ref = ref.centroids[t]
        traj, _ = check_assignment(X, C_ref, labels_t, att.margin[b], circ.assignment_layers[t], t,
                                   window(C_ref, reference.sq_distances(X, C_ref)), tie_break_abs, "trajectory",
                                   expected=ref.assignments[t])
        if diverged is None:
            mismatches.extend(traj)
            if any(m.kind == "tie" for m in traj):
                diverged = t
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
    trajectory_verdict(diverged, mismatches, failures, notes, ties_fail=True)
    if ties:
        lower = sum(t.chosen == min(t.candidates) for t in ties)
        notes.append(
            f"{len(ties)} tied assignment(s) (nearest centroids equal within float64's resolution, at most"
            f" {tol.tie_window:.3g} in squared user units): {lower} went to the lower index"
            + (f", {len(ties) - lower} did not" if lower < len(ties) else "")
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
        converged=circuit_converged(cap, b),
        failures=failures,
        notes=notes,
        sharpness_bound=sharpness_bound,
    )


def resolution_window(circ: KMeansCircuit, enc: EncodedBatch, b: int = 0):
    """``(C, D) -> E``: the per-entry distance uncertainty of problem ``b`` (:func:`distance_uncertainty`)."""
    X = enc.X[b]
    offset, s = enc.scaling.offset[b], float(enc.scaling.scale[b])
    u = float(torch.finfo(circ.dtype).eps) / 2
    gamma = score_rounding(circ.layout.d, circ.layout.d_model) * u / UNIT_ROUNDOFF
    t = circ.sharpness.tie_break
    return lambda C, D: distance_uncertainty(X, C, D, offset, s, gamma, t, u)


def _widest_tie_window(ref: reference.Trace, X: np.ndarray, window) -> float:
    """The widest window between a point's two nearest centroids along the reference trajectory."""
    widest = 0.0
    if ref.centroids.shape[1] < 2:
        return widest
    for C in ref.centroids:
        D = reference.sq_distances(X, C)
        E = window(C, D)
        two = np.argsort(D, axis=1, kind="stable")[:, :2]
        rows = np.arange(len(X))
        widest = max(widest, float((E[rows, two[:, 0]] + E[rows, two[:, 1]]).max()))
    return widest


def tie_break_failures(mismatches: list[Mismatch], tie_break_abs: float, scale: float) -> list[str]:
    """One failure naming the points whose resolvable gap the circuit's tie-break swallowed, if any."""
    hit = [m for m in mismatches if m.cause == "tie-break"]
    if not hit:
        return []
    worst = max(hit, key=lambda m: m.gap)
    return [f"{len(hit)} assignment(s) with gaps float64 resolves fell within the circuit's tie-break"
            f" ({tie_break_abs:.3g} squared user units per index; e.g. point {worst.point} at iteration"
            f" {worst.iteration}: gap {worst.gap:.3g}, float64 window {worst.window:.3g}): the data's dynamic range"
            f" (scale {scale:.3g}) is beyond what one tie-break resolves; pass a smaller --tie-break with a larger"
            f" --beta, or cluster the far points separately"]


def trajectory_verdict(diverged: int | None, mismatches: list[Mismatch], failures: list[str], notes: list[str],
                       ties_fail: bool = False) -> None:
    """What the trajectory comparison adds to the verdict: a failure per label that differs beyond the tie window,
    and for a tie that sent the trajectory another way a failure (``ties_fail``: the result is then not the
    reference's) or a note (shared by Lloyd's and the variants' verification)."""
    if diverged is not None and ties_fail:
        n_tied = sum(m.kind == "tie" and m.check == "trajectory" for m in mismatches)
        failures.append(
            f"a float64 tie in the assignment to the centroids of iteration {diverged} was resolved unlike the"
            f" reference ({n_tied} label(s)): the circuit's result is not the reference's from there on"
        )
    elif diverged is not None:
        notes.append(
            f"a tie in the assignment to the centroids of iteration {diverged} was resolved differently from the"
            " reference; from there on the trajectory is compared for information only (the step-wise check still"
            " covers every layer)"
        )
    n_traj_errors = sum(m.kind == "error" and m.check == "trajectory" for m in mismatches)
    if n_traj_errors:
        failures.append(f"{n_traj_errors} label(s) differ from the reference trajectory beyond the tie window")


def circuit_converged(cap: Capture, b: int = 0) -> bool:
    """Whether two consecutive iterates of the circuit were equal (else it only hit the iteration limit)."""
    T = cap.circuit.iterations
    return reference.converged([cap.assignments(t)[b] for t in range(T + 1)],
                               [cap.centroids(t)[b] for t in range(T + 1)])


def circuit_n_iter(cap: Capture, b: int = 0) -> int:
    """Iterations until the circuit's state stops changing, counted like scikit-learn's ``n_iter_``."""
    T = cap.circuit.iterations
    return reference.iterations_run([cap.assignments(t)[b] for t in range(T + 1)],
                                    [cap.centroids(t)[b] for t in range(T + 1)])


def verify(circuit: KMeansCircuit, encoded: EncodedBatch) -> list[VerificationReport]:
    """Run, capture and verify every problem of ``encoded``."""
    cap = capture(circuit, encoded)
    return [verify_problem(cap, b) for b in range(encoded.batch)]
