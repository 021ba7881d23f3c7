"""scikit-learn's Lloyd as an independent oracle on the bundled datasets.

``KMeans(init=C0, n_init=1, algorithm="lloyd", tol=0, max_iter=T)`` from the same initial centroids. scikit-learn
relocates empty clusters where our rule keeps them, so each case first checks that no cluster empties; its
``labels_`` are the assignment to the *final* centroids, which is what the circuit's trailing assign block computes.
"""

import numpy as np
import pytest
from sklearn import datasets
from sklearn.cluster import KMeans

from circuits import reference
from circuits.initialisation import initial_centroids

from conftest import run_circuit

CASES = [
    ("iris", 3, "random", 10),
    ("iris", 3, "k-means++", 10),
    ("wine", 3, "random", 10),
    ("breast_cancer", 2, "random", 10),
    ("digits", 10, "random", 10),
    ("digits", 10, "k-means++", 5),
]


@pytest.mark.parametrize("name,k,init,T", CASES)
def test_bundled_dataset_matches_sklearn(name, k, init, T):
    X = getattr(datasets, f"load_{name}")().data.astype(np.float64)
    C0 = initial_centroids(X, k, init, seed=0)
    ref = reference.lloyd(X, C0, T)
    assert all(np.bincount(a, minlength=k).min() > 0 for a in ref.assignments), "choose a case without empty clusters"
    km = KMeans(k, init=C0, n_init=1, algorithm="lloyd", tol=0, max_iter=T).fit(X)
    result = run_circuit(X, C0, T)
    # Iris's decimal ties are ties at the data's precision (its binary values differ by less than half an ulp of
    # each input can change): the circuit sends them to the lower index, as Lloyd's rule does, and scikit-learn's
    # rounding happens to send them there too.
    assert result.report.verified, result.report.summary()
    assert result.report.hard_attention
    scale = result.report.scale
    err = np.abs(result.centroids - km.cluster_centers_).max()
    # The issue asks for 1e-9 of the data's scale; the circuit does far better, so hold it to that.
    assert err <= 1e-12 * scale, err
    np.testing.assert_array_equal(result.labels, km.labels_)
    assert result.report.n_iter == km.n_iter_
    assert result.inertia == pytest.approx(km.inertia_, rel=1e-12)


def test_blobs_many_iterations_match_sklearn():
    X, _ = datasets.make_blobs(n_samples=1000, n_features=5, centers=6, random_state=3)
    C0 = initial_centroids(X, 6, "random", seed=3)
    km = KMeans(6, init=C0, n_init=1, algorithm="lloyd", tol=0, max_iter=20).fit(X)
    result = run_circuit(X, C0, 20)
    assert result.report.verified
    np.testing.assert_allclose(result.centroids, km.cluster_centers_, rtol=0, atol=1e-12 * result.report.scale)
    np.testing.assert_array_equal(result.labels, km.labels_)
