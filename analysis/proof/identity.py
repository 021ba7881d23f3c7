"""The prover's method for an MLP: a piecewise-linear identity proven on the cells of a hyperplane arrangement.

The MLPs of the circuit compute sums of ``relu(g . v) * (l . v)`` with linear ``g`` and ``l``; to prove such a sum
equals an intended polynomial on a domain, :func:`prove_piecewise_identity` splits the domain into the open cells of
the hyperplane arrangement ``{g = 0}`` (deciding which cells exist exactly, with the Fourier-Motzkin elimination of
:func:`analysis.proof.algebra.strictly_feasible`) and, in each cell, compares polynomials coefficient by coefficient.

Why cells are enough: both sides are continuous, the domain is a product of lines and closed half-lines (the
closure of its interior), and the open cells cover that interior up to a set with empty interior. A polynomial
identity that holds on every open cell therefore holds on the whole domain, boundaries included. On an open cell a
polynomial vanishes iff all its coefficients do, so each cell is one exact coefficient comparison.

Variables that do not interact are proven separately: the sum is split into *components* (connected groups of
variables that share a unit or an intended monomial), each component must match up to a constant, and the constants
must add up. This keeps the cost linear in ``d`` for the update MLP (``d`` independent squares) instead of ``2^d``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction

from analysis.proof.algebra import ONE, ZERO, Lin, Poly, Sign, evaluate, fmt, strict_witness, strictly_feasible


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
                at = ", ".join(f"{v} = {fmt(x)}" for v, x in sorted(witness.items()))
                return IdentityResult(False, n_cells, f"{context}where {where}{' (with ' + dom_text + ')' if dom_text else ''}:"
                                                       f" computed {value}"
                                                       f", intended {target} (difference {diff}; e.g. at {at})",
                                      region, witness)
            constants.add(diff.constant_term())
        if len(constants) > 1:
            return IdentityResult(False, n_cells, f"{context}the result jumps between regions of {sorted(comp)}")
        total_const += constants.pop() if constants else ZERO
    if total_const != remainder:
        return IdentityResult(False, n_cells, f"{context}constant part is {fmt(total_const)}, intended {fmt(remainder)}")
    return IdentityResult(True, n_cells)
