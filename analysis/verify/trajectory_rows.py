"""The trajectory check's reading of every point, done where the reference runs, block by block of points.

The trajectory check holds the circuit's labels at iterate ``t`` to the reference's own labels there, at the
reference's centroids: which columns lie within the tie window of the expected one is a function of the reference
run alone (:func:`~analysis.verify.windows.near_rows`), and the circuit's labels are read only at the points where
they differ. So a prefetched reference run (:mod:`analysis.verify.prefetch`) computes those rows at each iterate,
while its distances are the memo's latest, and the check reads the distances and windows of its mismatches alone,
row by row (:func:`costs_on_demand`), without the ``n x k`` matrices made again: the same numbers bit for bit (each
row of the distances, the window and the near test reads its own point alone).

The prefetched run goes further (:func:`fused_assignment`): each iterate's assignment, tie window and near rows are
made together, a block of points at a time, from the block's distances and windows, so no ``n x k`` matrix is made
at all (at a million points the memo's distance matrices and windows were 0.3 GB beside the forward).

Only for Lloyd's costs (the squared distances, one column per centroid) with the float64 resolution window, which
every hard distance reference but the trimmed one has; any other reference is checked as before.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from analysis.verify.nearest import exact_costs
from analysis.verify.windows import _FUSED_ENTRIES, RowsOnDemand, near_rows, two_nearest
from circuits.blockwise import assign_within_biased, contiguous_sq_distances
from circuits.reference import _CHUNK, Costs, Reference

#: Beyond this many mismatches at an iterate, the check makes the whole matrices after all (a trajectory that went
#: another way differs at many points; a row made on its own costs more than its share of the whole matrix).
MOST_ROWS = 256


def applies(ref: Reference, C: np.ndarray) -> bool:
    """Whether ``ref``'s costs to centroids ``C`` can be made row by row: Lloyd's costs and uncertainty, a window
    that makes rows on their own, C-contiguous float64 centroids (whose distances the rows repeat bit for bit)."""
    return (type(ref).costs is Reference.costs and type(ref).cost_uncertainty is Reference.cost_uncertainty
            and getattr(ref.tie_window, "rows", None) is not None and isinstance(C, np.ndarray)
            and C.dtype == np.float64 and C.flags.c_contiguous)


def reference_near(ref: Reference, X: np.ndarray, C: np.ndarray, t: int,
                   labels: np.ndarray) -> dict[int, np.ndarray] | None:
    """:func:`~analysis.verify.windows.near_rows` of the trajectory check at the reference's iterate ``t`` (centroids
    ``C``, its labels ``labels``), as :meth:`analysis.verify.problem.Problem.check_hard` would compute them; ``None``
    where :func:`applies` does not hold."""
    if not applies(ref, C) or (labels.size and int(labels.min()) < 0):
        return None
    cost = ref.costs(X, C, t)
    E = ref.cost_uncertainty(cost, C)
    if E is None:
        return None
    # cost.labels is arange(k) (Reference.costs): each label is its own column.
    return near_rows(cost.values, E, np.asarray(labels, dtype=np.int64), exact_costs(X, C, cost))


@dataclass
class RowCosts(Costs):
    """:class:`~circuits.reference.Costs` whose values are made a point's row at a time, when read."""

    values: RowsOnDemand  # type: ignore[assignment]


def costs_on_demand(ref: Reference, X: np.ndarray, C: np.ndarray) -> tuple[RowCosts, RowsOnDemand]:
    """``ref.costs(X, C, t)`` and ``ref.cost_uncertainty`` of them, each made a point's row at a time when read."""
    k = C.shape[0]

    def distances(points: np.ndarray) -> np.ndarray:
        # sq_distances' differences for these points (C-contiguous C: laid out as its whole matrix's are), without
        # entering them in the memo.
        diff = X[points, None, :] - C[None, :, :]
        return np.einsum("pcd,pcd->pc", diff, diff)

    cost = RowCosts(RowsOnDemand(distances), np.arange(k), ref.tie_break * np.arange(k, dtype=np.float64))
    return cost, RowsOnDemand(lambda points: ref.tie_window.rows(C, points, distances(points)))


def fused_assignment(ref: Reference, X: np.ndarray, C: np.ndarray, t: int
                     ) -> tuple[np.ndarray, float | None, dict[int, np.ndarray]] | None:
    """``ref._assigned_labels(X, C, t)``, the tie window at ``C`` (:func:`analysis.verify.checks.tie_window_at`;
    ``None`` for one centroid: there the caller's rule applies) and :func:`reference_near` of those labels, made a
    block of points at a time: each block's distances, windows, decisions and near rows are its rows of the whole
    matrices' (every one reads its own point alone), so the same labels, window and rows bit for bit. ``None``
    where :func:`applies` does not hold."""
    if not applies(ref, C) or not X.flags.c_contiguous or X.dtype != np.float64:
        return None
    n, k = len(X), C.shape[0]
    bias = ref.tie_break * np.arange(k, dtype=np.float64)  # Reference.costs' bias (its labels: arange(k))
    rows = max(1, _FUSED_ENTRIES // max(1, k))
    labels = np.empty(n, dtype=np.intp)
    widest: list[np.ndarray] = []
    near: dict[int, np.ndarray] = {}
    for start in range(0, n, rows):
        points = slice(start, min(n, start + rows))
        D = np.empty((points.stop - start, k))
        contiguous_sq_distances(X[points], C, D, _CHUNK)
        E = ref.tie_window.rows(C, points, D)
        # exact_costs reads only X and C for distance columns: its rows are the block's own.
        exact = exact_costs(X[points], C, Costs(D, np.arange(k), bias))
        chosen = assign_within_biased(D, bias, E, exact)
        labels[points] = chosen
        if k >= 2:
            two = two_nearest(D)
            here = np.arange(len(D))
            widest.append((E[here, two[:, 0]] + E[here, two[:, 1]]).max())
        near.update((start + i, row) for i, row in near_rows(D, E, chosen, exact).items())
    window = float(np.max(widest)) if widest else None
    return labels, window, near
