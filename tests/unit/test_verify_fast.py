"""The fast forms (:mod:`analysis.verify.fast.blocks`, the windows of :mod:`analysis.verify.windows` and
:mod:`analysis.verify.steps`) against the textbook they stand for, bit for bit.

Each fast form is held to its textbook: :mod:`circuits.reference` for distances, objectives and labels; the formula
a window's docstring states; the whole-matrix rule of a step-wise check. The same numbers are compared as their bytes
(``-0.0`` against ``0.0`` and NaN payloads included), the same labels, the same mismatches and ties. The problems are
generated to reach the corners: exact ties (points on a small integer grid, duplicated points, centroids on points),
near ties a few ulps apart, float32 input, centroids that are not C-contiguous (as a block's decoded input is),
infinite and NaN distances, and blocks that end mid-problem (the block sizes are made small by ``small_blocks``), down
to blocks of one point.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from analysis.verify import checks, steps, windows
from analysis.verify.checks import At, TieRule, check_costs
from analysis.verify.fast import blocks
from analysis.verify.report import Check, Mismatch, MismatchKind, Tie
from circuits import reference
from circuits.onehot import one_hot
from circuits.reference import Costs

# --- the rules the fast forms compute, written whole-matrix -------------------------------------------------------


def within_rule(D, E):
    """The lowest column within ``E_ij + E_imin`` of the smallest (blocks.assign_within_biased)."""
    rows = np.arange(D.shape[0])
    best = np.argmin(D, axis=1)
    candidate = D - D[rows, best][:, None] <= E + E[rows, best][:, None]
    return np.argmax(candidate, axis=1)


def distance_formula(X, C, D, offset, u, x_norms=None):
    d = X.shape[1]
    mu = float(np.linalg.norm(offset))
    if x_norms is None:
        x_norms = np.linalg.norm(X, axis=1)
    represent = 8 * u * np.sqrt(d * D) * (x_norms[:, None] + np.linalg.norm(C, axis=1)[None, :] + 2 * mu)
    return represent + (d + 2) * checks.UNIT_ROUNDOFF * D


def circuit_formula(X, C, offset, scale, gamma, tie_break, ux=None):
    if ux is None:
        ux = np.linalg.norm((X - offset) / scale, axis=1)
    uc = np.linalg.norm((C - offset) / scale, axis=1)
    m = 2 * ux[:, None] * uc[None, :] + uc[None, :] ** 2 + tie_break * np.arange(C.shape[0])[None, :]
    return gamma * scale**2 * m


def whole_matrix_check_costs(cost, got, margins, at, rule, expected=None):
    E, E_circuit, tie_break_abs = rule.E, rule.E_circuit, rule.tie_break_abs
    layer, iteration, check = at.layer, at.iteration, at.check
    V, labels = cost.values, np.asarray(cost.labels)
    col_of = {int(label): c for c, label in enumerate(labels)}
    if expected is None:
        exp_col = np.argmin(V + cost.bias, axis=1) if E is None else within_rule(V + cost.bias, E)
        expected = labels[exp_col]
    else:
        exp_col = np.array([col_of[int(e)] for e in expected])
    rows = np.arange(len(V))
    if E is None:
        window = rule.bias_scale * np.abs(cost.bias[None, :] - cost.bias[exp_col][:, None]) + rule.rounding
    else:
        window = E + E[rows, exp_col][:, None]
    near = np.abs(V - V[rows, exp_col][:, None]) <= window
    within = near
    ties = [Tie(int(i), layer, iteration, [int(labels[c]) for c in np.flatnonzero(within[i])], int(got[i]),
                float(margins[i])) for i in np.flatnonzero(within.sum(axis=1) > 1)]
    mismatches = []
    for i in np.flatnonzero(np.asarray(expected) != got):
        e, g = int(expected[i]), int(got[i])
        g_col = col_of.get(g)
        gap = float(V[i, g_col] - V[i, exp_col[i]]) if g_col is not None else math.inf
        kind = MismatchKind.TIE if g_col is not None and within[i, g_col] else MismatchKind.ERROR
        w = float(window[i, g_col]) if g_col is not None else 0.0
        cause = ""
        if kind == MismatchKind.ERROR and E is not None and g >= 0 and e >= 0:
            if g < e and gap <= tie_break_abs * (e - g) + w:
                cause = "tie-break"
            elif E_circuit is not None and abs(gap) <= E_circuit[i, g] + E_circuit[i, e] + w:
                cause = "resolution"
        mismatches.append(Mismatch(int(i), layer, iteration, e, g, float(margins[i]), gap, kind, Check(check), w, cause,
                                   nearest=e))
    return mismatches, ties


# --- problems ---------------------------------------------------------------------------------------------------


def same_bits(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


@pytest.fixture
def small_blocks(monkeypatch):
    """Blocks of a few rows, so that small problems end blocks mid-problem as a million points do."""
    monkeypatch.setattr(blocks, "_DIFF_ELEMENTS", 7 * 3)
    monkeypatch.setattr(blocks, "_WITHIN_ENTRIES", 13)
    monkeypatch.setattr(windows, "_FUSED_ENTRIES", 11)
    monkeypatch.setattr(steps, "_ROWS", 6)


def problem(seed: int, n: int, d: int, k: int, kind: str) -> tuple[np.ndarray, np.ndarray]:
    """Points and centroids: ``grid`` (small integers: exact ties, duplicates, centroids on points), ``near``
    (points a few ulps off the bisector of two centroids), ``wide`` (magnitudes over many decades), ``float32``."""
    rng = np.random.default_rng(seed)
    if kind == "grid":
        X = rng.integers(-2, 3, size=(n, d)).astype(np.float64)
        C = rng.integers(-2, 3, size=(k, d)).astype(np.float64)
    elif kind == "near":
        C = rng.normal(size=(k, d))
        C[1 % k] = C[0] + 1.0
        mid = (C[0] + C[1 % k]) / 2
        X = mid + rng.normal(size=(n, d)) * 1e-3
        X[:, 0] = np.nextafter(mid[0], rng.choice([-np.inf, np.inf], size=n))
    elif kind == "wide":
        X = rng.normal(size=(n, d)) * 10.0 ** rng.integers(-6, 6, size=(n, 1))
        C = rng.normal(size=(k, d)) * 10.0 ** rng.integers(-3, 3, size=(k, 1))
    else:
        X = rng.normal(size=(n, d)).astype(np.float32)
        C = rng.normal(size=(k, d)).astype(np.float32).astype(np.float64)
    X[rng.integers(0, n, size=max(1, n // 10))] = X[0]  # duplicated points
    X[min(1, n - 1)] = -0.0 * X[min(1, n - 1)]  # signed zeros
    return X, C


KINDS = ["grid", "near", "wide", "float32"]
SHAPES = [(1, 1, 1), (2, 1, 2), (37, 2, 3), (300, 8, 10), (257, 5, 33)]


# --- squared distances ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("n,d,k", SHAPES)
@pytest.mark.parametrize("layout", ["C", "F", "reversed", "strided_points"])
def test_fast_distances_are_the_textbooks_bit_for_bit(small_blocks, kind, n, d, k, layout):
    X, C = problem(n * d + k, n, d, k, kind)
    if layout == "F":
        C = np.asfortranarray(C)
    elif layout == "reversed":
        C = C[::-1]
    elif layout == "strided_points":
        X = np.repeat(X, 2, axis=0)[::2]
    D = reference.sq_distances(X, C)
    assert same_bits(blocks.sq_distances(X, C), D)
    labels = np.random.default_rng(n).integers(0, k, size=n)
    assert same_bits(blocks.own_sq_distances(X, C, labels), D[np.arange(n), labels])
    labels[::3] = -1  # left out: an objective counts them nowhere
    assert np.float64(blocks.objective(X, C, labels)).tobytes() == np.float64(
        reference.objective(X, C, labels)).tobytes()


def test_fast_distances_at_the_default_blocks_span_several():
    X, C = problem(3, 20000, 8, 10, "wide")
    assert same_bits(blocks.sq_distances(X, C), reference.sq_distances(X, C))


@settings(max_examples=40, deadline=None)
@given(arrays(np.float64, st.tuples(st.integers(1, 9), st.integers(1, 3)), elements=st.floats(-1e3, 1e3)),
       st.integers(1, 4), st.integers(1, 3))
def test_fast_distances_hypothesis(X, k, block):
    """Any points (Hypothesis), centroids among them and one ulp off them, blocks of ``block`` points; the
    centroids C-contiguous and Fortran-ordered (the textbook sums each layout in its own order)."""
    C = np.nextafter(X[:k], np.inf) if k <= len(X) else np.concatenate([X, X])[:k]
    out = np.empty((len(X), len(C)))
    blocks.contiguous_sq_distances(np.ascontiguousarray(X), np.ascontiguousarray(C), out, block)
    assert same_bits(out, reference.sq_distances(X, np.ascontiguousarray(C)))
    F = np.asfortranarray(C)
    blocks.transposed_sq_distances(np.ascontiguousarray(X), F, out, block)
    D = reference.sq_distances(X, F)
    assert same_bits(out, D)
    labels = np.arange(len(X)) % k
    assert same_bits(blocks.own_sq_distances(np.ascontiguousarray(X), F, labels), D[np.arange(len(X)), labels])


# --- windows ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("n,d,k", SHAPES)
def test_distance_and_circuit_uncertainty_are_their_formulas_bit_for_bit(small_blocks, kind, n, d, k):
    X, C = problem(n + 7 * k, n, d, k, kind)
    D = reference.sq_distances(X, C)
    offset = np.full(d, 0.3)
    for u in (checks.UNIT_ROUNDOFF, float(np.finfo(np.float32).eps) / 2):
        assert same_bits(checks.distance_uncertainty(X, C, D, offset, u),
                         distance_formula(X, C, D, offset, u))
        norms = np.linalg.norm(X, axis=1)
        assert same_bits(checks.distance_uncertainty(X, C, D, offset, u, norms),
                         distance_formula(X, C, D, offset, u, norms))
    for tie_break in (0.0, 1e-9, 3):
        got = checks.circuit_uncertainty(X, C, offset, 1.7, 3e-13, tie_break)
        assert same_bits(got, circuit_formula(X, C, offset, 1.7, 3e-13, tie_break))


def test_circuit_rows_on_demand_are_the_windows_entries():
    from analysis.pipeline import choose_sharpness, lloyd_scaling
    from circuits.encoding import encode
    from circuits.variants import get_variant

    X, C0 = problem(2, 50, 3, 3, "wide")
    sharpness, _ = choose_sharpness(X, [C0])
    circuit = get_variant("lloyd").build(3, 3, 2, sharpness=sharpness)
    encoded = encode(circuit.layout, X, C0, scaling=lloyd_scaling(X, C0))
    window = checks.circuit_window(circuit, encoded, 0)
    C = C0 + 0.5
    for C in (C, np.asfortranarray(C), encoded.C0[0]):
        full, lazy = window(C), windows.circuit_rows(window, C)
        assert isinstance(lazy, windows.RowsOnDemand)
        for i in (0, 7, 49, 7):
            for j in range(3):
                assert lazy[i, j].tobytes() == full[i, j].tobytes()


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("n,d,k", SHAPES)
def test_assign_within_is_the_whole_matrix_form(small_blocks, kind, n, d, k):
    X, C = problem(2 * n + k, n, d, k, kind)
    D = reference.sq_distances(X, C)
    rng = np.random.default_rng(n)
    for E in (np.zeros_like(D), checks.distance_uncertainty(X, C, D, np.zeros(d)),
              rng.random(D.shape) * np.median(D)):
        bias = rng.integers(0, 2, size=k) * 1e-3
        assert same_bits(blocks.assign_within_biased(D, bias, E), within_rule(D + bias, E))
        assert same_bits(blocks.assign_within_biased(D, None, E), within_rule(D, E))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("n,d,k", [(2, 1, 2), (37, 2, 3), (300, 8, 10), (257, 5, 33)])
@pytest.mark.parametrize("check", [Check.STEP])
def test_check_costs_finds_the_same_mismatches_and_ties(small_blocks, kind, n, d, k, check):
    X, C = problem(3 * n + k, n, d, k, kind)
    D = reference.sq_distances(X, C)
    rng = np.random.default_rng(k)
    cost = Costs(D, np.arange(k), np.zeros(k))
    E = checks.distance_uncertainty(X, C, D, np.zeros(d)) * 1e9  # wide: many columns near
    E_circuit = circuit_formula(X, C, np.zeros(d), 1.0, 1e-6, 1e-3)
    truth = within_rule(D, E)
    got = truth.copy()
    flip = rng.random(n) < 0.3
    got[flip] = rng.integers(0, k, size=int(flip.sum()))  # planted errors, ties and near ties among them
    margins = rng.random(n)
    at = At(5, 2, check)
    for tie_break in (0.0, 1e-2):
        for expected in (None, truth):
            rule = TieRule(0.0, 1.0, E, tie_break, E_circuit)
            new = check_costs(cost, got, margins, at, rule, expected)
            assert new == whole_matrix_check_costs(cost, got, margins, at, rule, expected)
            lazy = TieRule(0.0, 1.0, E, tie_break, windows.RowsOnDemand(lambda rows: E_circuit[rows]))
            assert check_costs(cost, got, margins, at, lazy, expected) == new
    # Without E (cosine costs): the bias window, as before.
    rule = TieRule(1e-9, 2.0, None, 0.0, None)
    bias_cost = Costs(D, np.arange(k), 1e-3 * np.arange(k))
    assert check_costs(bias_cost, got, margins, at, rule) == whole_matrix_check_costs(bias_cost, got, margins, at, rule)


# --- labels --------------------------------------------------------------------------


def test_labels_of_and_row_counts_are_the_row_reductions(small_blocks):
    rng = np.random.default_rng(5)
    for k in (1, 2, 3, 10, 33):
        labels = rng.integers(-1, k, size=500)
        R = one_hot(labels, k)
        R[3] = -0.0 * R[3]
        R[4, 0] = R[4, -1] = 1.0  # two ones
        R[5] = rng.random(k)  # soft rows
        R[6] = 0.5 / k
        R[7, 0] = np.nan
        R[8] = -1.0
        R[9, 0] = 1.0 + 1e-16
        R[10] = rng.random(k) * 1e16
        assert same_bits(blocks.labels_of(R), reference.labels_of(R))
        assert same_bits(blocks.labels_of(np.asfortranarray(R)), reference.labels_of(R))
        assert same_bits(blocks.labels_of(R.astype(np.float32)), reference.labels_of(R.astype(np.float32)))
        B = rng.random((77, k)) < 0.4
        assert np.array_equal(blocks.row_counts(B), B.sum(axis=1))
    assert same_bits(blocks.labels_of(np.zeros((0, 4))), reference.labels_of(np.zeros((0, 4))))


def test_one_hot_error_is_the_whole_difference(small_blocks):
    rng = np.random.default_rng(1)
    labels = rng.integers(-1, 4, size=50)
    Y = one_hot(labels, 4) + rng.normal(size=(50, 4)) * 1e-12
    last = Y.copy()
    last[-1, -1] += 0.5  # the largest difference in the last row of the last block
    nan = Y.copy()
    nan[-1, 0] = np.nan
    for M in (Y, one_hot(labels, 4), last, nan, -0.0 * one_hot(labels, 4), Y.astype(np.float32)):
        want = float(np.abs(M - one_hot(labels, 4)).max())
        assert np.float64(steps._one_hot_error(M, labels)).tobytes() == np.float64(want).tobytes()
    with pytest.raises(IndexError):  # a label beyond the columns, as one_hot
        steps._one_hot_error(Y, np.full(50, 4))
