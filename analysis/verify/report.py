"""What a verification returns: the report, its records and its tolerances (no checking happens here).

:func:`analysis.verify.verify_problem` fills a :class:`VerificationReport`; ``verified`` is its one-bit summary
and the rest says why: per-iteration records with the certificate of each assignment (smallest margin
``beta * gap`` and the leak bound it implies), ties, mismatches and the tolerances used.

The proven sharpness bound (``sharpness_bound``, and each record's ``proven_bound``) may be held as a
:class:`~analysis.scheduler.Task`: evaluated the first time it is read (or on a worker of the run's scheduler),
from inputs read when the report was made. It is the same
number either way; a fit that only asks whether it was verified (a model search) does not pay for it.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from enum import Enum

import torch

from analysis.scheduler import Task
from analysis.verify import verdict as vocabulary
from analysis.verify.verdict import Verdict, bound_text, convergence_text, tie_text

class MismatchKind(str, Enum):
    """A label that differs from the reference's: within float64's tie window, or not. Compares as its name."""

    TIE = "tie"
    ERROR = "error"

    def __str__(self) -> str:
        return self.value


class Check(str, Enum):
    """Which comparison found a mismatch: a block against the reference step on its own input, or the run against
    the reference trajectory. Compares as its name."""

    STEP = "step"
    TRAJECTORY = "trajectory"

    def __str__(self) -> str:
        return self.value


@dataclass
class Mismatch:
    """A point whose assignment differs from the reference's at one layer."""

    point: int
    layer: int
    iteration: int
    expected: int
    got: int
    margin: float
    #: The chosen label's cost above the expected one's (step-wise), or above the exact nearest one's, in exact
    #: arithmetic (the trajectory of a distance reference): squared user units.
    gap: float
    kind: MismatchKind
    check: Check
    #: The window the gap was held to: the rounding window ``E_ij1 + E_ij2`` of a step-wise check; against a
    #: distance reference's trajectory, the bound ``W`` within which the data's precision would make it a tie.
    window: float = 0.0
    #: Why an error happened, where the run shows it: ``"near-tie"`` (the data decides it, by less than float64
    #: orders in these units), ``"tie-break"`` (the circuit's tie-break covers the gap and sent the point to the
    #: lower index), ``"resolution"`` (the gap is within the circuit's own rounding); ``""`` where none holds.
    cause: str = ""
    #: Trajectory of a distance reference: the exact nearest label (-1: none known), float64's window of the two
    #: costs in the user's units, and the circuit's own rounding window of them (squared user units).
    nearest: int = -1
    float64_window: float = 0.0
    circuit_window: float = 0.0


@dataclass
class Tie:
    """A point whose tie set holds more than one label at one assign layer: against a distance reference, the
    labels whose squared distance lies within the data's precision of the exact nearest one's (``nearest``), each
    with its exact gap above the nearest and the bound ``W`` it is within (:mod:`circuits.precision`); the
    reference takes the lowest (``candidates[0]``). Elsewhere, labels whose costs are equal within the stated
    window (``gaps``/``bounds`` empty)."""

    point: int
    layer: int
    iteration: int
    candidates: list[int]
    chosen: int
    margin: float
    nearest: int = -1
    gaps: list[float] = field(default_factory=list)
    bounds: list[float] = field(default_factory=list)

    @property
    def comparisons(self) -> int:
        """The comparisons that tied: each candidate but the nearest, against it."""
        return len(self.candidates) - 1


@dataclass
class Unresolved:
    """A point whose assignment the circuit's dtype cannot decide (float32): the two best candidates' costs
    ``D + t j`` differ by ``gap``, within the circuit's rounding ``window`` (squared user units)."""

    point: int
    layer: int
    iteration: int
    candidates: list[int]
    chosen: int
    gap: float
    window: float


class _Evaluated:
    """A dataclass field that may be set to a :class:`~analysis.scheduler.Task`: reading it gives the value (so do
    ``asdict``, ``repr``, ``==`` and ``dataclasses.replace``, which read fields by attribute). Default ``None``."""

    def __set_name__(self, owner, name: str) -> None:
        self.slot = "_" + name

    def __get__(self, obj, objtype=None):
        if obj is None:
            return None  # the field's default
        value = obj.__dict__.get(self.slot)
        if isinstance(value, Task):
            value = obj.__dict__[self.slot] = value.value()
        return value

    def __set__(self, obj, value) -> None:
        obj.__dict__[self.slot] = value


@dataclass
class IterationRecord:
    """Everything at ``t`` (``iteration``): the centroids after ``t`` updates (their error against the reference,
    the update layer's certificate), the assignment to them (labels, certificate, ties) and the **objective at
    t**, ``sum_i |x_i - c_{label_i}(t)|^2`` of that assignment (the reference's own objective for soft ones)."""

    iteration: int
    label_agreement: float
    max_centroid_error: float
    objective_circuit: float
    objective_reference: float
    min_margin: float
    leak_bound: float
    #: The certificate of the update layer that wrote these centroids; ``None`` where it does not apply (an update
    #: head whose softmax normalisation a variant swapped has no margin).
    update_min_margin: float | None
    update_leak_bound: float | None
    step_centroid_error: float
    step_label_errors: int
    ties: int
    # Variant circuits also fill these; Lloyd's leaves the defaults.
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
    #: (Evaluated on first read: see the module docstring.)
    proven_bound: float | Task | None = _Evaluated()


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
    #: (Evaluated on first read: see the module docstring.)
    sharpness_bound: object = _Evaluated()
    #: Assignments the circuit's dtype cannot decide (checked for float32 circuits; each fails the run with cause
    #: ``resolution``).
    unresolved: list[Unresolved] = field(default_factory=list)
    #: The record of ``t = 0``: the initial centroids and the assignment to them (``per_iteration`` holds
    #: ``t = 1 .. T``; every record's numbers are at its own ``t``).
    initial: IterationRecord | None = None
    #: The first layer a check failed at (``None``: verified, or a failure not tied to a layer) and what it does.
    first_failing_layer: int | None = None
    first_failing_role: str = ""
    #: Hooks found to have changed the run (a report of an ``ActivationCache`` run with hooks:
    #: :func:`analysis.verify.altered.find_alterations`), each as ``"<hook name>: <what changed>"``.
    alterations: list[str] = field(default_factory=list)
    #: The parameters whose bits in what ran differ from the weights as built (edited after the build, e.g. through
    #: ``.data``: :meth:`circuits.build.KMeansCircuit.weight_edits`), by state-dict name. In ``to_dict`` only when
    #: there are some (a command-line run builds its circuit and never has any).
    weight_edits: list[str] = field(default_factory=list)
    #: The model's modules on which hooks a user added ran (:meth:`circuits.build.KMeansCircuit.added_hooks`), by
    #: name; what they changed is not checked (the verification holds the run, hooks and all, to the reference). In
    #: ``to_dict`` only when there are some.
    added_hooks: list[str] = field(default_factory=list)
    #: The largest centroid tolerance the trajectory was held to (user units): ``tolerances.centroid``, or a soft
    #: run's noise floor times ``FLOOR_FACTOR`` where larger.
    centroid_limit: float = 0.0
    #: The reference's short name for the verdict (``"Lloyd's k-means"``, ``"soft k-means"``).
    reference_name: str = "Lloyd's k-means"

    @property
    def tie_mismatches(self) -> list[Mismatch]:
        """Disagreements with the reference that lie inside the tie window."""
        return [m for m in self.mismatches if m.kind == MismatchKind.TIE]

    @property
    def errors(self) -> list[Mismatch]:
        return [m for m in self.mismatches if m.kind == MismatchKind.ERROR]

    @property
    def min_margin(self) -> float:
        return min([r.min_margin for r in self.records] + [self.final_min_margin])

    @property
    def verdict(self) -> str:
        return str(self.verdict_record)

    @property
    def verdict_record(self) -> Verdict:
        """The verdict in the project's one vocabulary (:mod:`analysis.verify.verdict`)."""
        return verdict_of(self)

    @property
    def is_exact(self) -> bool:
        """Exact in the vocabulary's sense: Lloyd's circuit, float64, hard attention at every layer, verified."""
        return self.verdict_record.exact

    def to_dict(self) -> dict:
        out = asdict(self)
        out.update(self.verdict_record.to_dict())
        out["n_ties"] = len(self.ties)
        out["n_tie_mismatches"] = len(self.tie_mismatches)
        out["n_errors"] = len(self.errors)
        out["n_unresolved"] = len(self.unresolved)
        for key in ("weight_edits", "added_hooks"):
            if not out[key]:
                del out[key]
        return _finite(out)

    def _counts_text(self) -> str:
        """Errors and ties in words: the ties the reference run met and how many the circuit resolved unlike it,
        and, apart, the labels a block sent another way within its decoded input's rounding window (step-wise)."""
        along = [m for m in self.tie_mismatches if m.check == Check.TRAJECTORY]
        step = len(self.tie_mismatches) - len(along)
        precision = " at the data's precision" if self.ties and all(t.bounds for t in self.ties) else ""
        return (f"{len(self.errors)} errors, {len(self.ties)} ties{precision} ({len(along)} resolved unlike the"
                f" reference)" + (f"; {step} step-wise label(s) within their block's rounding window, resolved"
                                  f" unlike the reference step" if step else ""))

    @property
    def records(self) -> list[IterationRecord]:
        """Every record, ``t = 0 .. T``."""
        return ([self.initial] if self.initial is not None else []) + list(self.per_iteration)

    def summary(self) -> str:
        """A table with one row per ``t = 0 .. T`` and the verdict, for people."""
        records = self.records
        bounded = any(r.proven_bound is not None for r in records)
        head = (f"{'t':>5} {'labels':>8} {'max |dc|':>10}{' proven |dc|' if bounded else ''} {'objective':>14}"
                f" {'reference':>14} {'min margin':>11} {'leak bound':>10}")
        lines = [head]
        for r in records:
            lines.append(
                f"{r.iteration:>5} {r.label_agreement:>8.2%} {r.max_centroid_error:>10.2e}"
                + (f" {_bound_text(r.proven_bound):>11}" if bounded else "") + f" {r.objective_circuit:>14.8g}"
                f" {r.objective_reference:>14.8g} {r.min_margin:>11.3g} {bound_text(r.leak_bound):>10}"
            )
        lines.append(self.verdict)
        lines.append(f"{self._counts_text()}, hard attention everywhere: {self.hard_attention}; "
                     + convergence_text(self.converged, self.n_iter, self.iterations))
        # The verdict names the first failure; the rest follow.
        lines.extend(f"failure: {f}" for f in self.failures[1:])
        lines.extend(f"note: {n}" for n in self.notes)
        if bounded:
            lines.append(f"note: proven |dc| bounds how far softmax attention moves the centroids from the hardmax"
                         f" trajectory, in real arithmetic; float64 rounding in the forward pass comes on top (checked"
                         f" within the centroid tolerance {self.tolerances.centroid:.2g})")
        return "\n".join(lines)


def weight_edits_text(edits: list[str]) -> str:
    """Parameters changed since the build (``KMeansCircuit.weight_edits``) in words, the first four named."""
    more = f" and {len(edits) - 4} more" if len(edits) > 4 else ""
    return f"{len(edits)} parameter(s): {', '.join(edits[:4])}{more}"


def verdict_of(rep: VerificationReport) -> Verdict:
    """A circuit's verification in the vocabulary of :mod:`analysis.verify.verdict`: exact only for Lloyd's circuit
    in float64 with hard attention everywhere; a variant names its reference, parameters and tolerance; a failure
    its first failing layer, the hooks that changed the run, and the first cause."""
    from circuits.variants import get_variant

    lloyd = get_variant(rep.variant).unaltered and not rep.variant_params
    if not rep.verified:
        cause = rep.failures[0] if rep.failures else "no failure recorded"
        more = len(rep.failures) - 1
        return vocabulary.failure(cause + (f" (and {more} more)" if more > 0 else ""), reference=rep.reference_name,
                                  layer=rep.first_failing_layer, role=rep.first_failing_role,
                                  altered_by=vocabulary.alterations_named(rep.alterations, rep.weight_edits,
                                                                          rep.added_hooks))
    ties = tie_text([tie for tie in rep.ties if tie.bounds])
    if lloyd and rep.dtype == "float64" and rep.hard_attention:
        return vocabulary.exact_lloyd(rep.dtype, ties)
    if lloyd:
        why = (f"{rep.dtype} cannot hold beta * score exactly" if rep.dtype != "float64"
               else "some attention not exactly one-hot")
        return vocabulary.approximate_lloyd(rep.dtype, rep.centroid_limit or rep.tolerances.centroid, why, ties)
    return vocabulary.matches_variant(rep.reference_name, rep.centroid_limit or rep.tolerances.centroid,
                                      rep.variant_params, dtype=rep.dtype, ties=ties)


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


