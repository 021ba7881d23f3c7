"""Which points a figure draws: all of them up to a budget; beyond it the points a reader most needs to see (ties,
mismatches, the smallest assignment margins) and a seeded sample of the rest, stratified by cluster; at scale, the
points a lean capture kept, chosen before the run. Only the drawing is sampled: every number in a view's data and in
the tables covers every point.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from jaxtyping import Float, Int

from analysis import scheduler
from analysis.capture import AssignAttention, Capture
from analysis.capture.keep import SAMPLE_SEED, prior_sample
from analysis.views._common import as_capture, report_of, soft_clusters

#: Points drawn per figure by default. Chosen so that a report at n = 2,000 renders in about a second.
DEFAULT_MAX_POINTS = 400
#: At most this share of the drawing budget goes to the points with the smallest assignment margins.
LOW_MARGIN_SHARE = 0.2


def min_assign_margin(cap: Capture, b: int = 0) -> Float[np.ndarray, " n"]:
    """Each point's smallest assignment margin over every assign layer (+inf when there is no runner-up)."""
    margins = [lc.attention.margin[b] for lc in cap.layers if isinstance(lc.attention, AssignAttention)]
    if not margins:
        return np.full(cap.encoded.n, np.inf)
    return np.min(np.stack(margins), axis=0)


@dataclass(frozen=True)
class PointSample:
    """The points a figure draws: sorted indices into the problem's points, and why they were chosen."""

    indices: Int[np.ndarray, " m"]
    n: int
    flagged: int = 0
    low_margin: int = 0
    #: Drawn from the points a lean capture kept (:attr:`~analysis.capture.Capture.sampled`), chosen before the run
    #: with this seed (:func:`analysis.capture.keep.prior_sample`); ``None`` for a sample of a full capture.
    before_run_seed: int | None = None

    @property
    def complete(self) -> bool:
        return len(self.indices) == self.n

    @property
    def drawn(self) -> int:
        return len(self.indices)

    def note(self) -> str:
        if self.before_run_seed is not None:
            return self._before_run_note()
        if self.complete:
            return f"All {self.n:,} points are drawn."
        parts = []
        if self.flagged:
            parts.append(f"every tied or mismatched point ({self.flagged})")
        if self.low_margin:
            parts.append(f"the {self.low_margin} points with the smallest assignment margins")
        parts.append("a seeded random sample of the rest, stratified by final cluster")
        return (
            f"Drawn: {self.drawn:,} of {self.n:,} points ({', '.join(parts)}). Only the drawing is subsampled: "
            f"verification, certificates, norms and every number in the tables use all {self.n:,} points."
        )

    def _before_run_note(self) -> str:
        return (
            f"Drawn: {self.drawn:,} of {self.n:,} points, a uniform random sample (seed {self.before_run_seed}) chosen"
            f" before the run. From {scheduler.AT_SCALE_POINTS:,} points on a run keeps only what its verification"
            " reads, and beside it the attention rows and residual of these points alone; the points a smaller run's"
            " figures single out (ties, mismatches, the smallest margins) are known only once it has run, so they are"
            " drawn only where the sample holds them (the tables list every tie). Only the figures are sampled (the"
            f" residual norms too): verification, certificates and every number in the tables use all {self.n:,}"
            " points."
        )


def point_sample(obj, max_points: int | None = DEFAULT_MAX_POINTS, seed: int = 0, b: int = 0) -> PointSample:
    """Which points to draw when there are more than ``max_points`` (``None``: all of them).

    Priority: points involved in a tie or a mismatch of the verification report; then the points with the
    smallest assignment margins (at most :data:`LOW_MARGIN_SHARE` of the budget); then a seeded random sample
    of the rest, allocated to the final clusters in proportion to their sizes.
    """
    cap = as_capture(obj)
    n = cap.encoded.n
    if cap.lean:
        return kept_sample(cap, max_points)
    if max_points is None or n <= max_points:
        return PointSample(np.arange(n), n)
    if max_points < 1:
        raise ValueError(f"max_points must be positive, got {max_points}")
    chosen: list[int] = []
    rep = report_of(obj)
    if rep is not None:
        flagged = sorted({t.point for t in rep.ties} | {m.point for m in rep.mismatches})
        chosen.extend(flagged[:max_points])
    n_flagged = len(chosen)
    taken = np.zeros(n, dtype=bool)
    taken[chosen] = True
    margin = min_assign_margin(cap, b)
    budget_low = min(int(LOW_MARGIN_SHARE * max_points), max_points - len(chosen))
    low = [int(i) for i in np.argsort(margin, kind="stable") if not taken[i]][:budget_low]
    chosen.extend(low)
    taken[low] = True
    remaining = max_points - len(chosen)
    if remaining > 0:
        rng = np.random.default_rng(seed)
        cluster, _ = soft_clusters(cap.final.assignments[b])
        groups = [np.flatnonzero((cluster == c) & ~taken) for c in np.unique(cluster)]
        sizes = np.array([len(g) for g in groups], dtype=float)
        # Largest-remainder allocation of the remaining budget in proportion to the cluster sizes.
        quota = remaining * sizes / sizes.sum()
        alloc = np.floor(quota).astype(int)
        for i in np.argsort(-(quota - alloc), kind="stable")[: remaining - alloc.sum()]:
            alloc[i] += 1
        for g, a in zip(groups, np.minimum(alloc, sizes.astype(int))):
            chosen.extend(int(i) for i in rng.choice(g, size=a, replace=False))
    return PointSample(np.array(sorted(chosen), dtype=int), n, flagged=n_flagged, low_margin=len(low))


def sample_notes(sample: PointSample) -> tuple[list[str], list[str]]:
    """Where a figure states its sample: under it (``notes``) for a sample of a full capture, above it
    (``caveats``) for one chosen before a run at scale, which the figure cannot draw beyond."""
    if sample.before_run_seed is None:
        return [sample.note()], []
    return [], [f"Drawn: {sample.drawn:,} of {sample.n:,} points, a uniform random sample (seed"
                f" {sample.before_run_seed}) chosen before the run (the header says why): ties, mismatches and the"
                " smallest margins are drawn only where the sample holds them."]


def kept_sample(cap: Capture, max_points: int | None = DEFAULT_MAX_POINTS) -> PointSample:
    """What a lean capture can draw: the points it sampled (at most ``max_points`` of them, a seeded draw among
    them), or none where it sampled none."""
    kept = cap.sampled.points if cap.sampled is not None else np.zeros(0, dtype=np.int64)
    if max_points is not None and len(kept) > max_points:
        kept = kept[prior_sample(len(kept), max_points, SAMPLE_SEED)]
    return PointSample(kept, cap.encoded.n, before_run_seed=SAMPLE_SEED)


def head_layers(obj, kind: type, b: int, sample: PointSample | None,
                max_points: int | None) -> tuple[Capture, PointSample, list]:
    """What an attention view starts from: the capture, the points drawn (``sample``, or a fresh
    :func:`point_sample`) and the captured layers whose attention is of ``kind``."""
    cap = as_capture(obj)
    sample = sample if sample is not None else point_sample(obj, max_points, b=b)
    return cap, sample, [lc for lc in cap.layers if isinstance(lc.attention, kind)]
