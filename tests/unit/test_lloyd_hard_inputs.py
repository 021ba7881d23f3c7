"""Hard but valid inputs still match Lloyd's: degenerate columns, duplicates, extreme units, size."""

import numpy as np
import pytest
from sklearn.cluster import KMeans
from sklearn.datasets import make_blobs

from circuits import reference
from circuits.initialisation import initial_centroids

from conftest import run_circuit


def assert_matches_reference(X, C0, T):
    result = run_circuit(X, C0, T)
    rep = result.report
    assert rep.verified, rep.summary()
    ref = reference.lloyd(X, C0, T, tie_break=result.circuit.sharpness.tie_break * rep.scale**2)
    np.testing.assert_allclose(result.centroids, ref.final_centroids, rtol=0, atol=rep.tolerances.centroid)
    if rep.diverged_after_tie is None:
        differ = np.flatnonzero(result.labels != ref.labels)
        assert set(differ.tolist()) <= {m.point for m in rep.tie_mismatches}
    return result


def test_constant_columns():
    X, _ = make_blobs(200, n_features=3, centers=3, random_state=0)
    X = np.hstack([X, np.full((200, 2), 7.0)])
    assert_matches_reference(X, initial_centroids(X, 3, "random", 1), 6)


def test_all_points_equal_with_one_cluster():
    X = np.full((10, 3), -2.5)
    result = assert_matches_reference(X, X[:1], 3)
    np.testing.assert_allclose(result.centroids, X[:1])


def test_duplicate_points_and_k_equal_to_distinct_points():
    base = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [5.0, 5.0]])
    X = np.repeat(base, [3, 1, 4, 2], axis=0)
    C0 = initial_centroids(X, 4, "random", 0)
    result = assert_matches_reference(X, C0, 4)
    # With k = number of distinct points every distinct point is its own cluster.
    np.testing.assert_allclose(np.sort(result.centroids, axis=0), np.sort(base, axis=0), atol=1e-14)


@pytest.mark.parametrize("offset", [1e8, -1e8])
def test_large_offset(offset):
    X, _ = make_blobs(300, n_features=2, centers=3, random_state=2)
    X = X + offset
    C0 = initial_centroids(X, 3, "random", 0)
    result = assert_matches_reference(X, C0, 8)
    km = KMeans(3, init=C0, n_init=1, algorithm="lloyd", tol=0, max_iter=8).fit(X)
    # At |x| = 1e8 a float64 holds 1.5e-8; both answers are exact to a few of those units.
    np.testing.assert_allclose(result.centroids, km.cluster_centers_, rtol=0, atol=64 * np.spacing(1e8))
    np.testing.assert_array_equal(result.labels, km.labels_)


def test_tiny_scale():
    X, _ = make_blobs(300, n_features=4, centers=3, random_state=4)
    X = X * 1e-8
    C0 = initial_centroids(X, 3, "random", 0)
    result = assert_matches_reference(X, C0, 8)
    km = KMeans(3, init=C0, n_init=1, algorithm="lloyd", tol=0, max_iter=8).fit(X)
    np.testing.assert_allclose(result.centroids, km.cluster_centers_, rtol=0, atol=1e-12 * result.report.scale)


def test_sixty_four_dimensions():
    X, _ = make_blobs(400, n_features=64, centers=8, random_state=5)
    assert_matches_reference(X, initial_centroids(X, 8, "k-means++", 0), 5)


def test_five_thousand_points():
    X, _ = make_blobs(5000, n_features=8, centers=10, cluster_std=3.0, random_state=6)
    C0 = initial_centroids(X, 10, "random", 0)
    result = assert_matches_reference(X, C0, 2)
    km = KMeans(10, init=C0, n_init=1, algorithm="lloyd", tol=0, max_iter=2).fit(X)
    np.testing.assert_array_equal(result.labels, km.labels_)
