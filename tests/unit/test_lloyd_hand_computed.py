"""Hand-computed tiny problems: every iterate written out, so a wrong circuit cannot agree by accident."""

import numpy as np
import pytest


def column(*values):
    return np.array(values, dtype=float)[:, None]


def iterates(result):
    T = result.circuit.iterations
    cap = result.capture
    return [cap.centroids(t)[0] for t in range(T + 1)], [cap.assignments(t)[0] for t in range(T + 1)]


def test_one_dimensional_three_iterations(run):
    # x = 0, 2, 3, 9, 11 with c = (0, 2):
    #   assign -> (0 | 2 3 9 11), update -> c = (0, 25/4)
    #   assign -> (0 2 3 | 9 11), update -> c = (5/3, 10)
    #   assign -> (0 2 3 | 9 11): unchanged, so c stays (5/3, 10)
    X = column(0, 2, 3, 9, 11)
    result = run(X, column(0, 2), 3)
    cents, labels = iterates(result)
    expected_c = [column(0, 2), column(0, 25 / 4), column(5 / 3, 10), column(5 / 3, 10)]
    expected_l = [[0, 1, 1, 1, 1], [0, 0, 0, 1, 1], [0, 0, 0, 1, 1], [0, 0, 0, 1, 1]]
    for t in range(4):
        np.testing.assert_allclose(cents[t], expected_c[t], rtol=0, atol=1e-14)
        np.testing.assert_array_equal(labels[t], expected_l[t])
    assert result.inertia == pytest.approx(25 / 9 + 1 / 9 + 16 / 9 + 1 + 1, abs=1e-13)
    assert result.report.verified and result.report.hard_attention
    assert result.report.n_iter == 3  # sklearn stops at iteration 3: its assignment repeats the one before


def test_two_dimensional_square(run):
    # Four corners of a 2x2 square plus a far point; c0 at (0,0), c1 at (10, 0).
    #   assign: all corners -> c0, (10, 0) -> c1; update: c0 = mean of corners = (1, 1), c1 = (10, 0).
    X = np.array([[0, 0], [2, 0], [0, 2], [2, 2], [10, 0]], dtype=float)
    result = run(X, np.array([[0, 0], [10, 0]], dtype=float), 2)
    cents, labels = iterates(result)
    np.testing.assert_allclose(cents[1], [[1, 1], [10, 0]], atol=1e-14)
    np.testing.assert_allclose(cents[2], [[1, 1], [10, 0]], atol=1e-14)
    np.testing.assert_array_equal(labels[0], [0, 0, 0, 0, 1])
    np.testing.assert_array_equal(result.labels, [0, 0, 0, 0, 1])


def test_tie_goes_to_the_lower_index(run):
    # x = 1 is exactly between c0 = 0 and c1 = 2: the tie goes to c0.
    #   assign -> (0 1 | 2 10), update -> c = (1/2, 6)
    #   assign -> (0 1 2 | 10), update -> c = (1, 10); then nothing changes.
    # Had the tie gone to c1, the first update would give c = (0, 13/3).
    X = column(0, 1, 2, 10)
    result = run(X, column(0, 2), 3)
    cents, labels = iterates(result)
    np.testing.assert_array_equal(labels[0], [0, 0, 1, 1])
    np.testing.assert_allclose(cents[1], column(0.5, 6), atol=1e-14)
    np.testing.assert_allclose(cents[2], column(1, 10), atol=1e-14)
    np.testing.assert_array_equal(labels[2], [0, 0, 0, 1])
    ties = result.report.ties
    assert [(t.point, t.iteration, t.candidates, t.chosen) for t in ties] == [(1, 0, [0, 1], 0)]
    assert result.report.verified


def test_empty_cluster_keeps_its_centroid(run):
    # c2 = 100 is nobody's nearest centroid: it must stay at 100 in every iteration.
    #   assign to (0, 4, 100): (0 1 | 4 5), update -> (1/2, 9/2, 100), then nothing changes.
    X = column(0, 1, 4, 5)
    result = run(X, column(0, 4, 100), 3)
    cents, labels = iterates(result)
    for t in range(1, 4):
        np.testing.assert_allclose(cents[t], column(0.5, 4.5, 100), atol=1e-13)
    np.testing.assert_array_equal(result.labels, [0, 0, 1, 1])
    assert result.report.verified


def test_single_cluster(run):
    X = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 9.0]])
    result = run(X, X[:1], 2)
    np.testing.assert_allclose(result.centroids, [[3.0, 5.0]], atol=1e-14)
    np.testing.assert_array_equal(result.labels, [0, 0, 0])
    assert result.report.verified
