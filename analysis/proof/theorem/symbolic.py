"""Symbolic evaluation of the exact weights: generic tokens as sympy vectors, scores, values, MLP changes.

The theorem (:mod:`analysis.proof.theorem`) runs every block on *generic* tokens of each type: coordinates are
sympy symbols, weights are the exact rationals read from the state dict, and an equality holds when the
difference expands to 0. sympy is imported inside the functions that use it (heavy; loaded only when proving).
"""

from __future__ import annotations

from fractions import Fraction

from analysis.proof.algebra import Poly
from analysis.proof.obligations.domain import TOKEN_FLAGS, token_flags
from analysis.proof.exact import Sparse
from analysis.proof.obligations.specs import MLPSpec, label
from circuits.layout import ResidualLayout


def rational(f: Fraction):
    """``f`` as an exact sympy rational."""
    import sympy

    return sympy.Rational(f.numerator, f.denominator)


class SymbolicTokens:
    """Generic tokens of a valid Lloyd state, as sympy vectors over the residual (plus the constant ``bias``).

    ``x``, ``c``, ``s`` (a staged centroid), ``y`` are the query's coordinates; ``x2``, ``c2``, ``y2``, ``n2`` a second,
    independent token's (a key).
    """

    def __init__(self, layout: ResidualLayout):
        import sympy

        self.sp = sympy
        self.layout = layout
        self.x = sympy.symbols(f"x0:{layout.d}", real=True)
        self.x2 = sympy.symbols(f"xp0:{layout.d}", real=True)
        self.c = sympy.symbols(f"c0:{layout.d}", real=True)
        self.c2 = sympy.symbols(f"cp0:{layout.d}", real=True)
        self.s = sympy.symbols(f"s0:{layout.d}", real=True)
        self.y = sympy.symbols(f"y0:{layout.k}", real=True)
        self.y2 = sympy.symbols(f"yp0:{layout.k}", real=True)
        self.n2 = sympy.Symbol("Np", nonnegative=True)
        #: |x|^2, |c|^2 and |x - c|^2 of the query's coordinates.
        self.x_sq = sum(xi**2 for xi in self.x)
        self.c_sq = sum(ci**2 for ci in self.c)
        self.dist = sum((xi - ci) ** 2 for xi, ci in zip(self.x, self.c))

    def vector(self, kind: str, **values) -> list:
        """Residual of a token of type ``kind`` with subspaces set from ``values`` (sequences or scalars)."""
        L = self.layout
        vec = [self.sp.Integer(0)] * (L.d_model + 1)
        vec[L.d_model] = self.sp.Integer(1)  # the bias coordinate
        vec[L.index("ONE")] = self.sp.Integer(1)
        vec[L.index(TOKEN_FLAGS[kind])] = self.sp.Integer(1)
        for name, value in values.items():
            seq = value if isinstance(value, (list, tuple)) else [value]
            for i, v in enumerate(seq):
                vec[L.index(name, i)] = self.sp.sympify(v)
        return vec

    def onehot(self, j: int) -> list:
        return [self.sp.Integer(int(i == j)) for i in range(self.layout.k)]

    def centroid(self, j: int, **extra) -> list:
        """Centroid ``j`` holding ``c`` and ``N = |c|^2`` (a valid state after an update)."""
        return self.vector("centroid", C=list(self.c), N=self.c_sq, ID=self.onehot(j), **extra)

    def other_centroid(self, j: int) -> list:
        """Centroid ``j`` holding an independent ``c'`` and any ``N' >= 0``."""
        return self.vector("centroid", C=list(self.c2), N=self.n2, ID=self.onehot(j))

    def other_point(self) -> list:
        """A point key independent of the query: ``x'``, ``y'``, any ``N' >= 0``."""
        return self.vector("point", X=list(self.x2), Y=list(self.y2), N=self.n2)


def poly_value(poly: Poly, values: dict):
    """Evaluate an exact polynomial in coordinate labels at ``values`` (numbers or sympy expressions)."""
    import sympy

    total = sympy.Integer(0)
    for mono, c in poly.terms.items():
        term = rational(c)
        for v in mono:
            term = term * values[v]
        total += term
    return sympy.expand(total)


def apply_delta(spec: MLPSpec, layout: ResidualLayout, token_type: str, state: dict) -> dict:
    """``state + change`` for the coordinates in ``state``, with the changes the MLP obligations proved."""
    out = dict(state)
    for group in spec.groups:
        for name, poly in group.delta(layout, token_flags(token_type)).items():
            if name in out:
                out[name] = state[name] + poly_value(poly, state)
    return out


def score(form: Sparse, q: list, k: list):
    """Exact bilinear form on symbolic vectors."""
    import sympy

    total = sympy.Integer(0)
    for (i, j), v in form.items():
        if q[i] != 0 and k[j] != 0:
            total += rational(v) * q[i] * k[j]
    return sympy.expand(total)


def value_out(ov: Sparse, b_O: dict[int, Fraction], key: list, d_model: int) -> list:
    """What one attended key writes into the query's residual (without the pattern weight, plus ``b_O``)."""
    import sympy

    out = [sympy.Integer(0)] * d_model
    for (i, o), v in ov.items():
        if key[i] != 0:
            out[o] += rational(v) * key[i]
    for o, v in b_O.items():
        out[o] += rational(v)
    return [sympy.expand(e) for e in out]


def subspace_state(layout: ResidualLayout, **values) -> dict:
    """``{coordinate label: value}`` for whole subspaces (``values[name]``: a sequence, or a scalar for width 1)."""
    out = {}
    for name, value in values.items():
        seq = value if isinstance(value, (list, tuple)) else [value]
        out |= {label(layout, name, i): v for i, v in enumerate(seq)}
    return out


def short(expr, limit: int = 160) -> str:
    text = str(expr)
    return text if len(text) <= limit else text[:limit] + " ..."


def check_eq(got, want, what: str, problems: list[str]) -> None:
    """Append a problem unless ``got - want`` expands to 0."""
    import sympy

    if sympy.expand(got - want) != 0:
        problems.append(f"{what} = {short(got)}, claimed {short(want)}")
