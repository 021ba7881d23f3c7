"""The prover's exact algebra against independent oracles: an LP for feasibility, exact evaluation for identities."""

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import linprog

from analysis.proof.algebra import Lin, Poly, Sign, strict_witness, strictly_feasible
from analysis.proof.identity import GatedTerm, prove_piecewise_identity

VARS = ("a", "b", "c")


def lin(coeffs, const=0):
    return Lin.of({v: Fraction(c) for v, c in coeffs.items()}, Fraction(const))


@st.composite
def systems(draw):
    n = draw(st.integers(1, 6))
    rows = []
    for _ in range(n):
        coeffs = {v: draw(st.integers(-3, 3)) for v in VARS}
        rows.append(lin(coeffs, draw(st.integers(-3, 3))))
    return rows


def lp_strictly_feasible(rows) -> bool:
    """max t s.t. g(v) >= t for every row, t <= 1: the open system is feasible iff the optimum is positive."""
    A = [[-float(g.coeffs.get(v, 0)) for v in VARS] + [1.0] for g in rows]
    b = [float(g.const) for g in rows]
    res = linprog(c=[0, 0, 0, -1], A_ub=A, b_ub=b, bounds=[(None, None)] * 3 + [(None, 1)], method="highs")
    return res.status == 0 and -res.fun > 1e-9


@settings(max_examples=200, deadline=None)
@given(systems())
def test_fourier_motzkin_agrees_with_linear_programming(rows):
    feasible = strictly_feasible(rows)
    assert feasible == lp_strictly_feasible(rows)
    # A feasible system comes with an exact witness; an infeasible one with none.
    point = strict_witness(rows)
    assert (point is not None) == feasible
    if point is not None:
        assert all(g.evaluate({v: point.get(v, Fraction(0)) for v in VARS}) > 0 for g in rows)


def test_known_identities_hold_and_near_misses_fail():
    s, c, n = lin({"s": 1}), lin({"c": 1}), lin({"n": 1})
    free = {"s": Sign.FREE, "c": Sign.FREE, "n": Sign.NONNEG}
    one = lin({}, 1)
    # relu(s - c) - relu(c - s) = s - c for all reals.
    terms = [GatedTerm(Fraction(1), s - c, one, 0), GatedTerm(Fraction(-1), c - s, one, 1)]
    assert prove_piecewise_identity(terms, Fraction(0), (s - c).to_poly(), free).holds
    # relu(s) s + relu(-s)(-s) = s^2: the gated square.
    sq = [GatedTerm(Fraction(1), s, s, 0), GatedTerm(Fraction(1), -s, -s, 1)]
    assert prove_piecewise_identity(sq, Fraction(0), Poly.var("s") * Poly.var("s"), free).holds
    # relu(n) = n needs n >= 0: true on the domain, false on the reals.
    assert prove_piecewise_identity([GatedTerm(Fraction(1), n, one, 0)], Fraction(0), Poly.var("n"), free).holds
    result = prove_piecewise_identity([GatedTerm(Fraction(1), n, one, 0)], Fraction(0), Poly.var("n"), {"n": Sign.FREE})
    assert not result.holds and "n < 0" in result.counterexample
    # A wrong coefficient, a missing unit, a constant offset: each is refuted.
    wrong = [GatedTerm(Fraction(1), s, s, 0), GatedTerm(Fraction(2), -s, -s, 1)]
    assert not prove_piecewise_identity(wrong, Fraction(0), Poly.var("s") * Poly.var("s"), free).holds
    assert not prove_piecewise_identity(sq[:1], Fraction(0), Poly.var("s") * Poly.var("s"), free).holds
    assert not prove_piecewise_identity(sq, Fraction(1, 3), Poly.var("s") * Poly.var("s"), free).holds


def test_independent_components_are_proven_separately():
    """sum_m relu(s_m) s_m + relu(-s_m)(-s_m) = sum_m s_m^2 with 40 variables: 2^40 sign patterns, 80 cells."""
    terms, target = [], Poly()
    for m in range(40):
        s = lin({f"s{m}": 1})
        terms += [GatedTerm(Fraction(1), s, s, 2 * m), GatedTerm(Fraction(1), -s, -s, 2 * m + 1)]
        target = target + Poly.var(f"s{m}") * Poly.var(f"s{m}")
    result = prove_piecewise_identity(terms, Fraction(0), target, {f"s{m}": Sign.FREE for m in range(40)})
    assert result.holds and result.cells == 80


@st.composite
def gated_sums(draw):
    """Plain numbers only: the prover's objects are built from them outside the strategy (:func:`build_gated_sum`),
    because the run-time type checker samples containers with the ``random`` module, which a strategy must not use."""
    coefficients = st.tuples(st.tuples(st.integers(-2, 2), st.integers(-2, 2)), st.integers(-1, 1))
    terms = draw(st.lists(st.tuples(coefficients, coefficients, st.integers(-2, 2)), min_size=1, max_size=4))
    # Intended: the polynomial of one chosen activity pattern (often, but not always, the right answer).
    active = draw(st.lists(st.booleans(), min_size=len(terms), max_size=len(terms)))
    signs = draw(st.tuples(*[st.sampled_from([Sign.FREE, Sign.NONNEG])] * 2))
    return terms, active, signs


def build_gated_sum(case):
    drawn, active, signs = case
    terms = [GatedTerm(Fraction(weight), lin(dict(zip(VARS[:2], gate[0])), gate[1]),
                       lin(dict(zip(VARS[:2], linear[0])), linear[1]), u)
             for u, (gate, linear, weight) in enumerate(drawn)]
    intended = Poly()
    for t, on in zip(terms, active):
        if on:
            intended = intended + (t.gate.to_poly() * t.linear.to_poly()).scale(t.weight)
    return terms, intended, dict(zip(VARS[:2], signs))


def evaluate(terms, intended, point):
    value = sum((t.weight * max(t.gate.evaluate(point), Fraction(0)) * t.linear.evaluate(point) for t in terms), Fraction(0))
    target = sum((c * np.prod([point[v] for v in m]) if m else c for m, c in intended.terms.items()), Fraction(0))
    return value - target


@settings(max_examples=100, deadline=None)
@given(gated_sums())
def test_piecewise_prover_agrees_with_exact_evaluation(case):
    terms, intended, domain = build_gated_sum(case)
    result = prove_piecewise_identity(terms, Fraction(0), intended, domain)
    rng = np.random.default_rng(0)
    diffs = []
    for _ in range(200):
        point = {}
        for v in VARS[:2]:
            x = Fraction(int(rng.integers(-40, 41)), int(rng.integers(1, 9)))
            point[v] = abs(x) if domain[v] == Sign.NONNEG else x
        diffs.append(evaluate(terms, intended, point))
    if result.holds:
        assert all(d == 0 for d in diffs)
    else:
        # The prover's witness lies in the open cell it names, and there the two sides differ.
        assert all(g.evaluate(result.witness) > 0 for g in result.cell)
        point = {v: result.witness.get(v, Fraction(0)) for v in VARS[:2]}
        assert evaluate(terms, intended, point) != 0, result.counterexample


def test_poly_arithmetic():
    x, y = Poly.var("x"), Poly.var("y")
    p = (x + y) * (x - y)
    assert p == x * x - y * y
    assert (p - x * x + y * y).is_zero()
    assert str(Poly.const(Fraction(1, 2)) + x) == "1/2 + x"
    with pytest.raises(ValueError):
        lin({}, 0).canonical()
