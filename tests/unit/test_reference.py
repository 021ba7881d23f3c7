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


# ------------------------------------------------------------------------------------------ the shared functions
# sq_distances, assign and objective are the one nearest-centroid step, squared distance and objective of the
# project (circuits/reference.py); everything else calls them, so their contracts are pinned here.
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


def test_sq_distances_hand_computed():
    X = np.array([[0.0, 0.0], [3.0, 4.0]])
    C = np.array([[0.0, 0.0], [1.0, 1.0], [3.0, 0.0]])
    np.testing.assert_array_equal(reference.sq_distances(X, C), [[0.0, 2.0, 9.0], [25.0, 13.0, 16.0]])


def test_sq_distances_across_chunks(monkeypatch):
    monkeypatch.setattr(reference, "CHUNK", 2)  # five rows: chunks of 2, 2 and 1
    X = np.arange(5.0)[:, None]
    np.testing.assert_array_equal(reference.sq_distances(X, np.array([[1.0]])), [[1.0], [0.0], [1.0], [4.0], [9.0]])


def test_nearest_centroid_exact_ties_go_to_the_lowest_index():
    X = np.array([[0.0], [0.0], [3.0]])
    # Point 0 is at distance 1 from centroids 1 and 2 (tied) and 25 from centroid 0; point 2 is at 4 from 0 and 2.
    C = np.array([[5.0], [1.0], [-1.0]])
    np.testing.assert_array_equal(reference.assign(X, C), [1, 1, 0])
    C_same = np.array([[2.0], [2.0]])  # two coinciding centroids: always the first
    np.testing.assert_array_equal(reference.assign(X, C_same), [0, 0, 0])


def test_objective_hand_computed_with_and_without_labels():
    X = np.array([[0.0], [1.0], [4.0]])
    C = np.array([[0.0], [3.0]])
    assert reference.objective(X, C) == 0.0 + 1.0 + 1.0
    assert reference.objective(X, C, np.array([1, 1, 0])) == 9.0 + 4.0 + 16.0
    assert reference.objective(X, C, np.array([-1, 0, -1])) == 1.0  # -1: left out
    assert reference.objective(X[:0], C) == 0.0


small_ints = st.integers(-4, 4).map(float)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 8).flatmap(lambda n: st.integers(1, 3).flatmap(lambda d: st.tuples(
    st.lists(st.lists(small_ints, min_size=d, max_size=d), min_size=n, max_size=n),
    st.lists(st.lists(small_ints, min_size=d, max_size=d), min_size=1, max_size=5)))))
def test_shared_functions_equal_a_plain_python_oracle(points_and_centroids):
    # Small integer coordinates: every squared distance is exact, and ties are frequent.
    points, cents = points_and_centroids
    X, C = np.array(points), np.array(cents)
    D = [[sum((a - b) ** 2 for a, b in zip(x, c)) for c in cents] for x in points]
    nearest = [row.index(min(row)) for row in D]  # list.index: the first (lowest) of the minima
    np.testing.assert_array_equal(reference.sq_distances(X, C), D)
    np.testing.assert_array_equal(reference.assign(X, C), nearest)
    assert reference.objective(X, C) == sum(min(row) for row in D)
    assert reference.objective(X, C, np.array(nearest)) == sum(min(row) for row in D)


@settings(max_examples=80, deadline=None)
@given(st.integers(1, 60), st.integers(1, 4), st.integers(1, 6), st.integers(0, 2**32 - 1))
def test_cluster_means_equal_each_clusters_masked_mean_bit_for_bit(n, d, k, seed):
    """The update is the masked sum over the count (the mean as scikit-learn computes it) to the last bit; it keeps
    an empty cluster's centroid and ignores label -1."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d)) * 10.0 ** rng.integers(-3, 4, size=(n, 1))
    C = rng.standard_normal((k, d))
    labels = rng.integers(-1, k, size=n)
    expected = C.copy()
    for j in range(k):
        members = labels == j
        if members.any():
            expected[j] = X[members].sum(axis=0) / members.sum()
    got = reference.cluster_means(X, labels, C)
    assert got.tobytes() == expected.tobytes()
    assert reference.update(X, labels, C).tobytes() == expected.tobytes()
