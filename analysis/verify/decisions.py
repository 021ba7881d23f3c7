"""The trajectory check of a hard circuit whose costs are squared distances, against its certified reference run
(:mod:`analysis.verify.fast.certified`, exact arithmetic at the data's precision), and the words for what it finds.

Each of the circuit's labels at iterate ``t`` is the reference's, or it is a mismatch, explained in exact
arithmetic (:meth:`~analysis.verify.fast.certified.CertifiedRun.explain`):

* a **tie resolved unlike the reference**: the label is in the point's tie set (the data's precision cannot
  order it against the exact nearest), but not its lowest label, which Lloyd's rule takes;
* an **error**: the data decides that the label is not the nearest. Its cause is named only where the run shows it
  (:data:`CAUSES`): ``near-tie`` when float64 in the user's units cannot order the two squared distances (so only
  exact arithmetic decides them), ``tie-break`` when the circuit's tie-break covers the gap and the label is the
  lower index, ``resolution`` when the gap lies within the circuit's own rounding of the two scores.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from analysis.verify.report import Check, Mismatch, MismatchKind, Tie, Unresolved

#: The cause of an error the data decides by less than float64 orders in the user's units.
NEAR_TIE = "near-tie"


def check_trajectory(p, t: int, got: np.ndarray, margins: np.ndarray, at) -> tuple[list[Mismatch], list[Tie]]:
    """Labels ``got`` at iterate ``t`` against problem ``p``'s certified reference run: the mismatches, each with
    its exact gap, bound and cause, and the reference's ties (with the label the circuit chose)."""
    run = p.certified
    ties = [Tie(tie.point, at.layer, t, list(tie.candidates), int(got[tie.point]), float(margins[tie.point]),
                tie.nearest, [float(v) for v in tie.gaps], [float(v) for v in tie.bounds]) for tie in run.ties[t]]
    expected = run.assignments[t]
    C = run.trace.centroids[t]
    mismatches = []
    for i in np.flatnonzero(expected != got).tolist():
        g, e = int(got[i]), int(expected[i])
        why = run.explain(t, i, g)
        if why.gap is None:  # no column has that label
            mismatches.append(Mismatch(i, at.layer, t, e, g, float(margins[i]), float("inf"), MismatchKind.ERROR,
                                       at.check, nearest=why.nearest))
            continue
        pair = [label for label in (g, why.nearest) if label >= 0]
        float64 = float(p.float64_window(C, i)[pair].sum())
        circuit = float(p.circuit_window(C, i)[pair].sum()) if p.circuit_window is not None else 0.0
        kind = MismatchKind.TIE if g in why.tied else MismatchKind.ERROR
        cause = "" if kind == MismatchKind.TIE else _cause(why.gap, g, why.nearest, float64, circuit,
                                                             p.tie_break_abs)
        mismatches.append(Mismatch(i, at.layer, t, e, g, float(margins[i]), float(why.gap), kind, at.check,
                                   float(why.bound), cause, why.nearest, float64, circuit))
    return mismatches, ties


def _cause(gap: Fraction, got: int, nearest: int, float64: float, circuit: float, tie_break: float) -> str:
    """The cause the run shows for an error whose exact gap is ``gap`` (first that holds, in :data:`CAUSES`'
    order): float64's window, then the circuit's tie-break (only for a lower label), then its rounding."""
    if gap <= float64:
        return NEAR_TIE
    if 0 <= got < nearest and gap <= tie_break * (nearest - got) + circuit:
        return "tie-break"
    if gap <= circuit:
        return "resolution"
    return ""


def tie_break_sent(m: Mismatch, tie_break: float) -> bool:
    """Whether the circuit's tie-break covers an error's gap and it went to the lower label (a fact, not a guess)."""
    return 0 <= m.got < m.nearest and m.gap <= tie_break * (m.nearest - m.got) + m.circuit_window


#: What each cause but ``near-tie`` means, for the failure that names it.
CAUSES = {
    "tie-break": "lie within the circuit's tie-break ({tie_break:.3g} squared user units per index), which sent"
                 " them to the lower index",
    "resolution": "lie within the circuit's own rounding of the two scores in its unit coordinates",
}


def cause_failures(mismatches: list[Mismatch], tie_break_abs: float, scale: float) -> list[str]:
    """A failure per cause the errors show (each point and iteration counted once)."""
    out = []

    def hit(cause: str) -> list[Mismatch]:
        # A point can fail the step-wise and the trajectory check at the same iteration: count it once.
        return list({(m.point, m.iteration): m for m in mismatches
                     if m.cause == cause and m.kind == MismatchKind.ERROR}.values())

    near = hit(NEAR_TIE)
    if near:
        first = min(near, key=lambda m: (m.iteration, m.point))
        gaps = sorted({f"{abs(m.gap):.2g}" for m in near}, key=float)
        sent = (f"; the circuit's tie-break ({tie_break_abs:.3g} per index) sent it to the lower index"
                if tie_break_sent(first, tie_break_abs) else "")
        out.append(f"{NEAR_TIE}: {len(near)} assignment(s) the data decides differ from the exact decision (first:"
                   f" point {first.point} at t = {first.iteration}, to centroid {first.got} where centroid"
                   f" {first.nearest} is nearer by {first.gap:.2g} squared user units, beyond the {first.window:.2g}"
                   f" the data's precision can move it, within float64's window {first.float64_window:.2g}, so"
                   f" decided in exact arithmetic){sent}; gaps: {', '.join(gaps[:4])}"
                   + (" ..." if len(gaps) > 4 else ""))
    for cause, what in CAUSES.items():
        found = hit(cause)
        if found:
            worst = max(found, key=lambda m: m.gap)
            out.append(f"{cause}: {len(found)} assignment(s) whose gaps the data decides"
                       f" {what.format(tie_break=tie_break_abs)} (e.g. point {worst.point} at t = {worst.iteration}:"
                       f" gap {worst.gap:.3g} squared user units): the data's dynamic range (scale {scale:.3g}) is"
                       f" beyond what the circuit resolves; pass a smaller --tie-break with a larger --beta, or"
                       f" cluster the far points separately")
    return out


def trajectory_verdict(diverged: int | None, mismatches: list[Mismatch], failures: list[str], notes: list[str],
                       ties_fail: bool = False) -> None:
    """What the trajectory comparison adds to the verdict: a failure per label that differs outside its tie set,
    and for a tie that sent the trajectory another way a failure (``ties_fail``: the result is then not the
    reference's) or a note (soft algorithms, whose labels are only a readout)."""
    n_tied = sum(m.kind == MismatchKind.TIE and m.check == Check.TRAJECTORY for m in mismatches)
    if diverged is not None and ties_fail and n_tied:
        failures.append(
            f"a tie in the assignment at t = {diverged} was resolved unlike the reference ({n_tied} label(s) not"
            f" the lowest of their tie set, which Lloyd's rule takes): the circuit's result is not the reference's"
            f" from there on"
        )
    elif diverged is not None and ties_fail:
        notes.append(f"from the assignment at t = {diverged} on, the circuit's trajectory is not the reference's:"
                     " later iterations are compared for information only (the step-wise check still covers every"
                     " layer)")
    elif diverged is not None:
        notes.append(
            f"a tie in the assignment at t = {diverged} was resolved differently from the reference; from there on"
            " the trajectory is compared for information only (the step-wise check still covers every layer)"
        )
    n_traj_errors = sum(m.kind == MismatchKind.ERROR and m.check == Check.TRAJECTORY and m.cause != NEAR_TIE
                        for m in mismatches)
    if n_traj_errors:
        failures.append(f"{n_traj_errors} label(s) differ from the reference trajectory (not ties)")


def tie_notes(ties: list[Tie], kind: str, tol_R: float) -> list[str]:
    """Notes on the ties of a ``kind`` of reference: ``"distance"`` (at the data's precision), ``"hard"`` (the
    circuit's tie rule on cosines) or ``"soft"`` (equal responsibilities within twice ``tol_R``)."""
    if not ties:
        return []
    lower = sum(tie.chosen == min(tie.candidates) for tie in ties)
    went = f"{lower} went to the lower index" + (f", {len(ties) - lower} did not" if lower < len(ties) else "")
    if kind == "distance":
        return [f"{len(ties)} assignment(s) tied at the data's precision (squared distances to the nearest"
                f" centroids within what moving each input by half an ulp can change, in exact arithmetic): {went}"]
    if kind == "hard":
        return [f"{len(ties)} tied assignment(s) (costs equal within the circuit's tie rule): {went}"]
    return [f"{len(ties)} label readout tie(s): the largest responsibilities are equal within {2 * tol_R:.2g},"
            " so the hard label (their argmax) may differ from the reference's while the responsibilities agree"]


def resolution_failures(unresolved: list[Unresolved], dtype: str) -> list[str]:
    """One failure (cause ``resolution``) naming the assignments the circuit's dtype could not decide."""
    if not unresolved:
        return []
    worst = max(unresolved, key=lambda u: u.window - u.gap)
    points = len({u.point for u in unresolved})
    return [f"resolution: {len(unresolved)} assignment(s) ({points} point(s)) lie within {dtype}'s resolution window:"
            f" the two nearest centroids' costs differ by less than {dtype} rounds them to (e.g. point {worst.point}"
            f" at iteration {worst.iteration}: gap {worst.gap:.3g} <= window {worst.window:.3g} squared user units),"
            f" so the label is rounding's choice, not certified to be Lloyd's; run with --dtype float64"]
