"""What a patched run is judged by: label flips, centroid displacement, objective change, fraction restored.

Every run (clean, corrupted, patched) is read at one *read layer*: the residual stream after that block is
decoded (:func:`circuits.encoding.decode`) into an :class:`Outcome` — the labels held in ``Y`` at the point slots
real in both runs, the centroids held in ``C`` (user units) and the k-means objective of those centroids on the
clean points. A patched outcome is compared with the corrupted one (what did the patch change?) and with the
clean one (how much of the clean behaviour came back?).

Fraction of clean behaviour restored, precisely. With ``m`` compared points, let

* ``L(s)`` = number of compared points whose label in run ``s`` differs from the clean label;
* ``E(s)`` = ``|C_s - C_clean|_F / scale``, the Frobenius distance of the centroids from the clean ones in
  unit-scaled coordinates (``scale`` of the shared :class:`~circuits.encoding.UnitScaling`), with distances up
  to ``E_TOL * sqrt(k)`` counted as 0 (float64 rounding of a mean, far below any real displacement).

Then ``restored_labels = 1 - L(patched) / L(corrupted)`` and ``restored_centroids = 1 - E(patched) /
E(corrupted)``; ``restored`` is the mean of the two. Each is 1 when the patch brings the clean readout back
exactly, 0 when it changes nothing (or changes it as far from clean as before), negative when it pushes the run
further from clean; it is never above 1. When the corruption does not change a readout at all
(``L(corrupted) = 0`` or ``E(corrupted) = 0``: e.g. a corrupted run that converges to the clean answer) there is
nothing to restore and the fraction is 0/0: it is reported as NaN (``restored`` then uses the defined one, and is
NaN when neither is), never as 0 or 1.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from jaxtyping import Bool, Float, Int

from circuits import reference
from circuits.encoding import DecodedState

#: Unit-scaled centroid distances below ``E_TOL * sqrt(k)`` are rounding, not displacement.
E_TOL = 1e-12


@dataclass
class Outcome:
    """What a batch of runs holds at the read layer (batch-first)."""

    labels: Int[np.ndarray, "batch m"]
    centroids: Float[np.ndarray, "batch k d"]
    unit_centroids: Float[np.ndarray, "batch k d"]
    objective: Float[np.ndarray, " batch"]

    @property
    def batch(self) -> int:
        return self.labels.shape[0]


def outcome_of(state: DecodedState, compared: Int[np.ndarray, " m"],
               X_clean: Float[np.ndarray, "m d"]) -> Outcome:
    """Labels at the compared point slots, centroids, and their k-means objective on the clean points."""
    objective = np.array([reference.objective(X_clean, C) for C in state.centroids])
    return Outcome(state.labels[:, compared], state.centroids, state.unit_centroids, objective)


@dataclass
class PatchMetrics:
    """Per patched run (batch axis first), against the corrupted and the clean outcome at the same read layer."""

    labels: Int[np.ndarray, "batch m"]
    flipped: Bool[np.ndarray, "batch m"]
    label_flips: Int[np.ndarray, " batch"]
    label_mismatch: Int[np.ndarray, " batch"]
    centroid_displacement: Float[np.ndarray, "batch k"]
    centroid_error: Float[np.ndarray, " batch"]
    objective: Float[np.ndarray, " batch"]
    objective_change: Float[np.ndarray, " batch"]
    restored_labels: Float[np.ndarray, " batch"]
    restored_centroids: Float[np.ndarray, " batch"]
    restored: Float[np.ndarray, " batch"]

    #: Scalar fields, one value per run: the ones a sweep turns into heatmaps.
    SCALARS = ("restored", "restored_labels", "restored_centroids", "label_flips", "label_mismatch",
               "max_centroid_displacement", "centroid_error", "objective_change")

    @property
    def max_centroid_displacement(self) -> Float[np.ndarray, " batch"]:
        return self.centroid_displacement.max(axis=-1)

    def scalar(self, name: str) -> np.ndarray:
        if name not in self.SCALARS:
            raise KeyError(f"unknown metric {name!r}; expected one of {self.SCALARS}")
        return np.asarray(getattr(self, name), dtype=np.float64)

    def row(self, b: int) -> dict:
        """Run ``b`` as a JSON-ready dict."""
        out = {name: _num(self.scalar(name)[b]) for name in self.SCALARS}
        out["flipped_points"] = [int(i) for i in np.flatnonzero(self.flipped[b])]
        out["centroid_displacement"] = self.centroid_displacement[b].tolist()
        return out


def _num(v: float):
    v = float(v)
    return v if np.isfinite(v) else None


def mismatch_up_to_renaming(labels_a: Int[np.ndarray, " m"] | list[int], labels_b: Int[np.ndarray, " m"] | list[int],
                            k: int) -> int:
    """Points whose labels differ once the cluster ids of ``b`` are renamed to match ``a`` as well as possible.

    The label metrics above compare ids as they are, on purpose: a centroid token keeps its identity through the
    circuit, so a corruption that swaps which token holds which cluster does flip every label. This count says how
    much of that is only a renaming (the best one-to-one matching of ids, by the contingency table)."""
    from scipy.optimize import linear_sum_assignment
    from sklearn.metrics.cluster import contingency_matrix

    a, b = np.asarray(labels_a), np.asarray(labels_b)
    assigned = (a >= 0) & (b >= 0)  # a trimmed run's outliers (-1) are compared as ids, not renamed
    table = contingency_matrix(np.r_[a[assigned], np.arange(k)], np.r_[b[assigned], np.arange(k)]) - np.eye(k, dtype=int)
    rows, cols = linear_sum_assignment(table, maximize=True)
    return int(assigned.sum() - table[rows, cols].sum() + (a[~assigned] != b[~assigned]).sum())


def centroid_distance(unit_a: Float[np.ndarray, "#batch k d"], unit_b: Float[np.ndarray, "#batch k d"]) -> np.ndarray:
    """``E``: unit-scaled Frobenius distance, rounding-level distances set to exactly 0."""
    e = np.sqrt(((unit_a - unit_b) ** 2).sum(axis=(-1, -2)))
    k = unit_a.shape[-2]
    return np.where(e <= E_TOL * np.sqrt(k), 0.0, e)


def fraction_restored(distance_patched: np.ndarray, distance_corrupted: float) -> np.ndarray:
    """``1 - d(patched) / d(corrupted)``; NaN when the corrupted run is already clean (0/0: nothing to restore)."""
    distance_patched = np.asarray(distance_patched, dtype=np.float64)
    if distance_corrupted == 0:
        return np.full(distance_patched.shape, np.nan)
    return 1.0 - distance_patched / distance_corrupted


def compare(patched: Outcome, clean: Outcome, corrupted: Outcome) -> PatchMetrics:
    """Metrics of every run of ``patched`` against the single runs ``clean`` and ``corrupted``."""
    flipped = patched.labels != corrupted.labels
    mismatch = (patched.labels != clean.labels).sum(axis=-1)
    corrupted_mismatch = int((corrupted.labels != clean.labels).sum())
    e_patched = centroid_distance(patched.unit_centroids, clean.unit_centroids)
    e_corrupted = float(centroid_distance(corrupted.unit_centroids, clean.unit_centroids)[0])
    r_labels = fraction_restored(mismatch, corrupted_mismatch)
    r_centroids = fraction_restored(e_patched, e_corrupted)
    both = np.stack([r_labels, r_centroids])
    defined = ~np.isnan(both)
    restored = np.where(defined.any(axis=0), np.where(defined, both, 0.0).sum(axis=0) / np.maximum(defined.sum(axis=0), 1),
                        np.nan)
    return PatchMetrics(
        labels=patched.labels,
        flipped=flipped,
        label_flips=flipped.sum(axis=-1),
        label_mismatch=mismatch,
        centroid_displacement=np.linalg.norm(patched.centroids - corrupted.centroids, axis=-1),
        centroid_error=np.sqrt(((patched.centroids - clean.centroids) ** 2).sum(axis=(-1, -2))),
        objective=patched.objective,
        objective_change=patched.objective - corrupted.objective,
        restored_labels=r_labels,
        restored_centroids=r_centroids,
        restored=restored,
    )
