"""A plain numpy Lloyd's algorithm: the reference every circuit is checked against.

Rules, stated because every comparison depends on them:

* Distances are ``|x - c|^2`` computed directly from the difference (not via ``|x|^2 - 2 x.c + |c|^2``).
* Ties: a point goes to the centroid minimising ``|x - c_j|^2 + tie_break * j``. With ``tie_break = 0`` (the
  default) this is ``np.argmin``: exact ties to the lower index. A *tie window* (a per-entry uncertainty
  ``E_ij`` of the squared distances, see :func:`assign_within`) widens "exact" to "equal within what the
  computation resolves": every centroid whose distance exceeds the smallest by at most ``E_ij + E_imin`` is a
  candidate, and the lowest index among them wins. The circuit's verifier passes the circuit's own resolution
  (:mod:`analysis.verify`); with no window this is plain Lloyd's.
* Empty clusters: a centroid with no points keeps its previous position. (scikit-learn instead relocates it, so
  oracle tests against scikit-learn use problems without empty clusters.)
* Every iterate is recorded: ``centroids[t]`` after ``t`` iterations (``centroids[0]`` is the initialisation) and
  ``assignments[t]``, the assignment of every point to ``centroids[t]``. Iteration ``t`` maps
  ``(centroids[t-1], assignments[t-1])`` to ``centroids[t]``; ``assignments[T]`` is the final labelling.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
from jaxtyping import Float, Int

#: Rows of points processed at once, to bound memory at n * k * d.
_CHUNK = 8192


def sq_distances(X: Float[np.ndarray, "n d"], C: Float[np.ndarray, "k d"]) -> Float[np.ndarray, "n k"]:
    X, C = np.asarray(X, dtype=np.float64), np.asarray(C, dtype=np.float64)
    out = np.empty((X.shape[0], C.shape[0]))
    for start in range(0, X.shape[0], _CHUNK):
        diff = X[start : start + _CHUNK, None, :] - C[None, :, :]
        out[start : start + _CHUNK] = np.einsum("nkd,nkd->nk", diff, diff)
    return out


def data_scale(X: Float[np.ndarray, "n d"], C0: Float[np.ndarray, "k d"] | None = None) -> float:
    """Largest distance of a point (or initial centroid) from the mean of the points; 1 if all coincide."""
    X = np.asarray(X, dtype=np.float64)
    mu = X.mean(axis=0)
    r = np.sqrt(((X - mu) ** 2).sum(axis=1)).max()
    if C0 is not None:
        r = max(r, np.sqrt(((np.asarray(C0, dtype=np.float64) - mu) ** 2).sum(axis=1)).max())
    return float(r) if r > 0 else 1.0


def tie_broken(D: Float[np.ndarray, "n k"], tie_break: float) -> Float[np.ndarray, "n k"]:
    return D + tie_break * np.arange(D.shape[1]) if tie_break else D


def assign(X: Float[np.ndarray, "n d"], C: Float[np.ndarray, "k d"], tie_break: float = 0.0) -> Int[np.ndarray, " n"]:
    """Nearest centroid of each point; ties (within ``tie_break``, absolute) go to the lower index."""
    return np.argmin(tie_broken(sq_distances(X, C), tie_break), axis=1)


def assign_within(D: Float[np.ndarray, "n k"], E: Float[np.ndarray, "n k"]) -> Int[np.ndarray, " n"]:
    """Lowest index among the centroids whose distance is within ``E_ij + E_imin`` of the smallest (module doc)."""
    rows = np.arange(D.shape[0])
    best = np.argmin(D, axis=1)
    candidate = D - D[rows, best][:, None] <= E + E[rows, best][:, None]
    return np.argmax(candidate, axis=1)  # the first True: the lowest tied index


def update(X: Float[np.ndarray, "n d"], labels: Int[np.ndarray, " n"], C: Float[np.ndarray, "k d"]) -> Float[np.ndarray, "k d"]:
    """Mean of each cluster's points; an empty cluster keeps its centroid. Label -1 (unassigned) counts nowhere."""
    k = C.shape[0]
    labels = np.asarray(labels)
    assigned = labels >= 0
    counts = np.bincount(labels[assigned], minlength=k)
    sums = np.zeros_like(C, dtype=np.float64)
    np.add.at(sums, labels[assigned], np.asarray(X, dtype=np.float64)[assigned])
    new = C.astype(np.float64).copy()
    filled = counts > 0
    new[filled] = sums[filled] / counts[filled, None]
    return new


def objective(X: Float[np.ndarray, "n d"], C: Float[np.ndarray, "k d"], labels: Int[np.ndarray, " n"] | None = None) -> float:
    """k-means objective: sum of squared distances to the assigned (default: nearest) centroid."""
    D = sq_distances(X, C)
    if labels is None:
        return float(D.min(axis=1).sum())
    return float(D[np.arange(len(X)), labels].sum())


def gaps(D: Float[np.ndarray, "n k"]) -> Float[np.ndarray, " n"]:
    """Second-smallest minus smallest squared distance per point (inf when k == 1)."""
    if D.shape[1] < 2:
        return np.full(D.shape[0], np.inf)
    part = np.partition(D, 1, axis=1)
    return part[:, 1] - part[:, 0]


@dataclass
class LloydTrace:
    """Every iterate of a Lloyd run (see the module docstring for the indexing)."""

    centroids: Float[np.ndarray, "T_plus_1 k d"]
    assignments: Int[np.ndarray, "T_plus_1 n"]
    objectives: Float[np.ndarray, " T_plus_1"]
    gaps: Float[np.ndarray, "T_plus_1 n"]
    tie_break: float = 0.0

    @property
    def iterations(self) -> int:
        return len(self.centroids) - 1

    @property
    def labels(self) -> Int[np.ndarray, " n"]:
        return self.assignments[-1]

    @property
    def final_centroids(self) -> Float[np.ndarray, "k d"]:
        return self.centroids[-1]

    @property
    def n_iter(self) -> int:
        return iterations_run(self.assignments, self.centroids)


def iterations_run(assignments, centroids) -> int:
    """Iterations until nothing changes any more, counted like scikit-learn's ``n_iter_``.

    ``assignments[t]`` is the labelling w.r.t. ``centroids[t]``. scikit-learn stops after iteration ``t`` when the
    assignment it just made equals the previous one, or when the centroids did not move; with ``tol=0`` later
    iterations would repeat the same state.
    """
    T = len(centroids) - 1
    for t in range(1, T + 1):
        same_labels = t >= 2 and np.array_equal(assignments[t - 1], assignments[t - 2])
        if same_labels or np.array_equal(centroids[t], centroids[t - 1]):
            return t
    return T


def converged(assignments, centroids) -> bool:
    """Whether two consecutive iterates are equal (the run reached a fixed point within its iterations)."""
    T = len(centroids) - 1
    return any((t >= 2 and np.array_equal(assignments[t - 1], assignments[t - 2]))
               or np.array_equal(centroids[t], centroids[t - 1]) for t in range(1, T + 1))


def lloyd(X: Float[np.ndarray, "n d"], C0: Float[np.ndarray, "k d"], iterations: int,
          tie_break: float = 0.0, tie_window: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = None
          ) -> LloydTrace:
    """Run ``iterations`` Lloyd steps from ``C0`` and record every iterate.

    ``tie_break`` is absolute (squared user units). ``tie_window(C, D)``, if given, returns the per-entry
    uncertainty ``E`` of the distances ``D`` to centroids ``C``; ties within it go to the lower index.
    """
    X, C = np.asarray(X, dtype=np.float64), np.asarray(C0, dtype=np.float64).copy()
    cents, labs, objs, gps = [C.copy()], [], [], []
    for t in range(iterations + 1):
        D = sq_distances(X, C)
        if tie_window is not None:
            labels = assign_within(tie_broken(D, tie_break), tie_window(C, D))
        else:
            labels = np.argmin(tie_broken(D, tie_break), axis=1)
        labs.append(labels)
        objs.append(float(D[np.arange(len(X)), labels].sum()))
        gps.append(gaps(D))
        if t < iterations:
            C = update(X, labels, C)
            cents.append(C.copy())
    return LloydTrace(np.stack(cents), np.stack(labs), np.array(objs), np.stack(gps), tie_break)
