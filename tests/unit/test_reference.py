"""The numpy reference itself: its stated rules, and agreement with scikit-learn where the rules coincide."""

import numpy as np
import pytest
from sklearn.cluster import KMeans
from sklearn.datasets import make_blobs

from circuits import reference


def test_tie_rule_lowest_index_and_tie_break():
    X = np.array([[1.0]])
    C = np.array([[0.0], [2.0]])
    assert reference.assign(X, C)[0] == 0
    # A real gap larger than the tie-break is not overridden...
    C2 = np.array([[0.0], [1.9]])
    assert reference.assign(X, C2, tie_break=1e-3)[0] == 1
    # ...but one smaller than it is.
    C3 = np.array([[0.0], [2.0 - 1e-9]])
    assert reference.assign(X, C3)[0] == 1
    assert reference.assign(X, C3, tie_break=1e-6)[0] == 0


def test_empty_cluster_keeps_old_centroid():
    X = np.array([[0.0], [1.0]])
    C = np.array([[0.0], [50.0]])
    new = reference.update(X, np.array([0, 0]), C)
    np.testing.assert_array_equal(new, [[0.5], [50.0]])


def test_trace_indexing():
    X = np.array([[0.0], [2.0], [3.0], [9.0], [11.0]])
    tr = reference.lloyd(X, np.array([[0.0], [2.0]]), 3)
    assert tr.centroids.shape == (4, 2, 1) and tr.assignments.shape == (4, 5)
    np.testing.assert_allclose(tr.centroids[1], [[0.0], [6.25]])
    np.testing.assert_array_equal(tr.assignments[0], [0, 1, 1, 1, 1])
    assert tr.objectives[-1] == pytest.approx(60 / 9)
    assert tr.n_iter == 3


@pytest.mark.parametrize("seed", range(5))
def test_reference_matches_sklearn_lloyd(seed):
    X, _ = make_blobs(n_samples=300, n_features=3, centers=4, random_state=seed)
    rng = np.random.default_rng(seed)
    C0 = X[rng.choice(len(X), 4, replace=False)]
    for T in (1, 3, 8):
        tr = reference.lloyd(X, C0, T)
        assert np.all(np.bincount(tr.assignments[-2], minlength=4) > 0), "oracle needs no empty clusters"
        km = KMeans(4, init=C0, n_init=1, algorithm="lloyd", tol=0, max_iter=T).fit(X)
        np.testing.assert_allclose(tr.final_centroids, km.cluster_centers_, rtol=0, atol=1e-12)
        np.testing.assert_array_equal(tr.labels, km.labels_)
        assert tr.n_iter == km.n_iter_


def test_objective_ratio_counts_two_zero_objectives_as_equal():
    from circuits.reference import objective_ratio

    assert objective_ratio(0.0, 0.0) == 1.0  # all points on their centroids in both runs: as good, not 0/0
    assert objective_ratio(3.0, 4.0) == 0.75
    assert objective_ratio(0.0, 2.0) == 0.0
    assert objective_ratio(1.0, 0.0) > 1e299  # worse than a perfect baseline: huge, never a division error
