"""Initial centroids: random data points, k-means++, or given by the user.

``random`` draws ``k`` *distinct* rows (by value) with a seeded generator, so no two initial centroids coincide
even when the data has duplicate points; ``k-means++`` is scikit-learn's :func:`~sklearn.cluster.kmeans_plusplus`
with the same seed. Both need ``k`` to be at most the number of distinct points.
"""

from __future__ import annotations

import numpy as np
from jaxtyping import Float

INIT_METHODS = ("random", "k-means++")


def distinct_rows(X: Float[np.ndarray, "n d"]) -> Float[np.ndarray, "m d"]:
    """The distinct rows of ``X`` in order of first appearance."""
    _, first = np.unique(X, axis=0, return_index=True)
    return X[np.sort(first)]


def initial_centroids(X: Float[np.ndarray, "n d"], k: int, method: str | np.ndarray = "random",
                      seed: int = 0) -> Float[np.ndarray, "k d"]:
    """``k`` initial centroids for points ``X`` by ``method`` (a name from :data:`INIT_METHODS` or a (k, d) array)."""
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2 or X.shape[0] == 0:
        raise ValueError(f"X must be a non-empty (n, d) array, got shape {X.shape}")
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if not isinstance(method, str):
        C0 = np.asarray(method, dtype=np.float64)
        if C0.shape != (k, X.shape[1]):
            raise ValueError(f"initial centroids must have shape ({k}, {X.shape[1]}), got {C0.shape}")
        if not np.isfinite(C0).all():
            raise ValueError("initial centroids contain NaN or inf")
        return C0.copy()
    distinct = distinct_rows(X)
    if k > len(distinct):
        raise ValueError(f"k={k} exceeds the number of distinct points ({len(distinct)})")
    if method == "random":
        rng = np.random.default_rng(seed)
        return distinct[np.sort(rng.choice(len(distinct), size=k, replace=False))].copy()
    if method == "k-means++":
        from sklearn.cluster import kmeans_plusplus

        centers, _ = kmeans_plusplus(X, n_clusters=k, random_state=seed)
        return np.asarray(centers, dtype=np.float64)
    raise ValueError(f"unknown init method {method!r}; expected one of {INIT_METHODS} or a ({k}, d) array")
