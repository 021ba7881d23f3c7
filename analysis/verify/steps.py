"""The step-wise stage of a verification: each block's output against the reference step on its decoded input.

This localises a fault to a block. Assign layers of hard algorithms: the labels must minimise the reference's cost
with ties as in :mod:`analysis.verify.checks` (and, in a dtype coarser than float64, be decided by it); of soft
ones: the responsibilities must equal the reference's within ``tol_R``. Update layers: the centroids must equal the
reference update of the block's input and ``N`` must hold ``|c|^2``; where a hook swaps the update head's
normalisation, its pattern must equal the reference's weights within ``tol_W``.
"""

from __future__ import annotations

import numpy as np

from analysis.scheduler import Scheduler
from analysis.verify.checks import At, assign_certificate, unresolved_decisions, update_weight_error
from analysis.verify.decisions import resolution_failures
from analysis.verify.fast import blocks
from analysis.verify.problem import Findings, CheckedProblem
from analysis.verify.report import Check, MismatchKind, Tie
from circuits.blocks import ASSIGN, UPDATE
from circuits.onehot import OneHotStack
from circuits.reference import cluster_means, labels_of, one_hot


def check_blocks(p: CheckedProblem, found: Findings, scheduler: Scheduler) -> None:
    """Check every captured block of ``p`` against its reference step; what fails goes to ``found``.

    Each block's check writes what it finds to a record of its own (they read nothing another writes), merged into
    ``found`` in layer order: the same findings, in the same order, whether the blocks ran one after another or on
    ``scheduler``'s threads (numpy's work releases the interpreter: at a million points the step-wise checks are
    4 s, which two cores halve)."""
    layers = [lc for lc in p.cap.layers if lc.kind in (ASSIGN, UPDATE)]
    parts = scheduler.map(lambda lc: _check_block(p, lc), layers)
    for part in parts:
        found.merge(part)
    n_step_errors = sum(m.kind == MismatchKind.ERROR for m in found.mismatches)
    if n_step_errors:
        found.failures.append(f"{n_step_errors} assignment(s) differ from the reference step on their block's input"
                              " beyond the tie window")
    found.failures.extend(resolution_failures(found.unresolved, p.dtype_name))


def _check_assign(p: CheckedProblem, lc, found: Findings) -> None:
    t = p.circ.assignment_layers.index(lc.layer)
    margins, _ = assign_certificate(lc.attention, p.spec, p.b)
    if not p.hard:
        _check_soft_assign(p, lc, t, margins, found)
        return
    C_in, labels = lc.pre.centroids[p.b], lc.post.labels[p.b]
    # A Y held as labels (a lean capture's OneHotStack) is read as them: its n x k one-hot matrix is not made.
    held = lc.post.assignments.labels[p.b] if isinstance(lc.post.assignments, OneHotStack) else None
    Y = lc.post.assignments[p.b] if held is None else None
    dense_Y = lambda: Y if Y is not None else one_hot(held, C_in.shape[0])  # noqa: E731
    # The step's ties are its decoded input's window, not the data's: the trajectory check lists the exact ties.
    mismatches, tied = p.check_hard(C_in, labels, margins, At(lc.layer, t, Check.STEP), lc.pre)
    found.mismatches.extend(mismatches)
    if held is not None and np.array_equal(held, labels):
        a_err = 0.0  # Y is one_hot(labels) itself
    else:
        a_err = _one_hot_error(dense_Y(), labels)
    found.step_counts[t] = (sum(m.kind == MismatchKind.ERROR for m in mismatches), len(tied), a_err)
    # The iteration record's objective (centroids after t updates, the assignment to them): where the block reads
    # the update block's output directly, its input is them.
    if lc.pre is p.cap.layers[p.circ.centroid_layers[t]].post:
        found.objective_circuit[t] = p.objective(C_in, held if held is not None else labels_of(dense_Y()), dense_Y)
    if p.check_resolution:
        found.unresolved.extend(unresolved_decisions(blocks.sq_distances(p.X, C_in), labels, p.tie_break_abs,
                                                     p.own_rounding(C_in), lc.layer, t))


def _check_block(p: CheckedProblem, lc) -> Findings:
    """What the check of one captured block finds, in a record of its own."""
    part = Findings()
    (_check_assign if lc.kind == ASSIGN else _check_update)(p, lc, part)
    return part


#: Rows of ``Y`` compared at once by :func:`_one_hot_error` (its temporaries stay in cache).
_ROWS = 4096


def _one_hot_error(Y: np.ndarray, labels: np.ndarray) -> float:
    """``float(np.abs(Y - one_hot(labels, Y.shape[1])).max())``, block by block of rows, without the one-hot
    matrix: a zero of it leaves ``|y|`` (``y - 0.0`` is ``y``), a one gives ``|y - 1|``, both in float64 as the
    difference with the float64 matrix is; the largest of the blocks' largest is the whole's (NaN included)."""
    if len(Y) == 0 or Y.ndim != 2:
        return float(np.abs(Y - one_hot(labels, Y.shape[1])).max())
    labels = np.asarray(labels)
    largest = []
    for start in range(0, len(Y), _ROWS):
        block = np.abs(np.asarray(Y[start : start + _ROWS], dtype=np.float64))
        own = labels[start : start + _ROWS]
        rows = np.flatnonzero(own >= 0)
        block[rows, own[rows]] = np.abs(np.asarray(Y[start + rows, own[rows]], dtype=np.float64) - 1.0)
        largest.append(block.max())
    return float(np.max(largest))


def _check_soft_assign(p: CheckedProblem, lc, t: int, margins: np.ndarray, found: Findings) -> None:
    R_ref = p.ref.assign(p.X, lc.pre.centroids[p.b], t)
    a_err = float(np.abs(lc.post.assignments[p.b] - R_ref).max())
    # The hard label is only a readout (argmax) of the responsibilities, which are what is checked; where the
    # largest ones are equal within tol_R the readout may go either way: a tie, reported as such.
    within = R_ref >= R_ref.max(axis=1, keepdims=True) - 2 * p.tol_R
    got_labels = lc.post.labels[p.b]
    tied = [Tie(int(i), lc.layer, t, [int(j) for j in np.flatnonzero(within[i])], int(got_labels[i]),
                float(margins[i])) for i in np.flatnonzero(within.sum(axis=1) > 1)]
    found.ties.extend(tied)
    found.step_counts[t] = (0, len(tied), a_err)
    if a_err > p.tol_R:
        found.failures.append(f"layer {lc.layer} (assign {t}): responsibilities off the reference step by"
                              f" {a_err:.3g} > {p.tol_R:.3g}")
        found.failing_layers.append(lc.layer)


def _check_update(p: CheckedProblem, lc, found: Findings) -> None:
    u, b, tol = p.circ.centroid_layers.index(lc.layer), p.b, p.tol
    if u == 0:
        # The first update commits the initial centroids from C_stage.
        expected_c = p.C0
        W = None
        if p.spec.swapped_update_normalisation:  # only then read (k x n: 80 MB at a million points)
            W = np.zeros((p.C0.shape[0], p.enc.n + 1))
            W[:, -1] = 1.0
    else:
        C_in = lc.pre.centroids[b]
        if isinstance(lc.pre.assignments, OneHotStack) and p.ref.mean_update:
            # A mean update reads labels_of(R), which for R = one_hot(labels) are the labels: no n x k matrix.
            R_in = None
            expected_c = cluster_means(p.X, lc.pre.assignments.labels[b], C_in)
        else:
            R_in = lc.pre.assignments[b]
            expected_c = p.ref.update(p.X, R_in, C_in, u)
        # Read only for a swapped normalisation, or an update whose weights can fail (a mean's never do).
        if p.spec.swapped_update_normalisation or not p.ref.mean_update:
            R_in = lc.pre.assignments[b] if R_in is None else R_in
            W = p.ref.update_weights(p.X, R_in, C_in, u)
        else:
            W = None
    err = float(np.abs(lc.post.centroids[b] - expected_c).max())
    found.step_centroid_error[u] = err
    if err > tol.centroid:
        found.failures.append(f"layer {lc.layer} (update {u}): centroid off its reference step by {err:.3g}"
                              f" > {tol.centroid:.3g}")
        found.failing_layers.append(lc.layer)
    if p.spec.swapped_update_normalisation:
        w_err = update_weight_error(lc.attention, W, p.enc.sequence, b)
        found.step_weight_error[u] = w_err
        if w_err > p.tol_W:
            found.failures.append(f"layer {lc.layer} (update {u}): attention pattern off the reference weights by"
                                  f" {w_err:.3g} > {p.tol_W:.3g}")
            found.failing_layers.append(lc.layer)
    unit_c = lc.post.unit_centroids[b]
    n_err = float(np.abs(lc.post.unit_sq_norms[b] - (unit_c**2).sum(-1)).max())
    if n_err > tol.sq_norm * max(1.0, float((unit_c**2).sum(-1).max())):
        found.failures.append(f"layer {lc.layer}: N differs from |c|^2 by {n_err:.3g} (unit-scaled)"
                              f" > {tol.sq_norm:.3g}")
        found.failing_layers.append(lc.layer)
