"""Initial centroids: random data points, k-means++, or given by the user; one problem or a batch of them.

For one problem (:func:`initial_centroids`, what the commands and :class:`~analysis.estimator.CircuitKMeans`
use): ``random`` draws ``k`` *distinct* rows (by value) with a seeded generator, so no two initial centroids
coincide even when the data has duplicate points; ``k-means++`` is scikit-learn's
:func:`~sklearn.cluster.kmeans_plusplus` with the same seed. Both need ``k`` to be at most the number of distinct
points.

For a batch of generated problems (:func:`random_points_init`, :func:`kmeans_plusplus_init`, what the training
tasks use; continuous data has no duplicate points): the same two choices drawn from the caller's generator.

The two ``random`` draws are the same choice (``k`` distinct points uniformly at random, in index order) drawn
differently from the generator: ``Generator.choice`` for one problem, the first ``k`` of an argsort of uniforms
per problem of a batch. Both are kept because the committed checkpoints' tasks and every seeded result depend on
their streams.
"""

from __future__ import annotations

import numpy as np
from jaxtyping import Float

INIT_METHODS = ("random", "k-means++")


def distinct_rows(X: Float[np.ndarray, "n d"]) -> Float[np.ndarray, "m d"]:
    """The distinct rows of ``X`` in order of first appearance."""
    _, first = np.unique(X, axis=0, return_index=True)
    return X[np.sort(first)]


def fewer_distinct_rows(X: Float[np.ndarray, "n d"], k: int) -> Float[np.ndarray, "m d"] | None:
    """The distinct rows of ``X`` (:func:`distinct_rows`) if there are fewer than ``k`` of them, else ``None``.

    There are at least as many distinct rows as distinct values in one column, so the (costlier) row-wise unique
    runs only when the first column does not already show ``k`` distinct values."""
    if X.shape[1] and k <= len(np.unique(X[:, 0])):
        return None
    distinct = distinct_rows(X)
    return distinct if len(distinct) < k else None


def _kmeans_plusplus(X: Float[np.ndarray, "n d"], k: int, seed: int) -> Float[np.ndarray, "k d"]:
    from sklearn import config_context
    from sklearn.cluster import kmeans_plusplus

    # The arguments are ours and of the declared types (a float64 array, ints): scikit-learn's parameter validation
    # would only cost time (a fit of GridSearchCV calls this once). X is still checked as an array (finite, 2-d).
    with config_context(skip_parameter_validation=True):
        return kmeans_plusplus(X, n_clusters=int(k), random_state=int(seed))[0]


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
    fewer = fewer_distinct_rows(X, k)
    if fewer is not None:
        raise ValueError(f"k={k} exceeds the number of distinct points ({len(fewer)})")
    if method == "random":
        rng = np.random.default_rng(seed)
        distinct = distinct_rows(X)
        return distinct[np.sort(rng.choice(len(distinct), size=k, replace=False))].copy()
    if method == "k-means++":
        return np.asarray(_kmeans_plusplus(X, k, seed), dtype=np.float64)
    raise ValueError(f"unknown init method {method!r}; expected one of {INIT_METHODS} or a ({k}, d) array")


def random_points_init(rng: np.random.Generator, X: Float[np.ndarray, "batch n d"], k: int) -> Float[np.ndarray, "batch k d"]:
    """``k`` distinct data points per problem, in index order. Draws uniforms ``(batch, n)`` and keeps the
    indices of the ``k`` smallest per problem (indices without replacement; continuous data has no duplicates)."""
    batch, n, _ = X.shape
    idx = np.argsort(rng.random((batch, n)), axis=1)[:, :k]
    idx.sort(axis=1)
    return np.take_along_axis(X, idx[..., None], axis=1).copy()


def kmeans_plusplus_init(rng: np.random.Generator, X: Float[np.ndarray, "batch n d"], k: int) -> Float[np.ndarray, "batch k d"]:
    """scikit-learn's k-means++ per problem, each seeded by one draw of ``rng.integers(0, 2**31 - 1)``."""
    seeds = rng.integers(0, 2**31 - 1, size=X.shape[0])
    return np.stack([_kmeans_plusplus(x, k, int(s)) for x, s in zip(X, seeds)])


def batch_init(rng: np.random.Generator, X: Float[np.ndarray, "batch n d"], k: int, method: str
               ) -> Float[np.ndarray, "batch k d"]:
    """:func:`random_points_init` or :func:`kmeans_plusplus_init` by name (one of :data:`INIT_METHODS`)."""
    if method not in INIT_METHODS:
        raise ValueError(f"unknown init {method!r}; choose one of {', '.join(INIT_METHODS)}")
    return random_points_init(rng, X, k) if method == "random" else kmeans_plusplus_init(rng, X, k)
