"""CircuitKMeans stops at its stopping point (analysis/estimator/stopping.py): the result is the full run's, exactly.

A fit runs Lloyd's circuit up to the iteration where ``KMeans`` stops (guessed by a float64 reference, confirmed by
the circuit's own states) instead of all ``max_iter`` iterations. Its ``labels_``, ``cluster_centers_``,
``inertia_`` and ``n_iter_`` must be bit for bit those of the fit that runs every iteration, and those of
scikit-learn's ``KMeans(init=C0, n_init=1, algorithm="lloyd", tol, max_iter)``; a wrong guess must fall back to the
full run, never change the result.
"""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sklearn.cluster import KMeans
from sklearn.datasets import make_blobs

from analysis.estimator import stopping as estimator_run
from analysis.estimator import CircuitKMeans, clear_circuit_cache


def full_fit(monkeypatch, params, X):
    """The fit that runs every one of ``max_iter`` iterations (no guess of the stop)."""
    with monkeypatch.context() as patch:
        patch.setattr(estimator_run, "reference_stop", lambda X, C0, max_iter, tol: max_iter)
        est = CircuitKMeans(**params).fit(X)
    assert est.circuit_.iterations == params["max_iter"]
    return est


def assert_same_result(ours, full):
    np.testing.assert_array_equal(ours.labels_, full.labels_)
    np.testing.assert_array_equal(ours.cluster_centers_, full.cluster_centers_)
    assert (ours.inertia_, ours.n_iter_) == (full.inertia_, full.n_iter_)
    assert ours.report_.verified and full.report_.verified


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10**6), n=st.integers(20, 120), d=st.integers(1, 3), k=st.integers(1, 5),
       max_iter=st.integers(1, 8), tol=st.sampled_from([0.0, 1e-3]), std=st.floats(0.3, 3.0),
       init=st.sampled_from(["k-means++", "random"]))
def test_stopped_fit_is_the_full_fit_and_kmeans(monkeypatch, seed, n, d, k, max_iter, tol, std, init):
    X, _ = make_blobs(n, n_features=d, centers=4, cluster_std=std, random_state=seed)
    params = dict(n_clusters=k, max_iter=max_iter, tol=tol, init=init, random_state=seed)
    ours = CircuitKMeans(**params).fit(X)
    # What ran: the circuit of the iterations run, every layer captured and verified, and no more than max_iter.
    assert ours.n_iter_ <= ours.circuit_.iterations <= max_iter
    assert len(ours.capture_.layers) == ours.circuit_.n_layers == 2 * ours.circuit_.iterations + 2
    assert ours.report_.iterations == ours.circuit_.iterations
    assert_same_result(ours, full_fit(monkeypatch, params, X))
    km = KMeans(k, init=ours.init_centroids_, n_init=1, algorithm="lloyd", tol=tol, max_iter=max_iter).fit(X)
    np.testing.assert_array_equal(ours.labels_, km.labels_)
    np.testing.assert_allclose(ours.cluster_centers_, km.cluster_centers_, rtol=0, atol=1e-12 * np.abs(X).max())
    assert ours.n_iter_ == km.n_iter_


def test_a_fit_that_converges_early_runs_only_what_it_needs():
    X, _ = make_blobs(300, n_features=4, centers=4, random_state=0)
    est = CircuitKMeans(4, max_iter=30, init="k-means++", random_state=0).fit(X)
    # The test bites: the stop is well before max_iter, and the circuit that ran ends there.
    assert est.n_iter_ < 10 and est.circuit_.iterations == est.n_iter_
    assert est.report_.verified and est.report_.converged


@pytest.mark.parametrize("guess", [1, 2, 5])
def test_a_wrong_guess_changes_nothing(monkeypatch, guess):
    """A guess short of the stop falls back to the full run; one past it stops where the circuit stopped."""
    X, _ = make_blobs(200, n_features=2, centers=5, cluster_std=0.5, random_state=0)
    params = dict(n_clusters=5, max_iter=12, init="random", random_state=1)
    full = full_fit(monkeypatch, params, X)
    assert 2 < full.n_iter_ < 5  # so that the guesses are short, and past the stop
    clear_circuit_cache()
    with monkeypatch.context() as patch:
        patch.setattr(estimator_run, "reference_stop", lambda X, C0, max_iter, tol: guess)
        ours = CircuitKMeans(**params).fit(X)
    assert ours.circuit_.iterations == (12 if guess < full.n_iter_ else guess)
    assert_same_result(ours, full)


def test_variants_run_every_iteration():
    X, _ = make_blobs(120, n_features=2, centers=3, random_state=0)
    est = CircuitKMeans(3, max_iter=6, variant="damped", random_state=0).fit(X)
    assert est.circuit_.iterations == 6 and est.n_iter_ <= 6


def test_tied_layers_share_structured_plans_until_a_weight_changes():
    """Derived circuits share parameter tensors, so the structured path plans them once
    (``circuits.structured.cached_plan``); an in-place edit of a shared weight must re-plan every module on it."""
    import torch

    from analysis.estimator import with_assign_knobs
    from circuits import hook_names
    from analysis.pipeline import lloyd_scaling
    from circuits.build import build_lloyd_circuit
    from circuits.encoding import encode
    from circuits.sharpness import Sharpness
    from circuits.structured import MLPPlan, cached_plan, structured_forward

    template = build_lloyd_circuit(2, 3, 0, Sharpness())
    a = with_assign_knobs(template, Sharpness(beta=50.0), 3)
    b = with_assign_knobs(template, Sharpness(beta=60.0), 2)
    blocks_a, blocks_b = a.runnable.blocks, b.runnable.blocks
    plan = cached_plan(blocks_a[0].mlp, MLPPlan)
    assert cached_plan(blocks_a[2].mlp, MLPPlan) is plan and cached_plan(blocks_b[4].mlp, MLPPlan) is plan
    X, _ = make_blobs(30, n_features=2, centers=3, random_state=0)
    C0 = X[:3]
    encoded = encode(b.layout, X, C0, scaling=lloyd_scaling(X, C0))
    structured_forward(a.runnable, encoded.resid)  # plans every module of a
    with torch.no_grad():  # an edit of the update MLP that every circuit derived from the template shares
        template.weights.parameters[hook_names.param(0, "mlp", "W_out")].mul_(0.5)
    assert cached_plan(blocks_b[2].mlp, MLPPlan) is not plan
    logits, _ = structured_forward(b.runnable, encoded.resid)
    with torch.no_grad():
        dense = b.model(encoded.resid, start_at_layer=0)  # built now, from the edited weights
    torch.testing.assert_close(logits, dense, rtol=1e-9, atol=1e-9)
