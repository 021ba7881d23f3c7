"""Exact algebra for the prover: rational linear forms, quadratic polynomials, and piecewise-linear identities.

Everything here is exact (``fractions.Fraction``; a float64 weight converts to a Fraction without rounding). The
MLPs of the circuit compute sums of ``relu(g . v) * (l . v)`` with linear ``g`` and ``l``; to prove such a sum equals
an intended polynomial on a domain, :func:`prove_piecewise_identity` splits the domain into the open cells of the
hyperplane arrangement ``{g = 0}`` (deciding which cells exist exactly, with Fourier-Motzkin elimination) and, in
each cell, compares polynomials coefficient by coefficient.

Why cells are enough: both sides are continuous, the domain is a product of lines and closed half-lines (the
closure of its interior), and the open cells cover that interior up to a set with empty interior. A polynomial
identity that holds on every open cell therefore holds on the whole domain, boundaries included. On an open cell a
polynomial vanishes iff all its coefficients do, so each cell is one exact coefficient comparison.

Variables that do not interact are proven separately: the sum is split into *components* (connected groups of
variables that share a unit or an intended monomial), each component must match up to a constant, and the constants
must add up. This keeps the cost linear in ``d`` for the update MLP (``d`` independent squares) instead of ``2^d``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from fractions import Fraction
from collections.abc import Iterable, Mapping

#: A monomial: sorted tuple of variable names (with repetition); () is the constant monomial.
Monomial = tuple[str, ...]

ZERO = Fraction(0)
ONE = Fraction(1)



class Sign(Enum):
    """Sign constraint of a variable of the domain."""

    FREE = "free"  # any real
    NONNEG = "nonneg"  # >= 0


def exact(value) -> Fraction:
    """The exact rational value of a float (or int, or Fraction)."""
    if isinstance(value, Fraction):
        return value
    return Fraction(float(value)) if not isinstance(value, int) else Fraction(value)


@dataclass(frozen=True)
class Lin:
    """An affine form ``sum_v coeffs[v] * v + const`` with exact coefficients (zero coefficients never stored)."""

    coeffs: Mapping[str, Fraction] = field(default_factory=dict)
    const: Fraction = ZERO

    @staticmethod
    def of(coeffs: Mapping[str, Fraction], const: Fraction = ZERO) -> "Lin":
        return Lin({v: c for v, c in coeffs.items() if c != 0}, Fraction(const))

    @property
    def variables(self) -> frozenset[str]:
        return frozenset(self.coeffs)

    def is_constant(self) -> bool:
        return not self.coeffs

    def scale(self, a: Fraction) -> "Lin":
        return Lin.of({v: a * c for v, c in self.coeffs.items()}, a * self.const)

    def __add__(self, other: "Lin") -> "Lin":
        out = dict(self.coeffs)
        for v, c in other.coeffs.items():
            out[v] = out.get(v, ZERO) + c
        return Lin.of(out, self.const + other.const)

    def __neg__(self) -> "Lin":
        return self.scale(Fraction(-1))

    def __sub__(self, other: "Lin") -> "Lin":
        return self + (-other)

    def evaluate(self, point: Mapping[str, Fraction]) -> Fraction:
        return self.const + sum((c * point[v] for v, c in self.coeffs.items()), ZERO)

    def to_poly(self) -> "Poly":
        out = {(v,): c for v, c in self.coeffs.items()}
        if self.const:
            out[()] = self.const
        return Poly(out)

    def canonical(self) -> tuple["Lin", int]:
        """``(h, sign)`` with ``self == sign * positive multiple of h`` and ``h``'s first coefficient equal to 1."""
        first = min(self.coeffs)
        a = self.coeffs[first]
        return self.scale(1 / abs(a)).scale(Fraction(1 if a > 0 else -1)), (1 if a > 0 else -1)

    def __str__(self) -> str:
        return str(self.to_poly())


class Poly:
    """A polynomial with exact coefficients, as ``{monomial: coefficient}``."""

    __slots__ = ("terms",)

    def __init__(self, terms: Mapping[Monomial, Fraction] | None = None):
        self.terms: dict[Monomial, Fraction] = {m: Fraction(c) for m, c in (terms or {}).items() if c != 0}

    @staticmethod
    def const(c) -> "Poly":
        return Poly({(): exact(c)})

    @staticmethod
    def var(name: str) -> "Poly":
        return Poly({(name,): ONE})

    @property
    def variables(self) -> frozenset[str]:
        return frozenset(v for m in self.terms for v in m)

    def is_zero(self) -> bool:
        return not self.terms

    def constant_term(self) -> Fraction:
        return self.terms.get((), ZERO)

    def is_constant(self) -> bool:
        return all(m == () for m in self.terms)

    def __add__(self, other: "Poly") -> "Poly":
        out = dict(self.terms)
        for m, c in other.terms.items():
            out[m] = out.get(m, ZERO) + c
        return Poly(out)

    def __neg__(self) -> "Poly":
        return Poly({m: -c for m, c in self.terms.items()})

    def __sub__(self, other: "Poly") -> "Poly":
        return self + (-other)

    def scale(self, a) -> "Poly":
        a = exact(a)
        return Poly({m: a * c for m, c in self.terms.items()})

    def __mul__(self, other: "Poly") -> "Poly":
        out: dict[Monomial, Fraction] = {}
        for m1, c1 in self.terms.items():
            for m2, c2 in other.terms.items():
                m = tuple(sorted(m1 + m2))
                out[m] = out.get(m, ZERO) + c1 * c2
        return Poly(out)

    def restrict(self, variables: frozenset[str]) -> "Poly":
        """The terms whose variables all lie in ``variables`` (constants excluded)."""
        return Poly({m: c for m, c in self.terms.items() if m and set(m) <= variables})

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Poly) and self.terms == other.terms

    def __hash__(self) -> int:
        return hash(frozenset(self.terms.items()))

    def to_sympy(self):
        import sympy

        expr = sympy.Integer(0)
        for m, c in self.terms.items():
            term = sympy.Rational(c.numerator, c.denominator)
            for v in m:
                term = term * sympy.Symbol(v, real=True)
            expr += term
        return expr

    def __str__(self) -> str:
        if not self.terms:
            return "0"
        parts = []
        for m in sorted(self.terms, key=lambda m: (len(m), m)):
            c = self.terms[m]
            body = "*".join(m)
            if not m:
                parts.append(_fmt(c))
            elif c == 1:
                parts.append(body)
            elif c == -1:
                parts.append(f"-{body}")
            else:
                parts.append(f"{_fmt(c)}*{body}")
        return " + ".join(parts).replace("+ -", "- ")

    __repr__ = __str__


def _fmt(c: Fraction) -> str:
    if c.denominator == 1:
        return str(c.numerator)
    if c.denominator < 1000:
        return f"{c.numerator}/{c.denominator}"
    return f"{float(c):.17g}"


# ---------------------------------------------------------------------------------------------------------------
# Feasibility of strict linear systems, exactly.


def strictly_feasible(constraints: Iterable[Lin]) -> bool:
    """Whether ``{v : g(v) > 0 for every g}`` is non-empty, decided exactly by Fourier-Motzkin elimination.

    For strict inequalities the elimination is exact: eliminating ``v`` from ``a v + r > 0`` (``a > 0``) and
    ``b v + s > 0`` (``b < 0``) gives the positive combination ``-b (a v + r) + a (b v + s) = a s - b r > 0``, and the
    projected system is feasible iff the original one is.
    """
    system = [g for g in constraints]
    while True:
        constants = [g for g in system if g.is_constant()]
        if any(g.const <= 0 for g in constants):
            return False
        system = [g for g in system if not g.is_constant()]
        if not system:
            return True
        # Eliminate the variable that creates the fewest new constraints.
        variables = set().union(*(g.variables for g in system))

        def cost(v: str) -> int:
            pos = sum(1 for g in system if g.coeffs.get(v, ZERO) > 0)
            neg = sum(1 for g in system if g.coeffs.get(v, ZERO) < 0)
            return pos * neg - pos - neg

        v = min(sorted(variables), key=cost)
        pos = [g for g in system if g.coeffs.get(v, ZERO) > 0]
        neg = [g for g in system if g.coeffs.get(v, ZERO) < 0]
        rest = [g for g in system if v not in g.coeffs]
        combined = []
        for p in pos:
            for q in neg:
                a, b = p.coeffs[v], q.coeffs[v]
                combined.append(p.scale(-b) + q.scale(a))
        # A variable bounded on one side only can always be chosen to satisfy its constraints.
        system = rest + combined


def strict_witness(constraints: Iterable[Lin], choose=Fraction(1, 2)) -> dict[str, Fraction] | None:
    """A rational point with ``g(v) > 0`` for every constraint, or ``None`` if there is none.

    Fourier-Motzkin elimination, then back-substitution: each variable, in reverse order of elimination, is put at
    the fraction ``choose`` (in (0, 1); or a function of the variable's name) of its open interval given the values
    already chosen (``1 + choose`` beyond a one-sided bound). Different ``choose`` give different points of the
    same open cell.
    """
    pick = choose if callable(choose) else (lambda v: choose)
    system = list(constraints)
    stages: list[tuple[str, list[Lin]]] = []
    for v in sorted(set().union(*(g.variables for g in system)) if system else set()):
        stages.append((v, system))
        pos = [g for g in system if g.coeffs.get(v, ZERO) > 0]
        neg = [g for g in system if g.coeffs.get(v, ZERO) < 0]
        system = [g for g in system if v not in g.coeffs] + [p.scale(-q.coeffs[v]) + q.scale(p.coeffs[v])
                                                              for p in pos for q in neg]
    if any(g.const <= 0 for g in system):
        return None
    point: dict[str, Fraction] = {}
    for v, stage in reversed(stages):
        lo, hi = None, None
        for g in stage:
            a = g.coeffs.get(v, ZERO)
            if a == 0:
                continue
            rest = g.const + sum((c * point[w] for w, c in g.coeffs.items() if w != v), ZERO)
            bound = -rest / a
            if a > 0:
                lo = bound if lo is None else max(lo, bound)
            else:
                hi = bound if hi is None else min(hi, bound)
        c = Fraction(pick(v))
        if lo is None and hi is None:
            point[v] = c
        elif hi is None:
            point[v] = lo + 1 + c
        elif lo is None:
            point[v] = hi - 1 - c
        else:
            point[v] = lo + (hi - lo) * c
    return point


# ---------------------------------------------------------------------------------------------------------------
# Piecewise identities: sum_u w_u * relu(g_u) * l_u + const == intended, on a domain.


@dataclass(frozen=True)
class GatedTerm:
    """``weight * relu(gate) * linear`` (one MLP unit's contribution to one output coordinate)."""

    weight: Fraction
    gate: Lin
    linear: Lin
    unit: int


@dataclass
class IdentityResult:
    holds: bool
    cells: int
    counterexample: str = ""
    #: When it fails: the open cell (constraints ``g > 0``, domain included) where the two sides differ, and a point
    #: of it where they do.
    cell: list[Lin] = field(default_factory=list)
    witness: dict[str, Fraction] = field(default_factory=dict)


def _components(terms: list[GatedTerm], intended: Poly) -> list[frozenset[str]]:
    parent: dict[str, str] = {}

    def find(v: str) -> str:
        while parent.setdefault(v, v) != v:
            parent[v] = parent[parent[v]]
            v = parent[v]
        return v

    def union(vs: Iterable[str]) -> None:
        vs = list(vs)
        for v in vs:
            find(v)
        for v in vs[1:]:
            parent[find(v)] = find(vs[0])

    for t in terms:
        union(t.gate.variables | t.linear.variables)
    for m in intended.terms:
        union(m)
    groups: dict[str, set[str]] = {}
    for v in parent:
        groups.setdefault(find(v), set()).add(v)
    return [frozenset(g) for _, g in sorted(groups.items())]


def _cells(hyperplanes: list[Lin], domain: list[Lin]) -> list[list[tuple[Lin, int]]]:
    """Open cells of the arrangement inside the open domain: lists of (hyperplane, sign) that are feasible."""
    cells: list[list[tuple[Lin, int]]] = [[]]
    for h in hyperplanes:
        nxt = []
        for cell in cells:
            for sign in (1, -1):
                cand = cell + [(h, sign)]
                if strictly_feasible(domain + [hh.scale(Fraction(s)) for hh, s in cand]):
                    nxt.append(cand)
        cells = nxt
    return cells


def _witness(region: list[Lin], diff: Poly) -> dict[str, Fraction]:
    """A point of the open region where the non-constant ``diff`` is not equal to its constant term."""
    point: dict[str, Fraction] = {}
    names = sorted(set(diff.variables).union(*(g.variables for g in region)))
    for trial in range(12):
        # A different fraction per variable and per trial: points on no common level set of ``diff``.
        choose = {v: Fraction(1 + (3 * i + 5 * trial) % 11, 12) for i, v in enumerate(names)}
        point = strict_witness(region, choose.__getitem__) or {}
        values = {v: point.get(v, choose[v]) for v in diff.variables}
        point = {**point, **{v: x for v, x in values.items() if v not in point}}
        if evaluate(diff, values) != diff.constant_term():
            return point
    return point


def evaluate(poly: Poly, point: Mapping[str, Fraction]) -> Fraction:
    """Exact value of ``poly`` at ``point``."""
    total = ZERO
    for m, c in poly.terms.items():
        term = c
        for v in m:
            term *= point[v]
        total += term
    return total


def _fold_constant_gates(terms: list[GatedTerm], constant: Fraction) -> tuple[Fraction, list[GatedTerm]]:
    """Drop zero terms, fold constant gates (relu of a constant is a constant): the constant part, the other terms."""
    total_const = Fraction(constant)
    variable_terms = []
    for t in terms:
        if t.weight == 0 or (t.linear.is_constant() and t.linear.const == 0):
            continue
        if t.gate.is_constant():
            g = max(t.gate.const, ZERO)
            if t.linear.is_constant():
                total_const += t.weight * g * t.linear.const
            else:
                variable_terms.append(GatedTerm(t.weight * g, Lin.of({}, ONE), t.linear, t.unit))
        else:
            variable_terms.append(t)
    return total_const, variable_terms


def _cell_value(terms: list[GatedTerm], cell) -> Poly:
    """The sum of the terms active in ``cell`` (a sign for each hyperplane): the polynomial the MLP computes there."""
    signs = {(tuple(sorted(h.coeffs.items())), h.const): s for h, s in cell}
    value = Poly()
    for t in terms:
        h, orientation = (None, 0) if t.gate.is_constant() else t.gate.canonical()
        if (t.gate.const > 0) if h is None else signs[(tuple(sorted(h.coeffs.items())), h.const)] * orientation > 0:
            value = value + (t.gate.to_poly() * t.linear.to_poly()).scale(t.weight)
    return value


def prove_piecewise_identity(terms: list[GatedTerm], constant: Fraction, intended: Poly,
                             domain: Mapping[str, Sign], context: str = "") -> IdentityResult:
    """Prove ``sum(t.weight * relu(t.gate) * t.linear) + constant == intended`` for all points of ``domain``.

    ``domain[v]`` is ``Sign.FREE`` (any real) or ``Sign.NONNEG`` (``v >= 0``); every variable that occurs must be
    listed. Returns whether the identity holds, how many cells were examined, and, if it fails, a cell and the
    difference found there.
    """
    total_const, variable_terms = _fold_constant_gates(terms, constant)
    n_cells = 0
    remainder = intended.constant_term()
    for comp in _components(variable_terms, intended):
        comp_terms = [t for t in variable_terms if (t.gate.variables | t.linear.variables) & comp]
        target = intended.restrict(comp)
        dom = [Lin.of({v: ONE}) for v in sorted(comp) if domain.get(v, Sign.FREE) is Sign.NONNEG]
        planes: dict[tuple, Lin] = {}
        for t in comp_terms:
            if not t.gate.is_constant():
                h, _ = t.gate.canonical()
                planes.setdefault((tuple(sorted(h.coeffs.items())), h.const), h)
        cells = _cells(list(planes.values()), dom)
        constants = set()
        for cell in cells:
            n_cells += 1
            value = _cell_value(comp_terms, cell)
            diff = value - target
            if not diff.is_constant():
                where = " and ".join(f"{h} {'>' if s > 0 else '<'} 0" for h, s in cell) or "everywhere"
                dom_text = ", ".join(f"{v} > 0" for v in sorted(comp) if domain.get(v, Sign.FREE) is Sign.NONNEG)
                region = dom + [h.scale(Fraction(s)) for h, s in cell]
                witness = _witness(region, diff)
                at = ", ".join(f"{v} = {_fmt(x)}" for v, x in sorted(witness.items()))
                return IdentityResult(False, n_cells, f"{context}where {where}{' (with ' + dom_text + ')' if dom_text else ''}:"
                                                       f" computed {value}"
                                                       f", intended {target} (difference {diff}; e.g. at {at})",
                                      region, witness)
            constants.add(diff.constant_term())
        if len(constants) > 1:
            return IdentityResult(False, n_cells, f"{context}the result jumps between regions of {sorted(comp)}")
        total_const += constants.pop() if constants else ZERO
    if total_const != remainder:
        return IdentityResult(False, n_cells, f"{context}constant part is {_fmt(total_const)}, intended {_fmt(remainder)}")
    return IdentityResult(True, n_cells)
