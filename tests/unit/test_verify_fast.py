"""The verification's faster forms (issue 31, a million points) against the forms they replace, bit for bit.

Each rewritten function of :mod:`circuits.reference` (and :mod:`circuits.blockwise`), :mod:`circuits.memo`,
:mod:`analysis.verify.checks` (and :mod:`analysis.verify.windows`) and :mod:`analysis.verify.steps` is held here to
the code it replaced, copied below as it was (``old_*``): the same numbers compared as their bytes (``-0.0`` against
``0.0`` and NaN payloads included), the same labels, the same mismatches and ties. The problems are generated to reach the corners: exact ties (points on a small integer grid,
duplicated points, centroids on points), near ties a few ulps apart, empty clusters, float32 input, centroids that
are not C-contiguous (as a block's decoded input is), infinite and NaN distances, and blocks that end mid-problem
(the block sizes are made small by ``small_blocks``).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from analysis.verify import checks, steps, windows
from analysis.verify.checks import At, TieRule, check_costs
from analysis.verify.report import Check, Mismatch, MismatchKind, Tie
from circuits import blockwise, memo, reference
from circuits.onehot import one_hot
from circuits.reference import Costs, Reference

# --- the forms replaced, as they were ---------------------------------------------------------------------------


def old_sq_distances(X, C):
    X, C = np.asarray(X, dtype=np.float64), np.asarray(C, dtype=np.float64)
    out = np.empty((X.shape[0], C.shape[0]))
    for start in range(0, X.shape[0], 8192):
        diff = X[start : start + 8192, None, :] - C[None, :, :]
        out[start : start + 8192] = np.einsum("pcd,pcd->pc", diff, diff)
    return out


def old_assign_within(D, E, exact=None):
    rows = np.arange(D.shape[0])
    best = np.argmin(D, axis=1)
    candidate = D - D[rows, best][:, None] <= E + E[rows, best][:, None]
    return np.argmax(candidate, axis=1)


def old_filled_means(X, labels):
    inside = np.flatnonzero(labels >= 0)
    order = inside[np.argsort(labels[inside], kind="stable")]
    members, sorted_labels = X[order], labels[order]
    starts = np.flatnonzero(np.diff(sorted_labels)) + 1
    filled, means = [], []
    for lo, hi in zip([0, *starts.tolist()], [*starts.tolist(), len(order)]):
        if hi > lo:
            filled.append(sorted_labels[lo])
            means.append(members[lo:hi].sum(axis=0) / (hi - lo))
    return np.array(filled, dtype=np.intp), (np.array(means) if means else np.zeros((0, *X.shape[1:]), dtype=X.dtype))


def old_labels_of(R):
    R = np.asarray(R, dtype=np.float64)
    return np.where(R.sum(axis=1) > 0.5, R.argmax(axis=1), -1)


def old_distance_uncertainty(X, C, D, offset, u, x_norms=None):
    d = X.shape[1]
    mu = float(np.linalg.norm(offset))
    if x_norms is None:
        x_norms = np.linalg.norm(X, axis=1)
    represent = 8 * u * np.sqrt(d * D) * (x_norms[:, None] + np.linalg.norm(C, axis=1)[None, :] + 2 * mu)
    return represent + (d + 2) * checks.UNIT_ROUNDOFF * D


def old_circuit_uncertainty(X, C, offset, scale, gamma, tie_break, ux=None):
    if ux is None:
        ux = np.linalg.norm((X - offset) / scale, axis=1)
    uc = np.linalg.norm((C - offset) / scale, axis=1)
    m = 2 * ux[:, None] * uc[None, :] + uc[None, :] ** 2 + tie_break * np.arange(C.shape[0])[None, :]
    return gamma * scale**2 * m


def old_check_costs(cost, got, margins, at, rule, expected=None):
    E, E_circuit, tie_break_abs = rule.E, rule.E_circuit, rule.tie_break_abs
    layer, iteration, check = at.layer, at.iteration, at.check
    V, labels = cost.values, np.asarray(cost.labels)
    col_of = {int(label): c for c, label in enumerate(labels)}
    if expected is None:
        exp_col = np.argmin(V + cost.bias, axis=1) if E is None else old_assign_within(V + cost.bias, E)
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


def old_run(ref, X, C0, iterations):
    """Reference.run as it was: a one-hot matrix per step, its labels read back by labels_of."""
    X, C = np.asarray(X, dtype=np.float64), np.asarray(C0, dtype=np.float64).copy()
    cents, resps, objs = [C.copy()], [], []
    for t in range(iterations + 1):
        R = ref.assign(X, C, t)
        labels = old_labels_of(R) if ref.hard else None
        resps.append(labels if labels is not None and np.array_equal(one_hot(labels, C.shape[0]), R) else R)
        objs.append(ref.objective(X, C, R))
        if t < iterations:
            C = ref.update(X, R, C, t + 1)
            cents.append(C.copy())
    return np.stack(cents), resps, np.array(objs)


# --- problems ---------------------------------------------------------------------------------------------------


def same_bits(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


@pytest.fixture
def small_blocks(monkeypatch):
    """Blocks of a few rows, so that small problems end blocks mid-problem as a million points do."""
    monkeypatch.setattr(blockwise, "_DIFF_ELEMENTS", 7 * 3)
    monkeypatch.setattr(blockwise, "_WITHIN_ENTRIES", 13)
    monkeypatch.setattr(windows, "_FUSED_ENTRIES", 11)
    monkeypatch.setattr(memo, "_COMPARE_ELEMENTS", 5)
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
def test_sq_distances_are_the_broadcast_einsums_bit_for_bit(small_blocks, kind, n, d, k, layout):
    X, C = problem(n * d + k, n, d, k, kind)
    if layout == "F":
        C = np.asfortranarray(C)
    elif layout == "reversed":
        C = C[::-1]
    elif layout == "strided_points":
        X = np.repeat(X, 2, axis=0)[::2]
    assert same_bits(reference.sq_distances(X, C), old_sq_distances(X, C))
    with reference.memoised_distances():  # computed, then kept (or computed again): the old numbers each time
        first, again = reference.sq_distances(X, C), reference.sq_distances(X.copy(), C)
        other = reference.sq_distances(X, C.copy())  # a C-ordered copy of C: its own layout, its own numbers
    assert same_bits(first, old_sq_distances(X, C)) and same_bits(again, old_sq_distances(X, C))
    assert same_bits(other, old_sq_distances(X, C.copy()))


def test_sq_distances_at_the_default_blocks_span_several():
    X, C = problem(3, 20000, 8, 10, "wide")
    assert same_bits(reference.sq_distances(X, C), old_sq_distances(X, C))


# --- windows ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("n,d,k", SHAPES)
def test_distance_and_circuit_uncertainty_are_their_formulas_bit_for_bit(small_blocks, kind, n, d, k):
    X, C = problem(n + 7 * k, n, d, k, kind)
    D = old_sq_distances(X, C)
    offset = np.full(d, 0.3)
    for u in (checks.UNIT_ROUNDOFF, float(np.finfo(np.float32).eps) / 2):
        assert same_bits(checks.distance_uncertainty(X, C, D, offset, u),
                         old_distance_uncertainty(X, C, D, offset, u))
        norms = np.linalg.norm(X, axis=1)
        assert same_bits(checks.distance_uncertainty(X, C, D, offset, u, norms),
                         old_distance_uncertainty(X, C, D, offset, u, norms))
    for tie_break in (0.0, 1e-9, 3):
        got = checks.circuit_uncertainty(X, C, offset, 1.7, 3e-13, tie_break)
        assert same_bits(got, old_circuit_uncertainty(X, C, offset, 1.7, 3e-13, tie_break))


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
    D = old_sq_distances(X, C)
    rng = np.random.default_rng(n)
    for E in (np.zeros_like(D), checks.distance_uncertainty(X, C, D, np.zeros(d)),
              rng.random(D.shape) * np.median(D)):
        bias = rng.integers(0, 2, size=k) * 1e-3
        assert same_bits(blockwise.assign_within_biased(D, bias, E), old_assign_within(D + bias, E))
        assert same_bits(blockwise.assign_within_biased(D, None, E), old_assign_within(D, E))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("n,d,k", [(2, 1, 2), (37, 2, 3), (300, 8, 10), (257, 5, 33)])
@pytest.mark.parametrize("check", [Check.STEP])
def test_check_costs_finds_the_same_mismatches_and_ties(small_blocks, kind, n, d, k, check):
    X, C = problem(3 * n + k, n, d, k, kind)
    D = old_sq_distances(X, C)
    rng = np.random.default_rng(k)
    cost = Costs(D, np.arange(k), np.zeros(k))
    E = checks.distance_uncertainty(X, C, D, np.zeros(d)) * 1e9  # wide: many columns near
    E_circuit = old_circuit_uncertainty(X, C, np.zeros(d), 1.0, 1e-6, 1e-3)
    truth = old_assign_within(D, E)
    got = truth.copy()
    flip = rng.random(n) < 0.3
    got[flip] = rng.integers(0, k, size=int(flip.sum()))  # planted errors, ties and near ties among them
    margins = rng.random(n)
    at = At(5, 2, check)
    for tie_break in (0.0, 1e-2):
        for expected in (None, truth):
            rule = TieRule(0.0, 1.0, E, tie_break, E_circuit)
            new = check_costs(cost, got, margins, at, rule, expected)
            assert new == old_check_costs(cost, got, margins, at, rule, expected)
            lazy = TieRule(0.0, 1.0, E, tie_break, windows.RowsOnDemand(lambda rows: E_circuit[rows]))
            assert check_costs(cost, got, margins, at, lazy, expected) == new
    # Without E (cosine costs): the bias window, as before.
    rule = TieRule(1e-9, 2.0, None, 0.0, None)
    bias_cost = Costs(D, np.arange(k), 1e-3 * np.arange(k))
    assert check_costs(bias_cost, got, margins, at, rule) == old_check_costs(bias_cost, got, margins, at, rule)


# --- labels, means and the reference run --------------------------------------------------------------------------


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
        assert same_bits(reference.labels_of(R), old_labels_of(R))
        assert same_bits(reference.labels_of(np.asfortranarray(R)), old_labels_of(R))
        assert same_bits(reference.labels_of(R.astype(np.float32)), old_labels_of(R.astype(np.float32)))
        B = rng.random((77, k)) < 0.4
        assert np.array_equal(blockwise.row_counts(B), B.sum(axis=1))
    assert same_bits(reference.labels_of(np.zeros((0, 4))), old_labels_of(np.zeros((0, 4))))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("k", [1, 3, 300, 70000])
def test_cluster_means_are_the_sorted_sums_bit_for_bit(kind, k):
    X, _ = problem(k, 2000, 4, 2, kind)
    rng = np.random.default_rng(k)
    labels = rng.integers(-1, min(k, 40), size=len(X)) * max(1, k // 40)  # empty clusters, labels up to k
    labels[labels >= k] = k - 1
    filled, means = reference._filled_means(X, labels)
    old_filled, old_means = old_filled_means(X, labels)
    assert same_bits(filled, old_filled) and same_bits(means, old_means)
    one = X[:, :1].copy()  # one coordinate: numpy's sum is pairwise there, not sequential
    assert all(map(same_bits, reference._filled_means(one, labels), old_filled_means(one, labels)))


def reference_cases():
    from circuits.variants.damped import DampedKMeans
    from circuits.variants.spherical import SphericalKMeans
    from circuits.variants.trimmed import TrimmedKMeans

    return [Reference(), Reference(tie_break=0.25), TrimmedKMeans(theta=1.5), DampedKMeans(eta=0.5),
            SphericalKMeans()]


@pytest.mark.parametrize("case", range(5))
@pytest.mark.parametrize("kind", ["grid", "near", "float32"])
def test_reference_run_is_the_one_hot_run(small_blocks, case, kind):
    ref = reference_cases()[case]
    X, C0 = problem(case, 120, 3, 4, kind)
    C0[-1] = 50.0  # a far centroid: an empty cluster
    if case == 4:  # spherical k-means: no point at the origin
        X = X + 7.0
    trace = ref.run(X, C0, 4)
    cents, resps, objs = old_run(ref, X, C0, 4)
    assert same_bits(trace.centroids, cents) and same_bits(trace.objectives, objs)
    assert all(same_bits(a, b) for a, b in zip(trace.assignments, resps))


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


# --- the memo's points --------------------------------------------------------------------------------------------


def test_memo_matches_points_by_bytes_then_by_value(small_blocks):
    X = np.random.default_rng(2).normal(size=(40, 3))
    with reference.memoised_distances():
        state = memo._DISTANCE_MEMO.get()
        assert memo._memo_points(state, X, add=True) == 0
        assert memo._memo_points(state, X.copy(), add=False) == 0
        zeros = X.copy()
        zeros[0, 0] = 0.0
        assert memo._memo_points(state, zeros, add=True) == 1
        negated = zeros.copy()
        negated[0, 0] = -0.0  # other bytes, equal values: the earlier set
        assert memo._memo_points(state, negated, add=False) == 1
        edited = X.copy()
        edited[-1, -1] = np.nextafter(edited[-1, -1], np.inf)  # the last element of the last block
        assert memo._memo_points(state, edited, add=False) is None
        nan = X.copy()
        nan[5, 1] = np.nan
        assert memo._memo_points(state, nan, add=True) == 2 and memo._memo_points(state, nan.copy(), add=False) == 2
        mine = X + 1.0
        assert memo._memo_points(state, mine, add=True) == 3
        mine[0, 0] += 1.0  # the caller edits the array it handed over: the memo's copy is its own
        assert memo._memo_points(state, mine, add=False) is None
        assert memo._memo_points(state, X + 1.0, add=False) == 3
        assert memo._memo_points(state, X[:, ::-1].copy()[:, ::-1], add=False) == 0  # not C-contiguous
