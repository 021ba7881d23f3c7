"""The numpy references of the variant algorithms against hand computations, limits and independent solvers."""

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from circuits import reference
from circuits.variants import attention
from circuits.reference import Reference, labels_of, one_hot
from circuits.variants.damped import DampedKMeans
from circuits.variants.gumbel import GumbelKMeans
from circuits.variants.references import gumbel_noise, sparsemax
from circuits.variants.soft import SoftKMeans
from circuits.variants.sparse import SparseKMeans
from circuits.variants.spherical import SphericalKMeans
from circuits.variants.trimmed import TrimmedKMeans

RNG = np.random.default_rng(7)
X_BLOBS = np.concatenate([RNG.normal(c, 0.3, size=(20, 2)) for c in ([0, 0], [4, 0], [0, 4])])
C0_BLOBS = X_BLOBS[[0, 25, 45]]


def test_lloyd_base_equals_the_foundation_reference():
    trace = Reference().run(X_BLOBS, C0_BLOBS, 5)
    lloyd = reference.lloyd(X_BLOBS, C0_BLOBS, 5, tie_break=0.0)
    np.testing.assert_array_equal(trace.assignments, lloyd.assignments)
    np.testing.assert_allclose(trace.centroids, lloyd.centroids, atol=1e-14)
    np.testing.assert_allclose(trace.objectives, lloyd.objectives, rtol=1e-14)


# -- soft ---------------------------------------------------------------------------------------------------------
def test_soft_hand_computed_two_points():
    # x = 0 and 2, centroids at 0 and 2, beta = ln(3) / 4: r(0 -> c0) = 1 / (1 + exp(-4 beta)) = 3/4.
    X = np.array([[0.0], [2.0]])
    C = np.array([[0.0], [2.0]])
    soft = SoftKMeans(beta=math.log(3) / 4)
    R = soft.assign(X, C, 0)
    np.testing.assert_allclose(R, [[0.75, 0.25], [0.25, 0.75]], rtol=1e-14)
    # c0 = (0.75 * 0 + 0.25 * 2) / 1 = 0.5; c1 = 1.5.
    np.testing.assert_allclose(soft.update(X, R, C, 1), [[0.5], [1.5]], rtol=1e-14)


def test_soft_at_infinite_stiffness_is_lloyd():
    stiff = SoftKMeans(beta=1e6).run(X_BLOBS, C0_BLOBS, 5)
    lloyd = reference.lloyd(X_BLOBS, C0_BLOBS, 5, tie_break=0.0)
    np.testing.assert_allclose(stiff.centroids, lloyd.centroids, atol=1e-12)
    np.testing.assert_array_equal(stiff.assignments, lloyd.assignments)


def test_soft_prior_keeps_a_centroid_without_responsibility():
    X = np.array([[0.0], [1.0]])
    C = np.array([[0.5], [1e3]])
    soft = SoftKMeans(beta=10.0, prior=1e-200)
    R = soft.assign(X, C, 0)
    assert R[:, 1].sum() == 0.0  # underflows to exactly 0
    new = soft.update(X, R, C, 1)
    assert new[1, 0] == 1e3 and new[0, 0] == pytest.approx(0.5, abs=1e-15)


def test_annealed_stiffness_grows_per_iteration():
    soft = SoftKMeans(beta=0.5, growth=3.0)
    X, C = X_BLOBS[:5], C0_BLOBS
    np.testing.assert_allclose(soft.assign(X, C, 2), SoftKMeans(beta=4.5).assign(X, C, 0), rtol=1e-14)


# -- spherical -----------------------------------------------------------------------------------------------
def test_spherical_hand_computed():
    # Directions at 0, 10 and 80 degrees; centroids along the axes: the first two go to e0, the third to e1.
    deg = np.radians([0.0, 10.0, 80.0])
    X = np.stack([np.cos(deg), np.sin(deg)], axis=1) * np.array([[2.0], [0.5], [3.0]])
    C = np.array([[5.0, 0.0], [0.0, 0.1]])
    sph = SphericalKMeans()
    assert labels_of(sph.assign(X, C, 0)).tolist() == [0, 0, 1]
    new = sph.update(X, sph.assign(X, C, 0), C, 1)
    expected0 = np.array([1 + np.cos(deg[1]), np.sin(deg[1])])
    np.testing.assert_allclose(new[0], expected0 / np.linalg.norm(expected0), rtol=1e-14)
    np.testing.assert_allclose(new[1], [np.cos(deg[2]), np.sin(deg[2])], rtol=1e-14)


def test_spherical_ignores_lengths_and_rejects_zero_points():
    sph = SphericalKMeans()
    lengths = RNG.uniform(0.1, 10, size=(len(X_BLOBS), 1)) + 5
    a = sph.run(X_BLOBS + 5, C0_BLOBS + 5, 4)
    b = sph.run((X_BLOBS + 5) * lengths, (C0_BLOBS + 5) * 3.0, 4)
    np.testing.assert_array_equal(a.assignments, b.assignments)
    np.testing.assert_allclose(a.centroids[1:], b.centroids[1:], atol=1e-14)
    assert np.allclose(np.linalg.norm(a.centroids[1:], axis=-1), 1.0)
    with pytest.raises(ValueError, match="non-zero"):
        sph.run(np.array([[0.0, 0.0], [1.0, 0.0]]), np.array([[1.0, 0.0]]), 1)


# -- trimmed -------------------------------------------------------------------------------------------------
def test_trimmed_hand_computed_outlier_left_out():
    X = np.array([[0.0], [1.0], [10.0], [11.0], [100.0]])
    C = np.array([[0.0], [10.0]])
    trim = TrimmedKMeans(theta=25.0)  # radius 5
    R = trim.assign(X, C, 0)
    assert labels_of(R).tolist() == [0, 0, 1, 1, -1]
    np.testing.assert_allclose(trim.update(X, R, C, 1), [[0.5], [10.5]])
    assert trim.objective(X, C, R) == pytest.approx(0 + 1 + 0 + 1)


def test_trimmed_point_exactly_at_the_threshold_stays_in():
    X = np.array([[0.0], [3.0]])
    C = np.array([[0.0]])
    assert labels_of(TrimmedKMeans(theta=9.0, tie_break=1e-9, sink_tie_break=1e-9).assign(X, C, 0)).tolist() == [0, 0]


def test_trimmed_with_a_huge_threshold_is_lloyd():
    a = TrimmedKMeans(theta=1e12).run(X_BLOBS, C0_BLOBS, 5)
    lloyd = reference.lloyd(X_BLOBS, C0_BLOBS, 5, tie_break=0.0)
    np.testing.assert_array_equal(a.assignments, lloyd.assignments)
    np.testing.assert_allclose(a.centroids, lloyd.centroids, atol=1e-14)


# -- sparse --------------------------------------------------------------------------------------------------
def test_sparsemax_known_values():
    np.testing.assert_allclose(sparsemax(np.array([1.0, 0.0])), [1.0, 0.0])
    np.testing.assert_allclose(sparsemax(np.array([0.5, 0.0])), [0.75, 0.25])
    np.testing.assert_allclose(sparsemax(np.array([0.0, 0.0, 0.0])), [1 / 3] * 3)
    np.testing.assert_allclose(sparsemax(np.array([3.0, 2.6, 0.0])), [0.7, 0.3, 0.0])


def _simplex_projection_by_bisection(z):
    # Independent solver: find tau with sum(max(z - tau, 0)) = 1 by bisection.
    lo, hi = z.min() - 1.0, z.max()
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if np.maximum(z - mid, 0).sum() > 1 else (lo, mid)
    return np.maximum(z - (lo + hi) / 2, 0)


@settings(max_examples=60, deadline=None)
@given(arrays(np.float64, st.integers(1, 12), elements=st.floats(-20, 20)))
def test_sparsemax_is_the_simplex_projection_in_numpy_and_torch(z):
    p = sparsemax(z)
    np.testing.assert_allclose(p, _simplex_projection_by_bisection(z), atol=1e-9)
    assert p.sum() == pytest.approx(1.0, abs=1e-12) and (p >= 0).all()
    torch_p = attention.sparsemax_rows(torch.as_tensor(z[None, None, None, :])).numpy()[0, 0, 0]
    np.testing.assert_allclose(torch_p, p, atol=1e-14)


def test_sparse_with_gamma_zero_is_the_mean_and_large_gamma_drops_far_members():
    X = np.array([[0.0], [0.1], [0.2], [3.0]])
    C = np.array([[0.1]])
    R = np.ones((4, 1))
    np.testing.assert_allclose(SparseKMeans(gamma=0.0).update(X, R, C, 1), [[0.825]])
    # gamma = 10: closeness -0.1, 0, -0.1 and -84.1: the far member gets weight 0.
    W = SparseKMeans(gamma=10.0).update_weights(X, R, C, 1)
    assert W[0, 3] == 0.0 and W[0, :3].sum() == pytest.approx(1.0)
    np.testing.assert_allclose(W[0, :3], [0.3, 0.4, 0.3])


# -- gumbel --------------------------------------------------------------------------------------------------
def test_gumbel_picks_members_with_softmax_frequencies():
    X = np.array([[0.0], [1.0], [2.0], [9.0]])
    C = np.array([[0.0], [9.0]])
    R = one_hot(np.array([0, 0, 0, 1]), 2)
    gamma = 0.7
    counts = np.zeros(3)
    draws = 4000
    for seed in range(draws):
        W = GumbelKMeans(gamma=gamma, seed=seed).update_weights(X, R, C, 1)
        assert W[1, 3] == 1.0 and W[0].sum() == 1.0
        counts += W[0, :3]
    p = np.exp(-gamma * np.array([0.0, 1.0, 4.0]))
    p /= p.sum()
    # Binomial standard errors are below 0.008 here; 0.03 is > 3.5 of them.
    np.testing.assert_allclose(counts / draws, p, atol=0.03)


def test_gumbel_noise_is_reproducible_and_keyed():
    a = gumbel_noise(3, 1, 0, 2, 10)
    np.testing.assert_array_equal(a, gumbel_noise(3, 1, 0, 2, 10))
    assert not np.array_equal(a, gumbel_noise(3, 2, 0, 2, 10))
    assert not np.array_equal(a, gumbel_noise(3, 1, 1, 2, 10))


def test_gumbel_step_lands_on_a_member_and_empty_clusters_stay():
    X = X_BLOBS
    C = np.concatenate([C0_BLOBS, [[100.0, 100.0]]])
    trace = GumbelKMeans(seed=5).run(X, C, 3)
    for t in range(1, 4):
        for j in range(3):
            assert any(np.array_equal(trace.centroids[t][j], x) for x in X)
        np.testing.assert_array_equal(trace.centroids[t][3], [100.0, 100.0])


# -- damped --------------------------------------------------------------------------------------------------
def test_damped_hand_computed_and_eta_one_is_lloyd():
    X = np.array([[0.0], [2.0], [10.0]])
    C = np.array([[0.0], [10.0]])
    R = one_hot(np.array([0, 0, 1]), 2)
    np.testing.assert_allclose(DampedKMeans(eta=0.25).update(X, R, C, 1), [[0.25], [10.0]])
    a = DampedKMeans(eta=1.0).run(X_BLOBS, C0_BLOBS, 5)
    lloyd = reference.lloyd(X_BLOBS, C0_BLOBS, 5, tie_break=0.0)
    np.testing.assert_allclose(a.centroids, lloyd.centroids, atol=1e-14)


def test_update_weights_reproduce_the_update():
    R_hard = Reference().assign(X_BLOBS, C0_BLOBS, 0)
    R_soft = SoftKMeans(beta=0.3).assign(X_BLOBS, C0_BLOBS, 0)
    for ref, R in [(Reference(), R_hard), (SoftKMeans(beta=0.3), R_soft), (SparseKMeans(gamma=2.0), R_hard),
                   (GumbelKMeans(gamma=1.0, seed=2), R_hard), (DampedKMeans(eta=0.3), R_hard)]:
        W = ref.update_weights(X_BLOBS, R, C0_BLOBS, 1)
        np.testing.assert_allclose(W.sum(axis=1), 1.0, atol=1e-14)
        np.testing.assert_allclose(W[:, :-1] @ X_BLOBS + W[:, -1:] * C0_BLOBS,
                                   ref.update(X_BLOBS, R, C0_BLOBS, 1), atol=1e-13)


def test_objective_ignores_left_out_points():
    X = np.array([[0.0], [1.0], [50.0]])
    C = np.array([[0.0]])
    assert reference.objective(X, C, np.array([0, 0, -1])) == 1.0
