"""The records a verification passes between its stages: the problem as captured, and what the checks found.

:class:`CheckedProblem` is the first stage of :func:`analysis.verify.verify_problem` (one problem of a captured batch
with its reference run, tolerances and rounding windows, computed once); :class:`Findings` collects what the
step-wise and trajectory checks find, from which the report is written.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, fields

import numpy as np
import torch

from analysis.capture import Capture
from analysis.verify.checks import (
    At, TieRule, by_distance, check_costs, circuit_input_window, circuit_window, max_stiffness, resolution_window,
    run_reference,
)
from analysis.verify.fast import blocks
from analysis.verify.fast.certified import CertifiedRun
from analysis.verify.report import Mismatch, Tie, Tolerances, Unresolved, tolerances
from analysis.verify.windows import circuit_rows, distance_uncertainty
from circuits.reference import Costs, Reference, Trace

#: ``centroids -> per-entry rounding window`` of the squared distances to them (user units).
Rounding = Callable[[np.ndarray], np.ndarray]


@dataclass
class CheckedProblem:
    """Problem ``b`` of a captured batch and what every check of it shares.

    ``ref``/``trace``: the reference in the user's units and its run from the circuit's initial centroids.
    ``tol_R`` bounds soft responsibilities, ``tol_W`` swapped update patterns (module docstring of
    :mod:`analysis.verify.procedure`). ``own_rounding`` is the circuit dtype's rounding of distances to given
    centroids, ``coarse`` that of a block's decoded input (both for distance costs only, else ``None``)."""

    cap: Capture
    b: int
    ref: Reference
    trace: Trace
    tol: Tolerances
    tol_R: float
    tol_W: float
    beta: float
    tie_break_abs: float
    distance: bool
    own_rounding: Rounding | None
    coarse: Rounding | None
    #: ``(C, D) -> E``: float64's window of the squared distances ``D`` to ``C`` in the user's units (distance
    #: costs), what the step-wise checks tie within.
    resolution: Callable[[np.ndarray, np.ndarray], np.ndarray] | None
    #: The reference's run at the data's precision, for a hard reference whose costs are distances (else ``None``):
    #: ``trace`` is its trace, and the trajectory is checked against it (:mod:`analysis.verify.decisions`).
    certified: CertifiedRun | None = None

    @classmethod
    def of(cls, cap: Capture, b: int, prefetched=None) -> CheckedProblem:
        """The capture stage: read problem ``b``, run its reference (or take the run ``prefetched``, an
        :class:`analysis.verify.prefetch.Prefetched` of the same problem), and state the tolerances."""
        circ, enc = cap.circuit, cap.encoded
        X, C0 = enc.X[b], enc.C0[b]
        d, s = circ.layout.d, float(enc.scaling.scale[b])
        tol = tolerances(circ.dtype, d, s, float(np.abs(np.concatenate([X, C0])).max()))
        ref, run = prefetched.result(cap, b) if prefetched is not None else run_reference(cap, b)
        run, trace = (run, run.trace) if isinstance(run, CertifiedRun) else (None, run)
        distance = ref.hard and by_distance(circ)
        tie_break_abs = circ.sharpness.tie_break * s**2
        if distance:
            # The widest bound among the ties at the data's precision (0: none); the step-wise checks tie within
            # float64's window instead (resolution_window).
            tol.tie_window = max((max(tie.bounds) for ties in run.ties for tie in ties), default=0.0)
            tol.tie_window = float(tol.tie_window)
            tol.tie_break = tie_break_abs
        beta = max_stiffness(circ)
        member = max([blk.notes.get("member", 0.0) + 4 * blk.notes.get("gamma", 0.0) for blk in circ.blocks] + [0.0])
        return cls(
            cap=cap, b=b, ref=ref, trace=trace, tol=tol, beta=beta, tie_break_abs=tie_break_abs, distance=distance,
            tol_R=32 * (d + 2) * tol.eps * (1 + 4 * beta),
            tol_W=1e3 * tol.eps + 16 * (d + 3) * tol.eps * member * math.sqrt(enc.n),
            own_rounding=circuit_window(circ, enc, b) if distance else None,
            coarse=circuit_input_window(circ, enc, b) if distance else None,
            resolution=resolution_window(circ, enc, b) if distance else None, certified=run,
        )

    def float64_window(self, C: np.ndarray, i: int) -> np.ndarray:
        """Point ``i``'s row of float64's window of the squared distances to ``C`` in the user's units
        (:func:`~analysis.verify.windows.distance_uncertainty`): what a float64 program cannot order there."""
        x = self.X[i : i + 1]
        return distance_uncertainty(x, C, blocks.sq_distances(x, C), self.enc.scaling.offset[self.b])[0]

    def circuit_window(self, C: np.ndarray, i: int) -> np.ndarray | None:
        """Point ``i``'s row of the circuit's own rounding window of its scores for centroids ``C`` (``None``:
        not a distance head)."""
        return None if self.own_rounding is None else circuit_rows(self.own_rounding, C)[i]

    @property
    def circ(self):
        return self.cap.circuit

    @property
    def enc(self):
        return self.cap.encoded

    @property
    def spec(self):
        return self.cap.circuit.spec

    @property
    def X(self) -> np.ndarray:
        return self.cap.encoded.X[self.b]

    @property
    def C0(self) -> np.ndarray:
        return self.cap.encoded.C0[self.b]

    @property
    def T(self) -> int:
        return self.cap.circuit.iterations

    @property
    def scale(self) -> float:
        return float(self.cap.encoded.scaling.scale[self.b])

    @property
    def hard(self) -> bool:
        return self.ref.hard

    @property
    def dtype_name(self) -> str:
        return str(self.circ.dtype).replace("torch.", "")

    @property
    def check_resolution(self) -> bool:
        """float64's knobs are derived so that its tie-break exceeds its rounding (circuits/sharpness.py); a coarser
        dtype's cannot be (float32's tie-break is capped), so each of its decisions is checked for resolution."""
        return self.distance and self.circ.dtype != torch.float64

    def bias_scale(self, state) -> float:
        """Spherical: the circuit's tie-break is ``tau j / |c_j|`` in cosine, ``|c_j|`` the stored length."""
        if self.spec.normalise_centroids:
            norms = np.linalg.norm(state.unit_centroids[self.b], axis=-1)
            return float(1.0 / norms.min()) if norms.min() > 0 else math.inf
        return 1.0

    def check_hard(self, C: np.ndarray, got: np.ndarray, margins: np.ndarray, at: At, state,
                   expected: np.ndarray | None = None) -> tuple[list[Mismatch], list[Tie]]:
        """Hard labels ``got`` against the reference's assignment to centroids ``C`` (or ``expected``): a block's
        output against the reference step on its decoded input (its rounding makes gaps within float64's window
        ties there), or the trajectory of a reference whose costs are not distances (spherical's cosines: the
        circuit's tie rule)."""
        cost = self.costs(C, at.iteration)
        E = self._step_window(cost, C) if self.distance else None
        # check_costs reads the circuit's own rounding at its mismatches alone: their rows are made as read.
        rule = TieRule(self.tol.tie_window, self.bias_scale(state), E, self.tie_break_abs,
                       circuit_rows(self.own_rounding, C) if self.own_rounding is not None else None)
        return check_costs(cost, got, margins, at, rule, expected)

    def costs(self, C: np.ndarray, t: int) -> Costs:
        """The reference's costs of the points to centroids ``C`` at ``t``: from the certified run's fast forms
        where there is one (the same numbers), else the reference's own."""
        return self.certified.costs(self.X, C) if self.certified is not None else self.ref.costs(self.X, C, t)

    def objective(self, C: np.ndarray, labels: np.ndarray, R=None) -> float:
        """The reference's objective of centroids ``C`` and an assignment: from its labels (fast, no ``n x k``
        matrix) for a certified reference, whose objective is Lloyd's; else the reference's own of ``R()``."""
        if self.certified is not None:
            return blocks.objective(self.X, C, labels)
        return self.ref.objective(self.X, C, R())

    def _step_window(self, cost: Costs, C: np.ndarray) -> np.ndarray:
        """``E`` for every cost column of a block's input ``C``: float64's window on the centroid columns (plus, in
        a dtype coarser than float64, that dtype's rounding of the block's decoded input), 0 on any other (a
        threshold is exact)."""
        k = C.shape[0]
        window = self.resolution(C, cost.values[:, :k])
        if self.coarse is not None:
            window = window + self.coarse(C)
        if cost.values.shape[1] == k:
            return window
        E = np.zeros_like(cost.values)
        E[:, :k] = window
        return E


@dataclass
class Findings:
    """What the checks of one problem found, stage by stage: mismatches, ties, undecided assignments, failures and
    notes, and per block the step-wise errors the iteration records show (keyed by assign/update index)."""

    mismatches: list[Mismatch] = field(default_factory=list)
    ties: list[Tie] = field(default_factory=list)
    unresolved: list[Unresolved] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: update index -> the largest centroid error against the reference step.
    step_centroid_error: dict[int, float] = field(default_factory=dict)
    #: update index -> the largest error of a swapped update pattern against the reference's weights.
    step_weight_error: dict[int, float] = field(default_factory=dict)
    #: assign index -> (label errors, ties, largest assignment error) against the reference step.
    step_counts: dict[int, tuple[int, int, float]] = field(default_factory=dict)
    #: assign index -> the objective of the block's input centroids and its assignment, computed where the block is
    #: checked (its distances at hand) for the iteration record.
    objective_circuit: dict[int, float] = field(default_factory=dict)
    #: Layers where a failure was found (with the mismatches' own layers, the first failing layer is their min).
    failing_layers: list[int] = field(default_factory=list)
    #: The record of ``t = 0`` (initial centroids) and the largest centroid tolerance the trajectory was held to.
    initial: object = None
    centroid_limit: float = 0.0

    def merge(self, other: Findings) -> None:
        """Add what ``other`` found after what this holds: its lists extend these, its per-block entries join
        these (the trajectory's ``initial`` and ``centroid_limit`` are not a block's)."""
        for f in fields(self):
            mine, theirs = getattr(self, f.name), getattr(other, f.name)
            if isinstance(mine, list):
                mine.extend(theirs)
            elif isinstance(mine, dict):
                mine.update(theirs)
