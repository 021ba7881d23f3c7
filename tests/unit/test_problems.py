"""The problem generators (circuits.problems) and the initialisations (circuits.initialisation), tested once here.

The streams matter as much as the distributions: the committed checkpoints' tasks, the sweep's problems and every
seeded result depend on them, so besides hand-computed cases and properties (hypothesis) each generator is checked
against its stated draw order, re-derived from a fresh generator, and the paper family against pinned digests.
"""

import hashlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from circuits.initialisation import (batch_init, fewer_distinct_rows, initial_centroids, kmeans_plusplus_init, random_points_init)
from circuits.problems import FAMILIES, GeneralMixture, PaperMixture, min_max_scale, noise


def digest(a: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()[:16]


# ------------------------------------------------------------------------------------------ hand-computed
def test_min_max_scale_hand_computed():
    X = np.array([[[1.0, 5.0], [3.0, 5.0], [2.0, 5.0]]])
    # Column 0 spans [1, 3]; column 1 is constant, so it maps to 0 (span taken as 1), not 0/0.
    np.testing.assert_array_equal(min_max_scale(X), [[[0.0, 0.0], [1.0, 0.0], [0.5, 0.0]]])


def test_paper_mixture_follows_its_stated_draw_order():
    spec = PaperMixture(n=7, d=3, k=2, sigma=0.25, scale=4.0)
    X, comps = spec.sample(np.random.default_rng(11), 2)
    rng = np.random.default_rng(11)
    means, c, z = rng.uniform(0.0, 1.0, (2, 2, 3)), rng.integers(0, 2, (2, 7)), rng.standard_normal((2, 7, 3))
    raw = np.stack([means[b][c[b]] for b in range(2)]) + 0.25 * z
    lo, hi = raw.min(axis=1, keepdims=True), raw.max(axis=1, keepdims=True)
    np.testing.assert_array_equal(comps, c)
    np.testing.assert_array_equal(X, (raw - lo) / (hi - lo) * 4.0)


def test_general_mixture_follows_its_stated_draw_order():
    X, comps = GeneralMixture(heavy_tail=1.0).sample(np.random.default_rng(5), 9, 2, 3)
    rng = np.random.default_rng(5)
    alpha = np.exp(rng.uniform(np.log(0.3), np.log(5.0)))
    c = rng.choice(3, size=9, p=rng.dirichlet(np.full(3, alpha)))
    means = np.exp(rng.uniform(np.log(0.15), np.log(3.0))) * rng.standard_normal((3, 2))
    Q = np.linalg.qr(rng.standard_normal((3, 2, 2)))[0]
    A = Q * np.exp(rng.uniform(np.log(0.2), 0.0, (3, 2)))[:, None, :]
    assert rng.random() < 1.0  # the tail choice is drawn even when it cannot fail
    dof = rng.integers(3, 11)
    z = rng.standard_t(dof, (9, 2)) / np.sqrt(dof / (dof - 2))
    Y = np.stack([means[c[i]] + A[c[i]] @ z[i] for i in range(9)])
    scale, offset = 10.0 ** rng.uniform(-3.0, 3.0), rng.uniform(-100.0, 100.0, 2)
    np.testing.assert_array_equal(comps, c)
    np.testing.assert_allclose(X, (Y + offset) * scale, rtol=1e-13)  # einsum vs matmul: rounding order only


def test_paper_streams_are_pinned():
    # Digests of the generators' output as the committed checkpoints and results were made (float64, C order).
    from analysis.sweep import mixture_problem
    from circuits.training.tasks import make_tasks

    t = make_tasks(2, 6, 2, 3, seed=1)
    assert (digest(t.X), digest(t.C0)) == ("c6b732ba05021407", "23e9f9d14a1c4e04")
    X, C0 = mixture_problem(2, 3, 10, 3.0, 2)
    assert (digest(X), digest(C0)) == ("a6c3d37614fdd98d", "997a5cebdaaf5a9c")


def test_random_init_on_duplicated_points_draws_distinct_values():
    X = np.array([[0.0, 0.0], [0.0, 0.0], [1.0, 0.0], [1.0, 0.0], [2.0, 0.0]])
    # Three distinct values and k = 3: all of them, in order of first appearance, whatever the seed.
    for seed in range(4):
        np.testing.assert_array_equal(initial_centroids(X, 3, "random", seed), [[0, 0], [1, 0], [2, 0]])
    with pytest.raises(ValueError, match="exceeds the number of distinct points"):
        initial_centroids(X, 4, "random", 0)


def test_fewer_distinct_rows_looks_at_rows_not_at_one_column():
    # Column 0 has two distinct values but the rows are four distinct points: k = 4 is enough, k = 5 is not.
    X = np.array([[0.0, 0.0], [0.0, 1.0], [1.0, 0.0], [1.0, 1.0], [1.0, 1.0]])
    assert fewer_distinct_rows(X, 2) is None and fewer_distinct_rows(X, 4) is None
    np.testing.assert_array_equal(fewer_distinct_rows(X, 5), X[:4])
    for method in ("random", "k-means++"):
        assert initial_centroids(X, 4, method, 1).shape == (4, 2)
        with pytest.raises(ValueError, match=r"k=5 exceeds the number of distinct points \(4\)"):
            initial_centroids(X, 5, method, 1)


def test_batched_random_init_is_the_k_smallest_uniforms_in_index_order():
    X = np.arange(2 * 5 * 1, dtype=np.float64).reshape(2, 5, 1)
    C0 = random_points_init(np.random.default_rng(3), X, 2)
    u = np.random.default_rng(3).random((2, 5))
    for b in range(2):
        np.testing.assert_array_equal(C0[b, :, 0], X[b, sorted(np.argsort(u[b])[:2]), 0])


def test_batched_kmeans_plusplus_is_scikit_learns_with_drawn_seeds():
    from sklearn.cluster import kmeans_plusplus

    X = np.random.default_rng(0).normal(size=(2, 20, 2))
    C0 = kmeans_plusplus_init(np.random.default_rng(4), X, 3)
    seeds = np.random.default_rng(4).integers(0, 2**31 - 1, size=2)
    for x, c, s in zip(X, C0, seeds):
        np.testing.assert_array_equal(c, kmeans_plusplus(x, n_clusters=3, random_state=int(s))[0])


def test_unknown_names_are_value_errors():
    with pytest.raises(ValueError, match="unknown task family 'uniform'"):
        noise(np.random.default_rng(0), "uniform", (3,))
    with pytest.raises(ValueError, match="unknown task family"):
        PaperMixture(5, 1, 2, family="uniform").sample(np.random.default_rng(0), 1)
    with pytest.raises(ValueError, match="unknown init 'kmeans'"):
        batch_init(np.random.default_rng(0), np.zeros((1, 3, 1)), 2, "kmeans")


def test_noise_families_have_unit_scale():
    rng = np.random.default_rng(0)
    for family in ("gaussian", "laplace", "gumbel", "lognormal"):
        z = noise(rng, family, (200_000,))
        assert abs(z.mean()) < 0.02 and abs(z.std() - 1) < 0.02, family
    # Cauchy has no variance: its scale is 1, so its quartiles are -1 and 1.
    q = np.quantile(noise(rng, "cauchy", (200_000,)), [0.25, 0.75])
    np.testing.assert_allclose(q, [-1.0, 1.0], atol=0.03)


# ------------------------------------------------------------------------------------------ properties
@settings(max_examples=40, deadline=None)
@given(n=st.integers(2, 30), d=st.integers(1, 4), k=st.integers(1, 5), batch=st.integers(1, 3),
       scale=st.sampled_from([0.1, 1.0, 7.0]), family=st.sampled_from(FAMILIES), seed=st.integers(0, 2**32 - 1))
def test_paper_problems_fill_the_scaled_cube_and_repeat_for_the_same_seed(n, d, k, batch, scale, family, seed):
    spec = PaperMixture(n, d, k, family=family, scale=scale)
    X, comps = spec.sample(np.random.default_rng(seed), batch)
    assert X.shape == (batch, n, d) and comps.shape == (batch, n)
    assert ((comps >= 0) & (comps < k)).all()
    lo, hi = X.min(axis=1), X.max(axis=1)
    # Exactly: (lo - lo) / span is 0 and (hi - lo) / span is 1 in floating point (continuous noise: span > 0).
    assert (lo == 0.0).all() and (hi == scale).all()
    X2, comps2 = spec.sample(np.random.default_rng(seed), batch)
    np.testing.assert_array_equal(X, X2)
    np.testing.assert_array_equal(comps, comps2)


@settings(max_examples=30, deadline=None)
@given(n=st.integers(1, 20), d=st.integers(1, 4), m=st.integers(1, 4), seed=st.integers(0, 2**32 - 1))
def test_general_problems_are_finite_and_repeat_for_the_same_seed(n, d, m, seed):
    X, comps = GeneralMixture().sample(np.random.default_rng(seed), n, d, m)
    assert X.shape == (n, d) and np.isfinite(X).all() and ((comps >= 0) & (comps < m)).all()
    X2, _ = GeneralMixture().sample(np.random.default_rng(seed), n, d, m)
    np.testing.assert_array_equal(X, X2)


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 12), k=st.integers(1, 12), batch=st.integers(1, 3), seed=st.integers(0, 2**32 - 1))
def test_batched_random_init_draws_k_distinct_points_in_index_order(n, k, batch, seed):
    k = min(k, n)
    X = np.random.default_rng(seed).normal(size=(batch, n, 2))
    C0 = random_points_init(np.random.default_rng(seed), X, k)
    for x, c in zip(X, C0):
        idx = [int(np.flatnonzero((x == ci).all(axis=1))[0]) for ci in c]
        assert idx == sorted(set(idx)) and len(idx) == k
