"""The exactness certificate: margins and leak bounds are reported, are true bounds, and flag a too-small beta."""

import numpy as np
import pytest
import torch
from sklearn.datasets import load_iris, make_blobs

from analysis.pipeline import run_problem
from circuits.initialisation import initial_centroids
from circuits.sharpness import FLOAT64_UNDERFLOW, Sharpness


@pytest.fixture(scope="module")
def blobs():
    X, _ = make_blobs(600, n_features=2, centers=5, random_state=0)
    return X, initial_centroids(X, 5, "random", 0)


def test_default_sharpness_is_certified_hard(blobs):
    X, C0 = blobs
    rep = run_problem(X, C0, 5).report
    assert rep.verified and rep.hard_attention
    assert rep.min_margin > FLOAT64_UNDERFLOW
    assert all(r.leak_bound == 0.0 and r.update_leak_bound == 0.0 for r in rep.per_iteration)


@pytest.mark.parametrize("beta", [10.0, 1e4])
def test_too_small_beta_is_flagged(blobs, beta):
    X, C0 = blobs
    rep = run_problem(X, C0, 5, sharpness=Sharpness(beta=beta)).report
    assert not rep.verified
    assert not rep.hard_attention
    assert rep.min_margin < FLOAT64_UNDERFLOW
    assert max(r.leak_bound for r in rep.per_iteration) > 1e-6
    assert rep.failures and any("not exactly hard" in note for note in rep.notes)


def test_too_small_update_sharpness_is_flagged(blobs):
    X, C0 = blobs
    rep = run_problem(X, C0, 3, sharpness=Sharpness(beta_update=8.0)).report
    assert not rep.verified
    assert max(r.update_leak_bound for r in rep.per_iteration) > 1e-3
    assert any("update" in f for f in rep.failures)
    assert any("beta_update" in note for note in rep.notes)


@pytest.mark.parametrize("beta", [3.0, 1e3, 1e5, 1e7, 1e14])
def test_leak_bound_bounds_the_pattern_and_the_assignment(blobs, beta):
    X, C0 = blobs
    result = run_problem(X, C0, 3, sharpness=Sharpness(beta=beta))
    cap = result.capture
    for t in range(4):
        att = cap.assign_attention(t)
        assert np.all(att.leak_observed <= att.leak_bound * (1 + 1e-9) + 1e-300)
        # The staged assignment is the pattern over centroid keys: its distance from the chosen one-hot is at most
        # twice the leaked mass.
        layer = cap.layers[result.circuit.assignment_layers[t]]
        Y = layer.post.assignments[0]
        onehot = np.eye(C0.shape[0])[att.chosen[0]]
        deviation = np.abs(Y - onehot).sum(axis=1)
        assert np.all(deviation <= 2 * att.leak_bound[0] * (1 + 1e-9) + 1e-12)


def test_margin_is_beta_times_gap(blobs):
    """Away from ties the certified margin is beta times the gap in unit-scaled squared distance (plus tie-break)."""
    X, C0 = blobs
    result = run_problem(X, C0, 1)
    att = result.capture.assign_attention(0)
    s = result.report.scale
    D = ((X[:, None, :] - C0[None, :, :]) ** 2).sum(-1) / s**2
    part = np.sort(D, axis=1)
    gap = part[:, 1] - part[:, 0]
    beta = result.circuit.sharpness.beta
    np.testing.assert_allclose(att.margin[0], beta * gap, rtol=1e-6, atol=beta * 1e-10)


def test_float32_is_reported_as_approximate():
    X = load_iris().data
    C0 = initial_centroids(X, 3, "random", 0)
    rep = run_problem(X, C0, 10, dtype=torch.float32).report
    assert rep.dtype == "float32" and not rep.exact
    assert any("approximation" in note for note in rep.notes)
    # Its tolerances are float32's, stated in the report, not float64's.
    assert rep.tolerances.eps == pytest.approx(np.finfo(np.float32).eps)
    assert rep.verified, rep.summary()
