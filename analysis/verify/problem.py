"""The records a verification passes between its stages: the problem as captured, and what the checks found.

:class:`Problem` is the first stage of :func:`analysis.verify.verify_problem` (one problem of a captured batch
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
    At, TieRule, by_distance, check_costs, circuit_input_window, circuit_window, make_reference, max_stiffness,
    tie_window_at,
)
from analysis.verify import trajectory_rows
from analysis.verify.nearest import exact_costs
from analysis.verify.report import Check, Mismatch, Tie, Tolerances, Unresolved, tolerances
from analysis.verify.windows import circuit_rows
from circuits.reference import Reference, Trace

#: ``centroids -> per-entry rounding window`` of the squared distances to them (user units).
Rounding = Callable[[np.ndarray], np.ndarray]


@dataclass
class Problem:
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
    #: The tie window at each reference iterate, computed beside the prefetched reference run (else made here).
    tie_windows: list[float] | None = None
    #: The trajectory check's near rows at each reference iterate (:mod:`analysis.verify.trajectory_rows`),
    #: computed beside the prefetched reference run; ``None`` (or an entry ``None``): computed in the check.
    trajectory_near: list | None = None

    @classmethod
    def of(cls, cap: Capture, b: int, prefetched=None) -> Problem:
        """The capture stage: read problem ``b``, run its reference (or take the run ``prefetched``, an
        :class:`analysis.verify.prefetch.ReferenceRun` of the same problem), and state the tolerances."""
        circ, enc = cap.circuit, cap.encoded
        X, C0 = enc.X[b], enc.C0[b]
        d, s = circ.layout.d, float(enc.scaling.scale[b])
        tol = tolerances(circ.dtype, d, s, float(np.abs(np.concatenate([X, C0])).max()))
        if prefetched is not None:
            ref, trace = prefetched.result(cap, b)
        else:
            ref = make_reference(cap, b)
            trace = ref.run(X, C0, circ.iterations)
        distance = ref.hard and by_distance(circ)
        tie_break_abs = circ.sharpness.tie_break * s**2
        if distance:
            # tol.tie_window becomes the widest of ref.tie_window (resolution_window, make_reference) along the
            # reference run: widened by the trajectory stage (widen_tie_window), where each iterate's distances are
            # at hand. Until then no check reads it (distance costs tie within E, not within tol.tie_window).
            tol.tie_window = 0.0
            tol.tie_break = tie_break_abs
        beta = max_stiffness(circ)
        member = max([blk.notes.get("member", 0.0) + 4 * blk.notes.get("gamma", 0.0) for blk in circ.blocks] + [0.0])
        return cls(
            cap=cap, b=b, ref=ref, trace=trace, tol=tol, beta=beta, tie_break_abs=tie_break_abs, distance=distance,
            tol_R=32 * (d + 2) * tol.eps * (1 + 4 * beta),
            tol_W=1e3 * tol.eps + 16 * (d + 3) * tol.eps * member * math.sqrt(enc.n),
            own_rounding=circuit_window(circ, enc, b) if distance else None,
            coarse=circuit_input_window(circ, enc, b) if distance else None,
            tie_windows=prefetched.tie_windows if prefetched is not None else None,
            trajectory_near=prefetched.trajectory_near if prefetched is not None else None,
        )

    def widen_tie_window(self, t: int) -> None:
        """Widen ``tol.tie_window`` by the window of the reference's centroids after ``t`` iterations (distance costs;
        once per ``t``: the trajectory stage calls it as it checks iterate ``t``)."""
        if self.distance:
            window = (self.tie_windows[t] if self.tie_windows is not None
                      else tie_window_at(self.trace.centroids[t], self.X, self.ref.tie_window))
            self.tol.tie_window = max(self.tol.tie_window, window)

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
        """Hard labels ``got`` against the reference's assignment to centroids ``C`` (or ``expected``).

        The trajectory check decides near ties exactly (the reference's centroids are its own float64 values, so
        exact Lloyd's is defined on them); the step-wise check does not: a block's decoded input carries the
        decoding's rounding, so a gap within the window there says nothing about the block."""
        near = self._reference_near(C, got, at, expected)
        if near is not None:
            # The reference run's own near rows: the costs and windows are read at the mismatches alone.
            cost, E = trajectory_rows.costs_on_demand(self.ref, self.X, C)
            rule = TieRule(self.tol.tie_window, self.bias_scale(state), E, self.tie_break_abs,
                           circuit_rows(self.own_rounding, C) if self.own_rounding is not None else None,
                           exact_costs(self.X, C, cost))
            return check_costs(cost, got, margins, at, rule, expected, near)
        cost = self.ref.costs(self.X, C, at.iteration)
        E = self.ref.cost_uncertainty(cost, C)
        if at.check == Check.STEP and self.coarse is not None and E is not None:
            # A block's decoded input carries the circuit dtype's rounding of the true centroids (float32's), so
            # against the reference step on that input, gaps within that rounding are ties of the rounded problem.
            E = E.copy()
            E[:, : C.shape[0]] += self.coarse(C)
        exact = exact_costs(self.X, C, cost) if at.check == Check.TRAJECTORY and E is not None else None
        # check_costs reads the circuit's own rounding at its mismatches alone: their rows are made as read.
        rule = TieRule(self.tol.tie_window, self.bias_scale(state), E, self.tie_break_abs,
                       circuit_rows(self.own_rounding, C) if self.own_rounding is not None else None, exact)
        return check_costs(cost, got, margins, at, rule, expected)

    def _reference_near(self, C: np.ndarray, got: np.ndarray, at: At, expected) -> dict | None:
        """The prefetched near rows for a trajectory check of iterate ``at.iteration`` (at the reference's own
        centroids and labels, with few enough mismatches to read row by row), else ``None``."""
        t = at.iteration
        if (at.check != Check.TRAJECTORY or expected is None or self.trajectory_near is None
                or t >= len(self.trajectory_near) or self.trajectory_near[t] is None
                or not trajectory_rows.applies(self.ref, C) or not np.array_equal(C, self.trace.centroids[t])
                or np.count_nonzero(np.asarray(expected) != got) > trajectory_rows.MOST_ROWS):
            return None
        return self.trajectory_near[t]


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
