"""The reference at the data's precision: its definition (:mod:`circuits.precision`) against hand computations and
against moving the inputs themselves, and its fast form (:mod:`analysis.verify.fast.certified`) against it.

Independent checks of the tie bound ``W = L + R``: every real input within half an ulp of the float64 inputs moves a
gap by at most ``W`` (moves drawn at random, exact rationals, the centroids recomputed as the means of their moved
members), and the move that pushes every input against the gap's sign reaches ``L`` to within ``R`` (the bound is
tight). The fast run is held to the definition's labels, ties and correctly rounded centroids on problems built to
meet ties: integer grids, one-decimal data, points a few ulps off a bisector, duplicates, empty clusters, offsets.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from analysis.verify.fast import certified
from analysis.verify.fast.certified import certified_run
from analysis.verify.fast.exact_sums import Split, cluster_sums
from circuits import precision
from circuits.reference import Reference

# --- problems ----------------------------------------------------------------------------------------------------


def ulps_off(x: float, k: int) -> float:
    """``x`` moved ``k`` float64 steps (up for k > 0)."""
    for _ in range(abs(k)):
        x = float(np.nextafter(x, np.inf if k > 0 else -np.inf))
    return x


@st.composite
def tie_problems(draw, max_n: int = 14):
    """Problems that meet ties: integer grids, one to three decimals, a few ulps off a bisector; an offset."""
    kind = draw(st.sampled_from(["grid", "decimal", "ulps"]))
    n = draw(st.integers(3, max_n))
    d = draw(st.integers(1, 3))
    k = draw(st.integers(1, min(4, n)))
    if kind == "grid":
        X = np.array(draw(st.lists(st.lists(st.integers(-3, 3), min_size=d, max_size=d), min_size=n, max_size=n)),
                     dtype=np.float64)
    elif kind == "decimal":
        digits = draw(st.integers(1, 3))
        X = np.array([[float(f"{v / 10**digits:.{digits}f}") for v in row] for row in draw(
            st.lists(st.lists(st.integers(-30, 30), min_size=d, max_size=d), min_size=n, max_size=n))])
    else:
        s = draw(st.sampled_from([1.0, 0.3, 1000.0]))
        X = np.array([[ulps_off(s, draw(st.integers(-3, 3))), *([0.5] * (d - 1))] for _ in range(n)])
        X[: n // 3, 0] = -s
        X[n // 3 : 2 * n // 3, 0] = 3 * s
        k = min(k, 2)
    X = X + draw(st.sampled_from([0.0, 0.0, 100.0]))
    C0 = X[draw(st.permutations(range(n)))[:k]].copy()
    if k > 1 and draw(st.booleans()):
        C0[-1] = X.max(axis=0) + 1000.0  # far away: an empty cluster
    return X, C0


def same_ties(a: list[list[precision.Tie]], b: list[list[precision.Tie]]) -> bool:
    return [[(t.point, t.iteration, t.candidates, t.chosen, t.nearest, t.gaps, t.bounds) for t in ts] for ts in a] == \
        [[(t.point, t.iteration, t.candidates, t.chosen, t.nearest, t.gaps, t.bounds) for t in ts] for ts in b]


# --- the definition --------------------------------------------------------------------------------------------------


def test_the_issue_example_by_hand():
    """(1.000000000000001, 0.3) between initial centroids (0, 0) and (2, 0): the exact gap is 20 ulps of 1 (4.4e-15);
    the point may move by 2^-53 in x, the centroid at 2 by 2^-52, the one at 0 by the smallest subnormal's half:
    L = 4 * 2^-53 + 2 (2 - x) 2^-52 + (terms below 2^-1070), about 8.9e-16, so the data decides it."""
    x = 1.000000000000001
    assert x == 1 + 5 * 2.0**-52
    X, C0 = np.array([[x, 0.3]]), np.array([[0.0, 0.0], [2.0, 0.0]])
    run = precision.lloyd_at_data_precision(X, C0, 0)
    assert run.labels == [[1]] and run.ties == [[]]
    xe = [Fraction(x), Fraction(0.3)]
    gap = (xe[0] ** 2 + xe[1] ** 2) - ((xe[0] - 2) ** 2 + xe[1] ** 2)
    assert gap == 20 * Fraction(2) ** -52  # nearer to (2, 0) by 4.4e-15
    h = [Fraction(2) ** -53, Fraction(2) ** -55]  # half ulps of x and 0.3
    tiny = Fraction(2) ** -1075  # half the smallest subnormal: the half ulp of 0
    L = 4 * h[0] + 2 * (xe[0] * tiny + xe[1] * tiny) + 2 * ((2 - xe[0]) * Fraction(2) ** -52 + xe[1] * tiny)
    # The rest: |dc_b - dc_a| times |2 dx - dc_a - dc_b|, coordinate by coordinate.
    R = (tiny + Fraction(2) ** -52) * (2 * h[0] + tiny + Fraction(2) ** -52) + (2 * tiny) * (2 * h[1] + 2 * tiny)
    xs, hs = precision.exact(X)[0], precision.half_ulps(X)[0]
    C, H = precision.exact(C0), precision.half_ulps(C0)
    w = np.full(2, Fraction(0), dtype=object)
    assert precision.pair_bound(xs, hs, 0, 1, precision.Columns.lloyd(2), C, H, w) == L + R
    assert 4 * (L + R) < gap  # decided, and still decided with the bound widened 4x


def test_iris_decimal_ties_are_ties():
    """Iris points 116 and 137 are exactly equidistant (0.78 = 0.78, 0.90 = 0.90) from initial centroids 0 and 2 in
    the published decimals; in binary they differ by 4.9e-32 and 3.6e-16, within what the data's precision moves."""
    from sklearn.datasets import load_iris

    from circuits.initialisation import initial_centroids

    X = load_iris().data
    run = precision.lloyd_at_data_precision(X, initial_centroids(X, 3, "random", 0), 1)
    tied = {tie.point: tie for tie in run.ties[0]}
    for i in (116, 137):
        assert tied[i].candidates == (0, 2) and tied[i].chosen == 0 and tied[i].nearest == 2
        assert 0 < max(tied[i].gaps) <= max(tied[i].bounds)
        assert run.labels[0][i] == 0


def _moved(values: np.ndarray, half: np.ndarray, signs: np.ndarray) -> np.ndarray:
    return values + signs * half


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tie_problems(max_n=8), st.integers(0, 2**32 - 1))
def test_the_bound_holds_every_move_and_is_reached(problem, seed):
    """Move every input (points and initial centroids) within half an ulp, recompute the exact run's centroids as
    the means of their members (the reference's memberships), and every gap moves by at most ``W``; the move that
    pushes each input against the gap's first-order sign moves it by at least ``L - R``."""
    X, C0 = problem
    T = 2
    run = precision.lloyd_at_data_precision(X, C0, T)
    x, h, c0, hc = precision.exact(X), precision.half_ulps(X), precision.exact(C0), precision.half_ulps(C0)
    rng = np.random.default_rng(seed)
    columns = precision.Columns.lloyd(len(C0))

    def centroids(xm, cm, t):
        C = cm.copy()
        for s in range(t):
            for j in range(len(C)):
                members = [i for i in range(len(X)) if run.labels[s][i] == j]
                if members:
                    C[j] = xm[members].sum(axis=0) / len(members)
        return C

    for t in range(T + 1):
        C = run.centroids[t]
        H, w = _moves(run, h, hc, t)
        for i in range(len(X)):
            for a in range(len(C)):
                for b in range(a + 1, len(C)):
                    gap = ((x[i] - C[a]) ** 2).sum() - ((x[i] - C[b]) ** 2).sum()
                    W = precision.pair_bound(x[i], h[i], a, b, columns, C, H, w[i])
                    signs = [rng.choice([-1, 0, 1], size=x.shape), rng.choice([-1, 1], size=c0.shape)]
                    xm, cm = _moved(x, h, signs[0]), _moved(c0, hc, signs[1])
                    Cm = centroids(xm, cm, t)
                    moved = ((xm[i] - Cm[a]) ** 2).sum() - ((xm[i] - Cm[b]) ** 2).sum()
                    assert abs(moved - gap) <= W
                    # Against the first-order sign of every input: the gap moves by at least L - R = W - 2 R.
                    sx, sc = _against(x, c0, run, t, i, a, b)
                    xm, cm = _moved(x, h, sx), _moved(c0, hc, sc)
                    Cm = centroids(xm, cm, t)
                    moved = ((xm[i] - Cm[a]) ** 2).sum() - ((xm[i] - Cm[b]) ** 2).sum()
                    L, R = precision.pair_terms(x[i], h[i], a, b, columns, C, H, w[i])
                    assert abs(moved - gap) >= L - R


def _moves(run, h, hc, t):
    """How far each centroid at ``t`` may move and each point's weight in it, from the run's memberships."""
    n, k = h.shape[0], hc.shape[0]
    H, w = hc.copy(), np.full((n, k), Fraction(0), dtype=object)
    for s in range(t):
        for j in range(k):
            members = [i for i in range(n) if run.labels[s][i] == j]
            if members:
                H[j] = h[members].sum(axis=0) / len(members)
                w[:, j] = Fraction(0)
                w[members, j] = Fraction(1, len(members))
    return H, w


def _against(x, c0, run, t, i, a, b):
    """Signs for every input that make the first-order move of gap ``cost_a - cost_b`` of point ``i`` at ``t`` as
    negative as it goes (each input's derivative, computed from the memberships by the chain rule)."""
    n, d = x.shape
    k = c0.shape[0]
    grad_x = np.full((n, d), Fraction(0), dtype=object)
    grad_c0 = np.full((k, d), Fraction(0), dtype=object)
    C = run.centroids[t]
    for label, sign in ((a, 1), (b, -1)):
        away = x[i] - C[label]  # d cost / d x_i = 2 (x - c), d cost / d c = -2 (x - c)
        grad_x[i] = grad_x[i] + sign * 2 * away
        made = [s for s in range(t) if any(run.labels[s][p] == label for p in range(n))]
        if made:
            members = [p for p in range(n) if run.labels[made[-1]][p] == label]
            for p in members:
                grad_x[p] = grad_x[p] - sign * 2 * away / len(members)
        else:
            grad_c0[label] = grad_c0[label] - sign * 2 * away
    gap = ((x[i] - C[a]) ** 2).sum() - ((x[i] - C[b]) ** 2).sum()
    direction = -1 if gap >= 0 else 1
    sign = lambda g: np.vectorize(lambda v: direction * (1 if v > 0 else -1 if v < 0 else 0))(g)  # noqa: E731
    return sign(grad_x), sign(grad_c0)


@pytest.mark.parametrize("s", [1.0, 0.3, 1000.0, 2.0**-30])
def test_the_bound_is_tight_off_a_bisector(s):
    """A point k ulps above x = s, between initial centroids a = -s and b = 3s (as float64 rounds it), second
    coordinate s / 2 for all: by hand, the gap is (x - a)^2 - (x - b)^2 and the bound L = 2 (b - a) h(x) + 2 (x - a)
    h(a) + 2 (b - x) h(b) (plus R, of the order of the squared ulp). The definition ties exactly where that says,
    and some k lies between L and 4 L: a bound widened 4x would tie a comparison the data decides."""
    h = lambda v: Fraction(float(np.spacing(abs(v)))) / 2  # noqa: E731
    a, b = -s, 3 * s
    A, B = Fraction(a), Fraction(b)
    between = []
    for k in range(1, 9):
        x = ulps_off(s, k)
        X = np.array([[x, s / 2]])
        run = precision.lloyd_at_data_precision(X, np.array([[a, s / 2], [b, s / 2]]), 0)
        gap = abs((Fraction(x) - A) ** 2 - (Fraction(x) - B) ** 2)
        L = 2 * (B - A) * h(x) + 2 * (Fraction(x) - A) * h(a) + 2 * (B - Fraction(x)) * h(b)
        # The rest: |dc_b - dc_a| times |2 dx - dc_a - dc_b|, coordinate by coordinate.
        R = (h(a) + h(b)) * (2 * h(x) + h(a) + h(b)) + (2 * h(s / 2)) * (4 * h(s / 2))
        assert bool(run.ties[0]) == (gap <= L + R)
        between.append(L + R < gap <= 4 * (L + R))
    assert any(between)


# --- the fast form --------------------------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tie_problems(), st.integers(0, 3))
@example((np.array([[0.0, 0.0], [2.0, 0.0], [1.000000000000001, 0.3]]), np.array([[0.0, 0.0], [2.0, 0.0]])), 1)
@example((np.array([[6.0, 12.0], [0, 9], [9, 6], [9, 0], [6, 0], [6, 9]]), np.array([[0.0, 9.0], [6, 9]])), 1)
def test_the_fast_run_is_the_definition(problem, iterations):
    X, C0 = problem
    slow = precision.lloyd_at_data_precision(X, C0, iterations)
    for filtered in (True, False):
        fast = certified_run(Reference(), X, C0, iterations, filtered=filtered)
        assert fast.trace.assignments.tolist() == slow.labels
        assert fast.trace.centroids.tobytes() == slow.float_centroids().tobytes()
        assert same_ties(fast.ties, slow.ties)


def high_dimensional_near_ties(seed: int, count: int = 40) -> tuple[np.ndarray, np.ndarray]:
    """Points a few 1e-15 off the bisector of two centroids in 10 to 40 dimensions: float64's rounding of a squared
    distance there exceeds what the data's precision moves it, so float64's order is sometimes not exact
    arithmetic's while the data decides it (what the filter's rounding term ``E`` is for)."""
    rng = np.random.default_rng(seed)
    d = int(rng.integers(10, 40))
    a, b = rng.uniform(-1, 1, d), rng.uniform(-1, 1, d)
    u = (b - a) / np.linalg.norm(b - a)
    rows = []
    for _ in range(count):
        v = rng.normal(size=d)
        v -= v.dot(u) * u
        rows.append((a + b) / 2 + v * rng.uniform(0, 3) + u * rng.normal() * 1e-15)
    return np.array(rows), np.stack([a, b])


def decimal_ties_far_out(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """One-decimal points around 1e6, a third of them on the bisector of two initial centroids: their decimal ties
    are ties at the data's precision whose binary gaps exceed float64's rounding of the distances (what the
    filter's share of the tie bound ``W^`` is for)."""
    rng = np.random.default_rng(seed)
    X = rng.integers(-20, 21, size=(40, 2)) / 10
    X[::3, 0] = 0.2  # on the bisector of -0.1 and 0.5: 7e-11 apart in binary, about 1e6
    C0 = np.array([[-0.1, 0.0], [0.5, 0.0], [0.0, 1.7]])
    return X + 1e6, C0 + 1e6


@pytest.mark.parametrize("family", [high_dimensional_near_ties, decimal_ties_far_out])
def test_the_filter_keeps_what_float64_misorders_and_every_tie(family):
    misordered = ties = 0
    for seed in range(6):
        X, C0 = family(seed)
        slow = precision.lloyd_at_data_precision(X, C0, 1)
        fast = certified_run(Reference(), X, C0, 1)
        assert fast.trace.assignments.tolist() == slow.labels
        assert fast.trace.centroids.tobytes() == slow.float_centroids().tobytes()
        assert same_ties(fast.ties, slow.ties)
        from circuits.reference import sq_distances

        misordered += int((np.argmin(sq_distances(X, C0), axis=1) != np.array(slow.labels[0])).sum())
        ties += len(slow.ties[0])
    assert misordered if family is high_dimensional_near_ties else ties  # the family meets what it is for


def test_blocks_of_one_point(monkeypatch):
    monkeypatch.setattr(certified, "BLOCK", 1)
    X = np.array([[0.0, 0.0], [2.0, 0.0], [ulps_off(1.0, 1), 0.3], [ulps_off(1.0, -2), 0.1], [5, 5], [5, 5]])
    C0 = X[[0, 1, 4]]
    slow = precision.lloyd_at_data_precision(X, C0, 2)
    fast = certified_run(Reference(), X, C0, 2)
    assert fast.trace.assignments.tolist() == slow.labels and same_ties(fast.ties, slow.ties)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tie_problems(), st.sampled_from([0.5, 2.0, 9.0]))
def test_the_fast_trimmed_run_is_the_definition(problem, theta):
    from circuits.variants.trimmed import TrimmedKMeans

    X, C0 = problem
    ref = TrimmedKMeans(theta=theta, sink_tie_break=1e-9)
    slow = precision.lloyd_at_data_precision(X, C0, 2, precision.Columns.trimmed(len(C0), theta, 1e-9))
    for filtered in (True, False):
        fast = certified_run(ref, X, C0, 2, filtered=filtered)
        assert fast.trace.assignments.tolist() == slow.labels
        assert fast.trace.centroids.tobytes() == slow.float_centroids().tobytes()
        assert same_ties(fast.ties, slow.ties)


def certified_references():
    from circuits.variants.damped import DampedKMeans
    from circuits.variants.gumbel import GumbelKMeans
    from circuits.variants.sparse import SparseKMeans
    from circuits.variants.trimmed import TrimmedKMeans

    return {"lloyd": Reference(), "tie-break": Reference(tie_break=1e-9), "trimmed": TrimmedKMeans(
        theta=2.0, sink_tie_break=1e-9), "damped": DampedKMeans(eta=0.6), "sparse": SparseKMeans(gamma=5.0),
        "gumbel": GumbelKMeans(gamma=2.0)}


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tie_problems(), st.sampled_from(["damped", "sparse", "gumbel"]))
def test_the_filter_changes_nothing_for_other_updates(problem, variant):
    """References whose update is not a plain mean (their centroids as float64 computes them): the float64 filter
    decides exactly what deciding every point in exact arithmetic decides."""
    X, C0 = problem
    runs = [certified_run(certified_references()[variant], X, C0, 2, filtered=f) for f in (True, False)]
    assert runs[0].trace.assignments.tolist() == runs[1].trace.assignments.tolist()
    assert runs[0].trace.centroids.tobytes() == runs[1].trace.centroids.tobytes()
    assert same_ties(runs[0].ties, runs[1].ties)


@pytest.mark.parametrize("name", ["lloyd", "tie-break", "trimmed", "damped", "sparse", "gumbel"])
@pytest.mark.parametrize("layout", ["C", "F", "reversed"])
def test_the_runs_costs_are_the_references_bit_for_bit(name, layout):
    """What the run assigns with and the step-wise checks compare (:meth:`CertifiedRun.costs`, from the fast
    distances) is the reference's own ``costs``: values, labels and biases, for centroids laid out as the run
    holds them, as a block's decoded input is (Fortran order) and as a strided view."""
    ref = certified_references()[name]
    rng = np.random.default_rng(7)
    X = rng.normal(size=(3000, 5)) * 10.0 ** rng.integers(-4, 4, size=(3000, 1))
    X[::5] = rng.integers(-2, 3, size=X[::5].shape)  # exact ties among small integers
    C = X[[1, 5, 10, 17]] + np.array([[0.0], [0.5], [1e-3], [0.0]])
    C = {"C": C, "F": np.asfortranarray(C), "reversed": C[::-1]}[layout]
    run = certified_run(ref, X, C, 0)
    got, want = run.costs(X, C), ref.costs(X, C, 1)
    for a, b in ((got.values, want.values), (got.labels, want.labels), (got.bias, want.bias)):
        assert np.asarray(a).tobytes() == np.asarray(b).tobytes()


def test_means_are_exact_where_float64_sums_are_not():
    """A cluster {1e16, 1, -1e16, 2}: float64 sums it in order to 2 (1e16 + 1 rounds to 1e16), exactly it is 3. The
    run's centroid is the exact mean 0.75, not 0.5."""
    X = np.array([[1e16], [1.0], [-1e16], [2.0], [1e18]])
    C0 = np.array([[0.0], [1e18]])
    sums = cluster_sums(Split.of(X), np.array([0, 0, 0, 0, 1]), 2)
    assert sums.mean(0)[0] == Fraction(3, 4) and sums.rounded_means()[0, 0] == 0.75
    assert ((1e16 + 1.0) - 1e16 + 2.0) / 4 == 0.5  # what a float64 sum in order gives
    run = certified_run(Reference(), X, C0, 1)
    assert run.trace.assignments[0].tolist() == [0, 0, 0, 0, 1]
    assert run.trace.centroids[1, 0, 0] == 0.75
    assert precision.lloyd_at_data_precision(X, C0, 1).centroids[1][0, 0] == Fraction(3, 4)


def test_exact_sums_reach_every_exponent():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(500, 3)) * 10.0 ** rng.integers(-300, 300, size=(500, 3))
    X[::7] = 0.0
    X[::11, 0] = 5e-324 * rng.integers(-100, 100, size=X[::11, 0].shape)
    X[::13, 1] = -0.0
    labels = rng.integers(-1, 4, size=500)
    sums = cluster_sums(Split.of(X), labels, 4)
    for j in range(4):
        members = labels == j
        exact = [sum((Fraction(v) for v in X[members, m]), Fraction(0)) / members.sum() for m in range(3)]
        assert list(sums.mean(j)) == exact
        assert [float(v) for v in exact] == sums.rounded_means()[j].tolist()
        assert list(sums.mean_half_ulp(j)) == list(precision.half_ulps(X[members]).sum(axis=0) / members.sum())
