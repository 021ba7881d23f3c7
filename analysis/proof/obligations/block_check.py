"""Checking one layer's exact weights against a :class:`~analysis.proof.obligations.specs.BlockSpec`, and the
unembedding.

* **QK / OV / unembedding** obligations are statements about exact rational matrices (:mod:`analysis.proof.exact`):
  named blocks equal the intended entries and every other entry, the augmented bias row and column included, is
  exactly zero. Entries whose intended value is a product of two knobs that the builder must round once
  (``beta * mask``, ``tie_break * j``) may differ from the exact product by that one rounding,
  ``|w - v| <= 2^-53 |v|``; all others must be equal.
* **MLP** obligations are functional: for each token type and every residual in the valid domain
  (:mod:`analysis.proof.obligations.domain`), the MLP's change to each coordinate equals the intended polynomial,
  proven region by region (:func:`analysis.proof.algebra.prove_piecewise_identity`); a structural ``support``
  obligation adds that live units read and write only the intended subspaces and that there are no biases.

Every check returns the problems it found (empty: the statement holds), named by obligation.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

from analysis.proof.algebra import Poly, exact
from analysis.proof.identity import GatedTerm, prove_piecewise_identity
from analysis.proof.obligations.domain import token_flags, token_forms, valid_domain
from analysis.proof.exact import (
    BIAS, HeadParams, LayerParams, ModelParams, Sparse, Unit, affine, coordinate_label, mlp_units, ov_form, qk_form,
    unembed_form,
)
from analysis.proof.obligations.specs import UNIT_ROUNDOFF, BlockSpec, Entry, FormSpec, MLPSpec, SinkSpec, label
from circuits.layout import ResidualLayout

#: Problems per obligation name.
Problems = dict[str, list[str]]

EXACT_METHOD = "exact rational entries of the (bias-augmented) form, from the state dict"
REGION_METHOD = "region by region over the valid domain, exact"

UNEMBED_STATEMENT = ("The unembedding reads exactly the assignment: W_U maps Y[j] to logit j, every other entry and"
                     " b_U are 0, so the logits at a point are its assignment.")


@dataclass(frozen=True)
class Axis:
    """One side of a form's matrix: the index of each coordinate label, and the label of each index."""

    index: dict[str, int]
    label: Callable[[int], str]


def _residual_axis(layout: ResidualLayout) -> Axis:
    """The residual stream's coordinates, and the augmented bias row or column (:data:`BIAS`) after them."""
    idx = {name: i for i, name in enumerate(layout.labels)}
    idx[BIAS] = layout.d_model
    return Axis(idx, lambda i: coordinate_label(layout, i))


def show(v: Fraction) -> str:
    """A weight as the report prints it: an integer exactly, anything else as its float."""
    return repr(float(v)) if v.denominator != 1 or abs(v) > 10**15 else str(v.numerator)


def _entry_holds(got: Fraction, e: Entry) -> bool:
    return got == e.value or (e.rounded and abs(got - e.value) <= UNIT_ROUNDOFF * abs(e.value))


def check_form(actual: Sparse, specs: tuple[FormSpec, ...], rows: Axis, cols: Axis, matrix: str,
               extra_zero: dict[str, Fraction] | None = None) -> tuple[Problems, list[str]]:
    """Problems per named spec, and problems of the ``zero elsewhere`` obligation."""
    problems: Problems = {}
    covered: set[tuple[int, int]] = set()
    for spec in specs:
        found = []
        for e in spec.entries:
            key = (rows.index[e.row], cols.index[e.col])
            covered.add(key)
            got = actual.get(key, Fraction(0))
            if not _entry_holds(got, e):
                value = "" if e.formula == show(e.value) else f" = {show(e.value)}"
                found.append(f"{matrix}[{e.row}, {e.col}] = {show(got)}, intended {e.formula}{value}")
        problems[spec.name] = found
    zero = [
        f"{matrix}[{rows.label(i)}, {cols.label(j)}] = {show(v)}, intended 0"
        for (i, j), v in sorted(actual.items()) if (i, j) not in covered
    ]
    zero += [f"{name} = {show(v)}, intended 0" for name, v in (extra_zero or {}).items() if v != 0]
    return problems, zero


def mlp_support_problems(layout: ResidualLayout, units: list[Unit], b_out: dict[int, Fraction],
                         spec: MLPSpec) -> list[str]:
    """Live units that read or write outside the spec's subspaces, and biases."""
    labels = layout.labels
    sub = lambda i: layout.subspace_of(i)[0]  # noqa: E731
    support: list[str] = []
    for u in (u for u in units if u.output and (u.bias != 0 or (u.gate and u.linear))):
        for part, coeffs in (("gate", u.gate), ("linear input", u.linear)):
            stray = [labels[i] for i in coeffs if sub(i) not in spec.reads]
            if stray:
                support.append(f"unit {u.index}: {part} reads {', '.join(stray[:4])}")
        stray = [labels[i] for i in u.output if sub(i) not in spec.writes]
        if stray:
            support.append(f"unit {u.index} writes {', '.join(stray[:4])}")
        if u.bias != 0:
            support.append(f"unit {u.index} has b_in = {show(u.bias)}")
    support += [f"b_out[{labels[i]}] = {show(v)}" for i, v in b_out.items()]
    return support


def mlp_change_problems(layout: ResidualLayout, units: list[Unit], b_out: dict[int, Fraction], spec: MLPSpec,
                        token_type: str) -> dict[int, str]:
    """On tokens of ``token_type``: coordinate -> counterexample where the MLP's change is not the intended one."""
    labels = layout.labels
    writers: dict[int, list[Unit]] = {}
    for u in units:
        for i in u.output:
            writers.setdefault(i, []).append(u)
    token = token_forms(layout, token_type)
    forms = {u.index: (affine(u.gate, token), affine(u.linear, token)) for u in units if u.output}
    intended: dict[str, Poly] = {}
    for g in spec.groups:
        intended.update(g.delta(layout, token_flags(token_type)))
    where = {name: i for i, name in enumerate(labels)}
    domain = valid_domain(layout)
    coords = set(writers) | set(b_out) | {where[lab] for lab, p in intended.items() if not p.is_zero()}
    out = {}
    for i in sorted(coords):
        terms = [GatedTerm(u.output[i], *forms[u.index], u.index) for u in writers.get(i, [])]
        constant = b_out.get(i, Fraction(0)) + sum((u.output[i] * u.bias for u in writers.get(i, [])), Fraction(0))
        result = prove_piecewise_identity(terms, constant, intended.get(labels[i], Poly()), domain,
                                          context=f"on {token_type} tokens, change of {labels[i]} ")
        if not result.holds:
            out[i] = result.counterexample
    return out


def check_mlp(layout: ResidualLayout, units: list[Unit], b_out: dict[int, Fraction], spec: MLPSpec) -> Problems:
    """Problems per MLP obligation (the groups of ``spec`` and ``support``)."""
    problems: Problems = {g.name: [] for g in spec.groups}
    support = mlp_support_problems(layout, units, b_out, spec)
    group_of = {i: g for g in spec.groups for name in g.subspaces for i in range(layout[name].start, layout[name].stop)}
    for token_type in ("point", "centroid", "bos"):
        for i, counterexample in mlp_change_problems(layout, units, b_out, spec, token_type).items():
            (problems[group_of[i].name] if i in group_of else support).append(counterexample)
    problems["support"] = support
    return problems


def check_sink(head: HeadParams, sink: SinkSpec) -> list[str]:
    """The head's attention-sink logit is the intended one, within the spec's relative rounding."""
    if head.sinks is None:
        return ["the head has no attention sink"]
    if abs(exact(head.sinks) - sink.value) <= sink.rel * abs(sink.value):
        return []
    return [f"sink logit = {head.sinks!r}, intended {sink.formula} = {show(sink.value)}"]


def check_block(layout: ResidualLayout, params: LayerParams, spec: BlockSpec) -> dict[str, tuple[str, list[str]]]:
    """``{obligation name: (method, problems)}`` for one layer."""
    residual = _residual_axis(layout)
    out: dict[str, tuple[str, list[str]]] = {}
    named, zero = check_form(qk_form(params.head), spec.qk, residual, residual, "W_QK")
    out |= {name: (EXACT_METHOD, problems) for name, problems in named.items()}
    out[f"{spec.kind}.QK.zero_elsewhere"] = (EXACT_METHOD, zero)
    ov, b_O = ov_form(params.head)
    named, zero = check_form(ov, spec.ov, residual, residual, "W_OV",
                             extra_zero={f"b_O[{layout.labels[i]}]": v for i, v in b_O.items()})
    out |= {name: (EXACT_METHOD, problems) for name, problems in named.items()}
    out[f"{spec.kind}.OV.zero_elsewhere"] = (EXACT_METHOD, zero)
    if spec.sink is not None:
        out[spec.sink.name] = ("exact rational value of the sink parameter", check_sink(params.head, spec.sink))
    b_out = {i: exact(float(params.mlp.b_out[i])) for i in range(layout.d_model) if params.mlp.b_out[i] != 0}
    mlp = check_mlp(layout, mlp_units(params.mlp), b_out, spec.mlp)
    out |= {g.name: (REGION_METHOD, mlp[g.name]) for g in spec.mlp.groups}
    out[f"{spec.kind}.MLP.support"] = ("exact sparsity of live units + " + REGION_METHOD, mlp["support"])
    return out


def check_unembed(layout: ResidualLayout, params: ModelParams) -> list[str]:
    """Problems of ``unembed.reads_y``: ``W_U`` is the identity from ``Y`` to the logits, ``b_U = 0``."""
    cols = Axis({f"logit[{j}]": j for j in range(params.W_U.shape[1])}, lambda j: f"logit[{j}]")
    spec = FormSpec("unembed.reads_y", "", tuple(Entry(label(layout, "Y", i), f"logit[{j}]", Fraction(int(i == j)),
                                                       "1" if i == j else "0")
                                                 for i in range(layout.k) for j in range(layout.k)))
    if params.W_U.shape[1] != layout.k:
        return [f"W_U has {params.W_U.shape[1]} logits, intended k = {layout.k}"]
    named, zero = check_form(unembed_form(params.W_U, params.b_U), (spec,), _residual_axis(layout), cols, "W_U")
    return named["unembed.reads_y"] + [z.replace(f"W_U[{BIAS},", "b_U[") for z in zero]
