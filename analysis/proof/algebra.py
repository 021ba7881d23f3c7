"""Exact algebra for the prover: rational linear forms and polynomials, and exact feasibility of strict linear
systems.

Everything here is exact (``fractions.Fraction``; a float64 weight converts to a Fraction without rounding) and knows
nothing of the circuit: :class:`Lin` and :class:`Poly` are the terms the obligations are written in,
:func:`strictly_feasible` and :func:`strict_witness` decide (by Fourier-Motzkin elimination) whether an open region
given by strict inequalities exists and find a point of it. :mod:`analysis.proof.identity` proves an MLP's
piecewise-linear identity with them.
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
                parts.append(fmt(c))
            elif c == 1:
                parts.append(body)
            elif c == -1:
                parts.append(f"-{body}")
            else:
                parts.append(f"{fmt(c)}*{body}")
        return " + ".join(parts).replace("+ -", "- ")

    __repr__ = __str__


def fmt(c: Fraction) -> str:
    """``c`` as the prover's messages write it: an integer, a fraction of a small denominator, else its float64."""
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


def evaluate(poly: Poly, point: Mapping[str, Fraction]) -> Fraction:
    """Exact value of ``poly`` at ``point``."""
    total = ZERO
    for m, c in poly.terms.items():
        term = c
        for v in m:
            term *= point[v]
        total += term
    return total
