"""The scikit-learn-style estimator: a drop-in for KMeans backed by the circuit."""

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.cluster import KMeans
from sklearn.datasets import make_blobs

from analysis.estimator import CircuitKMeans, CircuitMismatchWarning
from circuits.sharpness import Sharpness


@pytest.fixture(scope="module")
def data():
    X, _ = make_blobs(300, n_features=3, centers=4, random_state=7)
    return X[:250], X[250:]


def test_fit_matches_sklearn_from_the_same_init(data):
    X, X_new = data
    est = CircuitKMeans(4, max_iter=10, init="k-means++", random_state=3).fit(X)
    km = KMeans(4, init=est.init_centroids_, n_init=1, algorithm="lloyd", tol=0, max_iter=10).fit(X)
    np.testing.assert_allclose(est.cluster_centers_, km.cluster_centers_, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(est.labels_, km.labels_)
    assert est.inertia_ == pytest.approx(km.inertia_, rel=1e-12)
    assert est.n_iter_ == km.n_iter_
    np.testing.assert_array_equal(est.predict(X_new), km.predict(X_new))
    np.testing.assert_allclose(est.transform(X_new), km.transform(X_new), rtol=1e-12)
    assert est.score(X_new) == pytest.approx(km.score(X_new), rel=1e-12)
    assert est.report_.verified and est.model_ is est.circuit_.model


def test_sklearn_conventions(data):
    X, _ = data
    est = CircuitKMeans(3, max_iter=4, random_state=1)
    assert clone(est).get_params() == est.get_params()
    labels = est.fit_predict(X)
    np.testing.assert_array_equal(labels, est.labels_)
    again = CircuitKMeans(3, max_iter=4, random_state=1).fit(X)
    np.testing.assert_array_equal(again.cluster_centers_, est.cluster_centers_)
    assert est.n_features_in_ == 3
    with pytest.raises(ValueError):
        est.predict(X[:, :2])


def test_explicit_init_array_and_errors(data):
    X, _ = data
    C0 = X[:2]
    est = CircuitKMeans(2, init=C0, max_iter=2).fit(X)
    np.testing.assert_array_equal(est.init_centroids_, C0)
    with pytest.raises(ValueError):
        CircuitKMeans(3, init=C0).fit(X)
    with pytest.raises(ValueError):
        CircuitKMeans(0).fit(X)


def test_unverified_fit_warns(data):
    X, _ = data
    with pytest.warns(CircuitMismatchWarning):
        est = CircuitKMeans(4, max_iter=3, sharpness=Sharpness(beta=5.0)).fit(X)
    assert not est.report_.verified


def test_n_init_keeps_the_lowest_inertia_of_the_seeds_it_ran(data):
    X, _ = data
    singles = [CircuitKMeans(4, max_iter=3, random_state=seed).fit(X) for seed in (5, 6, 7)]
    best = min(singles, key=lambda est: est.inertia_)
    assert len({round(est.inertia_, 6) for est in singles}) > 1, "the seeds must disagree for the test to bite"
    est = CircuitKMeans(4, max_iter=3, n_init=3, random_state=5).fit(X)
    assert est.inertia_ == best.inertia_
    np.testing.assert_array_equal(est.init_centroids_, best.init_centroids_)
    np.testing.assert_array_equal(est.cluster_centers_, best.cluster_centers_)
    with pytest.warns(RuntimeWarning, match="n_init"):
        CircuitKMeans(2, init=X[:2], n_init=4, max_iter=1).fit(X)


def test_sklearn_dtypes_weights_and_random_states(data):
    X, _ = data
    est = CircuitKMeans(3, max_iter=2, random_state=np.random.RandomState(0)).fit(X)
    km = KMeans(3, init=est.init_centroids_, n_init=1, max_iter=2).fit(X)
    assert est.labels_.dtype == km.labels_.dtype and est.predict(X).dtype == km.predict(X).dtype
    uniform = CircuitKMeans(3, max_iter=2, random_state=1).fit_predict(X, sample_weight=np.full(len(X), 2.0))
    np.testing.assert_array_equal(uniform, CircuitKMeans(3, max_iter=2, random_state=1).fit_predict(X))
    weights = np.ones(len(X))
    weights[0] = 5.0
    for call in (lambda e: e.fit(X, sample_weight=weights), lambda e: e.fit_predict(X, sample_weight=weights)):
        with pytest.raises(ValueError, match="sample_weight"):
            call(CircuitKMeans(3, max_iter=2))


def test_paths_agree_and_large_data_takes_the_structured_path():
    X, _ = make_blobs(3000, n_features=2, centers=3, random_state=0)
    dense = CircuitKMeans(3, max_iter=3, path="dense").fit(X)
    auto = CircuitKMeans(3, max_iter=3).fit(X)
    assert auto.capture_.path == "structured" and dense.capture_.path == "dense"
    np.testing.assert_array_equal(auto.labels_, dense.labels_)
    np.testing.assert_allclose(auto.cluster_centers_, dense.cluster_centers_, rtol=0, atol=1e-12 * np.abs(X).max())
    big, _ = make_blobs(20000, n_features=2, centers=3, random_state=1)
    est = CircuitKMeans(3, max_iter=2).fit(big)  # 20,004 tokens: beyond what the dense path takes
    km = KMeans(3, init=est.init_centroids_, n_init=1, algorithm="lloyd", tol=0, max_iter=2).fit(big)
    assert est.report_.verified
    np.testing.assert_allclose(est.cluster_centers_, km.cluster_centers_, rtol=0, atol=1e-12 * np.abs(big).max())
    with pytest.raises(ValueError, match="path"):
        CircuitKMeans(3, path="sparse").fit(X)


#: Values of the parameters CircuitKMeans shares with KMeans, good and bad (issue 42: n_clusters=True, tol=inf,
#: random_state=-1 or 2**32 were accepted). max_iter=0 is left out: the circuit allows it (the initial assignment
#: alone), KMeans does not.
SHARED_VALUES = [
    *[("n_clusters", v) for v in (True, False, 2.0, 0, -1, "2", None, np.int64(2), 2)],
    *[("tol", v) for v in (float("inf"), float("nan"), -1e-12, "0", None, True, 0, 1e-4)],
    *[("random_state", v) for v in (-1, 2**32, 1.5, "0", 2**32 - 1, 0, None, np.random.RandomState(0))],
    *[("n_init", v) for v in (0, -1, 2.0, "x", None, True, "auto", 1)],
    *[("max_iter", v) for v in (-1, 2.0, "3", None, True, 3)],
    *[("init", v) for v in ("x", None, 3, "k-means++", "random")],
]


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("name, value", SHARED_VALUES, ids=lambda v: repr(v)[:20])
def test_parameters_are_validated_as_kmeans_validates_them(name, value):
    """A value KMeans refuses, CircuitKMeans refuses (with scikit-learn's InvalidParameterError, a ValueError and a
    TypeError), and a value KMeans takes, it takes: the same _parameter_constraints machinery decides."""
    X, _ = make_blobs(24, n_features=2, centers=2, random_state=0)
    params = {"n_clusters": 2, "max_iter": 3, name: value}

    def refused(estimator) -> bool:
        try:
            estimator.fit(X)
        except (ValueError, TypeError):
            return True
        return False

    assert refused(CircuitKMeans(**params)) == refused(KMeans(**params, algorithm="lloyd")), (name, value)


@pytest.mark.parametrize("device", ["meta", "cpu:0x", "mps-ish"])
def test_a_device_the_circuits_do_not_run_on_is_a_value_error(device):
    """CircuitKMeans(2, device='meta').fit(X) crashed inside the forward (a meta tensor has no values); every
    device other than cpu or cuda is refused before any work."""
    X, _ = make_blobs(24, n_features=2, centers=2, random_state=0)
    with pytest.raises(ValueError, match="device"):
        CircuitKMeans(2, max_iter=1, device=device).fit(X)
