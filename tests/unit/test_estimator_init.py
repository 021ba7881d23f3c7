"""The estimator's init, n_init and n_clusters as scikit-learn's KMeans defines them (issues 30 and 33).

Each case runs KMeans on the same input in the same test: what KMeans accepts gives KMeans's labels and centroids
(``algorithm="lloyd", tol=0``), what KMeans refuses is a ValueError here too.
"""

import numpy as np
import pytest
from sklearn.cluster import KMeans, kmeans_plusplus
from sklearn.datasets import make_blobs

from analysis.estimator import CircuitKMeans


@pytest.fixture(scope="module")
def X():
    return make_blobs(n_samples=40, centers=3, n_features=2, random_state=3)[0]


def kmeans(k, **kw):
    return KMeans(k, algorithm="lloyd", tol=0, max_iter=3, **kw)


def test_an_init_array_with_n_init_auto_is_one_run_as_kmeans(X):
    """``n_init="auto"`` with an array compared the array with "random" ("truth value of an array is ambiguous")."""
    C0 = X[[0, 5, 9]]
    ours = CircuitKMeans(3, init=C0, n_init="auto", max_iter=3).fit(X)
    theirs = kmeans(3, init=C0, n_init="auto").fit(X)
    assert theirs._n_init == 1
    np.testing.assert_array_equal(ours.init_centroids_, C0)
    np.testing.assert_array_equal(ours.labels_, theirs.labels_)
    np.testing.assert_allclose(ours.cluster_centers_, theirs.cluster_centers_, rtol=0, atol=1e-12)


def plusplus(X, n_clusters, random_state):
    """scikit-learn's k-means++ as a user's callable; it records the RandomState it was handed."""
    plusplus.states.append(random_state)
    return kmeans_plusplus(X, n_clusters, random_state=random_state)[0]


@pytest.mark.parametrize("random_state", [0, 7])
def test_a_callable_init_is_called_as_kmeans_calls_it(X, random_state):
    plusplus.states = []
    ours = CircuitKMeans(3, init=plusplus, n_init=1, max_iter=3, random_state=random_state).fit(X)
    assert len(plusplus.states) == 1 and isinstance(plusplus.states[0], np.random.RandomState)
    theirs = kmeans(3, init=plusplus, n_init=1, random_state=random_state).fit(X)
    # The same RandomState seed gives the same centroids to both, and the same Lloyd's iterations from there.
    expected = kmeans_plusplus(X, 3, random_state=np.random.RandomState(random_state))[0]
    np.testing.assert_array_equal(ours.init_centroids_, expected)
    np.testing.assert_array_equal(ours.labels_, theirs.labels_)
    np.testing.assert_allclose(ours.cluster_centers_, theirs.cluster_centers_, rtol=0, atol=1e-12)


def test_a_callable_init_runs_n_init_times_and_auto_is_ten_as_kmeans(X):
    plusplus.states = []
    ours = CircuitKMeans(3, init=plusplus, n_init="auto", max_iter=2).fit(X)
    ours_states, plusplus.states = plusplus.states, []
    assert len(ours_states) == 10 == KMeans(3, init=plusplus, n_init="auto").fit(X)._n_init == len(plusplus.states)
    # One RandomState, advanced by each call, as KMeans hands it.
    assert len({id(s) for s in ours_states}) == 1 == len({id(s) for s in plusplus.states})
    assert np.isfinite(ours.inertia_)


@pytest.mark.parametrize("returned, words", [
    (lambda X, k: X[:k - 1], "shape"), (lambda X, k: X[:k, :1], "shape"),
    (lambda X, k: np.full((k, X.shape[1]), np.nan), "NaN"), (lambda X, k: "centroids", "array"),
])
def test_a_callable_init_returning_no_centroids_is_a_value_error_as_in_kmeans(X, returned, words):
    def init(X, n_clusters, random_state):
        return returned(X, n_clusters)
    with pytest.raises(ValueError):
        kmeans(3, init=init, n_init=1).fit(X)
    with pytest.raises(ValueError, match=words):
        CircuitKMeans(3, init=init, n_init=1, max_iter=2).fit(X)


@pytest.mark.parametrize("n", [1, 2])
def test_more_clusters_than_samples_is_kmeans_value_error(n):
    X = np.array([[0.0, 0.0], [1.0, 1.0]])[:n]
    with pytest.raises(ValueError, match=f"n_samples={n} should be >= n_clusters=3") as theirs:
        KMeans(3, n_init=1).fit(X)
    with pytest.raises(ValueError) as ours:
        CircuitKMeans(3, max_iter=1).fit(X)
    assert str(ours.value) == str(theirs.value)
