"""Proof obligations of the exact Lloyd circuit, stated in the named basis and checked on the actual weights.

An *obligation* is one sentence about the weights that the hard-attention theorem (:mod:`analysis.proof.theorem`)
uses, checked exactly on every layer of a built ``HookedTransformer``:

* **QK / OV / unembedding** obligations are statements about exact rational matrices (:mod:`analysis.proof.exact`):
  named blocks equal the intended entries (``2 beta`` on the diagonal of the ``X x C`` block of the assign head, ...)
  and every other entry, the augmented bias row and column included, is exactly zero. Entries whose intended value
  is a product of two knobs that the builder must round once (``beta * mask``, ``tie_break * j``) may differ from the
  exact product by that one rounding, ``|w - v| <= 2^-53 |v|``; all others must be equal.
* **MLP** obligations are functional: for each token type (flags one-hot, ``ONE = 1``) and every residual in the
  *valid domain* (below), the MLP's change to each coordinate equals the intended polynomial. They are proven region
  by region (:func:`analysis.proof.algebra.prove_piecewise_identity`); a structural ``support`` obligation adds that
  live units read and write only the intended subspaces and that there are no biases.

Valid domain (every residual the circuit produces lies in it, at any sharpness; :mod:`analysis.proof.theorem`
shows why): exactly one of ``IS_POINT``, ``IS_CENTROID``, ``IS_BOS`` is 1 and the others 0; ``ONE = 1``;
``N, ID, Y, Y_stage >= 0`` (and a variant's ``NX = |x|^2 >= 0``); ``X, C, C_stage`` (and any other variant
subspace) are arbitrary reals.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from fractions import Fraction
from typing import Callable

from analysis.proof.algebra import FREE, NONNEG, GatedTerm, Lin, Poly, exact, prove_piecewise_identity
from analysis.proof.exact import (
    BIAS, LayerParams, ModelParams, Sparse, Unit, affine, coordinate_label, mlp_units, ov_form, qk_form, unembed_form,
)
from circuits.layout import ResidualLayout

PROVED = "PROVED"
FAILED = "FAILED"
CHECKED = "CHECKED"  # numeric evidence, not a proof (said so wherever it is printed)
NOT_APPLICABLE = "N/A"

#: Relative size of one float64 rounding (unit roundoff).
UNIT_ROUNDOFF = Fraction(1, 2**53)

FLAGS = ("IS_POINT", "IS_CENTROID", "IS_BOS")
TOKEN_FLAGS = {"point": "IS_POINT", "centroid": "IS_CENTROID", "bos": "IS_BOS"}
NONNEG_SUBSPACES = ("N", "ID", "Y", "Y_stage", "NX")


@dataclass
class Obligation:
    """One checked statement about the weights."""

    name: str
    component: str
    statement: str
    status: str
    method: str
    layers: list[int] = field(default_factory=list)
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.status in (PROVED, CHECKED, NOT_APPLICABLE)

    def to_dict(self) -> dict:
        return asdict(self)


# ---------------------------------------------------------------------------------------------------------------
# Specs


@dataclass(frozen=True)
class Entry:
    """Intended value of one entry of an exact form: ``form[row, col] == value`` (``formula`` says it in knobs)."""

    row: str
    col: str
    value: Fraction
    formula: str
    rounded: bool = False


@dataclass(frozen=True)
class FormSpec:
    """An obligation on a form: its entries."""

    name: str
    statement: str
    entries: tuple[Entry, ...]


@dataclass(frozen=True)
class MLPGroup:
    """An MLP obligation: on every token of the valid domain, the change of the coordinates in ``subspaces``
    equals ``delta(layout, flags)`` (a dict label -> polynomial in the coordinate labels)."""

    name: str
    statement: str
    subspaces: tuple[str, ...]
    delta: Callable[[ResidualLayout, dict[str, int]], dict[str, Poly]]


@dataclass(frozen=True)
class MLPSpec:
    support_statement: str
    reads: tuple[str, ...]
    writes: tuple[str, ...]
    groups: tuple[MLPGroup, ...]


@dataclass(frozen=True)
class BlockSpec:
    """Everything one block kind must satisfy."""

    kind: str
    qk: tuple[FormSpec, ...]
    qk_zero_statement: str
    ov: tuple[FormSpec, ...]
    ov_zero_statement: str
    mlp: MLPSpec
    #: Update blocks: the fraction of the way to the staged centroid that C moves (1 for Lloyd's commit).
    step: Fraction = Fraction(1)
    #: Attention-sink logit the head must have (``use_attention_sinks``): (name, statement, value, formula,
    #: allowed relative rounding); ``None``: the head has no sink.
    sink: tuple[str, str, Fraction, str, Fraction] | None = None


# ---------------------------------------------------------------------------------------------------------------
# Valid domain and token residuals as exact affine forms.


def valid_domain(layout: ResidualLayout) -> dict[str, str]:
    """Sign constraint of every non-flag coordinate: ``nonneg`` for N, ID, Y, Y_stage, ``free`` otherwise."""
    out = {}
    for i, label in enumerate(layout.labels):
        name = layout.subspace_of(i)[0]
        if name in FLAGS or name == "ONE":
            continue
        out[label] = NONNEG if name in NONNEG_SUBSPACES else FREE
    return out


def token_flags(token_type: str) -> dict[str, int]:
    return {flag: int(flag == TOKEN_FLAGS[token_type]) for flag in FLAGS} | {"ONE": 1}


def token_forms(layout: ResidualLayout, token_type: str) -> dict[int, Lin]:
    """A generic token of ``token_type``: each residual coordinate as an affine form (a variable, or a constant)."""
    flags = token_flags(token_type)
    out: dict[int, Lin] = {}
    for i, label in enumerate(layout.labels):
        name = layout.subspace_of(i)[0]
        if name in flags:
            if flags[name]:
                out[i] = Lin.of({}, Fraction(1))
        else:
            out[i] = Lin.of({label: Fraction(1)})
    return out


# ---------------------------------------------------------------------------------------------------------------
# Checking forms


def _index(layout: ResidualLayout) -> dict[str, int]:
    idx = {label: i for i, label in enumerate(layout.labels)}
    idx[BIAS] = layout.d_model
    return idx


def _show(v: Fraction) -> str:
    return repr(float(v)) if v.denominator != 1 or abs(v) > 10**15 else str(v.numerator)


def check_form(actual: Sparse, specs: tuple[FormSpec, ...], row_index: dict[str, int], col_index: dict[str, int],
               row_label: Callable[[int], str], col_label: Callable[[int], str], matrix: str,
               extra_zero: dict[str, Fraction] | None = None) -> tuple[dict[str, list[str]], list[str]]:
    """Problems per named spec, and problems of the ``zero elsewhere`` obligation."""
    problems: dict[str, list[str]] = {}
    covered: set[tuple[int, int]] = set()
    for spec in specs:
        found = []
        for e in spec.entries:
            key = (row_index[e.row], col_index[e.col])
            covered.add(key)
            got = actual.get(key, Fraction(0))
            ok = got == e.value or (e.rounded and abs(got - e.value) <= UNIT_ROUNDOFF * abs(e.value))
            if not ok:
                value = "" if e.formula == _show(e.value) else f" = {_show(e.value)}"
                found.append(f"{matrix}[{e.row}, {e.col}] = {_show(got)}, intended {e.formula}{value}")
        problems[spec.name] = found
    zero = [
        f"{matrix}[{row_label(i)}, {col_label(j)}] = {_show(v)}, intended 0"
        for (i, j), v in sorted(actual.items()) if (i, j) not in covered
    ]
    for name, v in (extra_zero or {}).items():
        if v != 0:
            zero.append(f"{name} = {_show(v)}, intended 0")
    return problems, zero


def check_mlp(layout: ResidualLayout, units: list[Unit], b_out: dict[int, Fraction], spec: MLPSpec) -> dict[str, list[str]]:
    """Problems per MLP obligation (the groups of ``spec`` and ``support``)."""
    problems: dict[str, list[str]] = {g.name: [] for g in spec.groups}
    support: list[str] = []
    labels = layout.labels
    where = {label: i for i, label in enumerate(labels)}
    sub = lambda i: layout.subspace_of(i)[0]  # noqa: E731
    live = [u for u in units if u.output and (u.bias != 0 or (u.gate and u.linear))]
    for u in live:
        for part, coeffs in (("gate", u.gate), ("linear input", u.linear)):
            stray = [labels[i] for i in coeffs if sub(i) not in spec.reads]
            if stray:
                support.append(f"unit {u.index}: {part} reads {', '.join(stray[:4])}")
        stray = [labels[i] for i in u.output if sub(i) not in spec.writes]
        if stray:
            support.append(f"unit {u.index} writes {', '.join(stray[:4])}")
        if u.bias != 0:
            support.append(f"unit {u.index} has b_in = {_show(u.bias)}")
    for i, v in b_out.items():
        support.append(f"b_out[{labels[i]}] = {_show(v)}")

    domain = valid_domain(layout)
    group_of = {}
    for g in spec.groups:
        for name in g.subspaces:
            for i in range(layout[name].start, layout[name].stop):
                group_of[i] = g
    writers: dict[int, list[Unit]] = {}
    for u in units:
        for i in u.output:
            writers.setdefault(i, []).append(u)
    for token_type in ("point", "centroid", "bos"):
        token = token_forms(layout, token_type)
        forms = {u.index: (affine(u.gate, token), affine(u.linear, token)) for u in units if u.output}
        intended: dict[str, Poly] = {}
        for g in spec.groups:
            intended.update(g.delta(layout, token_flags(token_type)))
        coords = set(writers) | set(b_out) | {where[lab] for lab, p in intended.items() if not p.is_zero()}
        for i in sorted(coords):
            terms = [GatedTerm(u.output[i], *forms[u.index], u.index) for u in writers.get(i, [])]
            constant = b_out.get(i, Fraction(0)) + sum((u.output[i] * u.bias for u in writers.get(i, [])), Fraction(0))
            result = prove_piecewise_identity(terms, constant, intended.get(labels[i], Poly()), domain,
                                              context=f"on {token_type} tokens, change of {labels[i]} ")
            if not result.holds:
                target = problems[group_of[i].name] if i in group_of else support
                target.append(result.counterexample)
    problems["support"] = support
    return problems


# ---------------------------------------------------------------------------------------------------------------
# The Lloyd construction, stated independently of circuits.blocks.


def _v(label: str) -> Poly:
    return Poly.var(label)


def lloyd_assign_spec(layout: ResidualLayout, sharp) -> BlockSpec:
    beta, M, tau = exact(sharp.beta), exact(sharp.mask), exact(sharp.tie_break)
    d, k = layout.d, layout.k
    qk = (
        FormSpec(
            "assign.QK.distance",
            "A point query scores a centroid key beta*(2 x.c - N): the X x C block of W_QK is 2*beta*I and"
            " IS_POINT x N is -beta. With N = |c|^2 this is -beta*|x - c|^2 plus a constant of the query.",
            identity_block(layout, "X", "C", 2 * beta, "2*beta") + (Entry("IS_POINT", "N", -beta, "-beta"),),
        ),
        FormSpec(
            "assign.QK.tie_break",
            "Centroid j pays a tie-break: IS_POINT x ID[j] is -beta*tie_break*j (tie_break*j rounded once to"
            " float64), so of two equally near centroids the lower index scores higher.",
            tuple(Entry("IS_POINT", _lab(layout, "ID", j), -beta * tau * j, "-beta*tie_break*" + str(j), rounded=True)
                  for j in range(k)),
        ),
        FormSpec(
            "assign.QK.mask",
            "Point queries push point and BOS keys down by beta*mask (IS_POINT x IS_POINT = IS_POINT x IS_BOS ="
            " -beta*mask); centroid and BOS queries look at the BOS sink (IS_CENTROID x IS_BOS = IS_BOS x IS_BOS ="
            " beta*mask).",
            (Entry("IS_POINT", "IS_POINT", -beta * M, "-beta*mask"), Entry("IS_POINT", "IS_BOS", -beta * M, "-beta*mask"),
             Entry("IS_CENTROID", "IS_BOS", beta * M, "beta*mask", rounded=True),
             Entry("IS_BOS", "IS_BOS", beta * M, "beta*mask", rounded=True)),
        ),
    )
    ov = (
        FormSpec(
            "assign.OV.id_to_y_stage",
            "The value reads the key's ID and the output writes it to Y_stage: the ID x Y_stage block of W_OV is I_k.",
            identity_block(layout, "ID", "Y_stage", Fraction(1), "1"),
        ),
    )

    def commit(layout: ResidualLayout, flags: dict[str, int]) -> dict[str, Poly]:
        return {_lab(layout, "Y", j): _v(_lab(layout, "Y_stage", j)).scale(flags["IS_POINT"]) - _v(_lab(layout, "Y", j))
                for j in range(layout.k)}

    def clear(layout: ResidualLayout, flags: dict[str, int]) -> dict[str, Poly]:
        return {_lab(layout, "Y_stage", j): -_v(_lab(layout, "Y_stage", j)) for j in range(layout.k)}

    mlp = MLPSpec(
        support_statement="The assign MLP's live units read only Y, Y_stage, IS_POINT and ONE and write only Y and"
                          " Y_stage; there are no biases; every other coordinate is unchanged on every token.",
        reads=("Y", "Y_stage", "IS_POINT", "ONE"),
        writes=("Y", "Y_stage"),
        groups=(
            MLPGroup("assign.MLP.commit",
                     "On every token of the valid domain Y becomes IS_POINT*Y_stage (change IS_POINT*Y_stage - Y):"
                     " points take their staged assignment, the old one is erased. Proven region by region for"
                     " Y >= 0, Y_stage >= 0.", ("Y",), commit),
            MLPGroup("assign.MLP.clear_stage",
                     "Y_stage is emptied on every token (change -Y_stage for Y_stage >= 0).", ("Y_stage",), clear),
        ),
    )
    return BlockSpec(
        "assign", qk,
        "Every other entry of the assign head's QK form is exactly 0, biases b_Q and b_K included: scores depend on"
        " nothing else.",
        ov,
        "Every other entry of the assign head's OV map is 0 (b_V*W_O and b_O included): the head writes only Y_stage.",
        mlp,
    )


def squared_norm_change(layout: ResidualLayout, source: str, target: str) -> dict[str, Poly]:
    """``{target: |source|^2 - target}``: the change that overwrites ``target`` with the squared norm of ``source``."""
    total = -_v(target)
    for m in range(layout.width(source)):
        s = _v(_lab(layout, source, m))
        total = total + s * s
    return {target: total}


def lloyd_update_spec(layout: ResidualLayout, sharp) -> BlockSpec:
    bu = exact(sharp.beta_update)
    d, k = layout.d, layout.k
    qk = (
        FormSpec(
            "update.QK.membership",
            "A centroid query j scores beta_update on a key whose Y has bit j: the ID x Y block of W_QK is"
            " beta_update*I (the ID.Y membership form).",
            identity_block(layout, "ID", "Y", bu, "beta_update"),
        ),
        FormSpec(
            "update.QK.self",
            "A centroid query scores beta_update/2 on its own key: the ID x ID block is (beta_update/2)*I.",
            identity_block(layout, "ID", "ID", bu / 2, "beta_update/2"),
        ),
        FormSpec(
            "update.QK.sink",
            "Point and BOS queries look at the BOS sink: IS_POINT x IS_BOS = IS_BOS x IS_BOS = beta_update.",
            (Entry("IS_POINT", "IS_BOS", bu, "beta_update"), Entry("IS_BOS", "IS_BOS", bu, "beta_update")),
        ),
    )
    ov = (
        FormSpec(
            "update.OV.coordinates_to_c_stage",
            "The value reads X + C of the key (a point's coordinates or a centroid's own) and writes it to C_stage:"
            " the X x C_stage and C x C_stage blocks of W_OV are I_d.",
            identity_block(layout, "X", "C_stage", Fraction(1), "1") + identity_block(layout, "C", "C_stage", Fraction(1), "1"),
        ),
    )

    def commit(layout: ResidualLayout, flags: dict[str, int]) -> dict[str, Poly]:
        return {_lab(layout, "C", m): (_v(_lab(layout, "C_stage", m)) - _v(_lab(layout, "C", m))).scale(flags["IS_CENTROID"])
                for m in range(layout.d)}

    def clear(layout: ResidualLayout, flags: dict[str, int]) -> dict[str, Poly]:
        return {_lab(layout, "C_stage", m): -_v(_lab(layout, "C_stage", m)) for m in range(layout.d)}

    def square(layout: ResidualLayout, flags: dict[str, int]) -> dict[str, Poly]:
        return squared_norm_change(layout, "C_stage", "N")

    mlp = MLPSpec(
        support_statement="The update MLP's live units read only C, C_stage, N, IS_CENTROID and ONE and write only"
                          " C, C_stage and N; there are no biases; every other coordinate is unchanged on every token.",
        reads=("C", "C_stage", "N", "IS_CENTROID", "ONE"),
        writes=("C", "C_stage", "N"),
        groups=(
            MLPGroup("update.MLP.commit_centroid",
                     "C becomes the staged centroid on centroid tokens and is unchanged elsewhere (change"
                     " IS_CENTROID*(C_stage - C)), for every real C and C_stage: relu(s - c) - relu(c - s) = s - c in"
                     " each region.", ("C",), commit),
            MLPGroup("update.MLP.clear_stage",
                     "C_stage is emptied on every token (change -C_stage, relu(s) - relu(-s) = s) for every real C_stage.",
                     ("C_stage",), clear),
            MLPGroup("update.MLP.square_norm",
                     "N becomes |C_stage|^2 on every token (change sum_m C_stage[m]^2 - N, for N >= 0): the gated units"
                     " relu(s)*s + relu(-s)*(-s) square exactly.", ("N",), square),
        ),
    )
    return BlockSpec(
        "update", qk,
        "Every other entry of the update head's QK form is exactly 0, biases included.",
        ov,
        "Every other entry of the update head's OV map is 0 (b_V*W_O and b_O included): the head writes only C_stage.",
        mlp,
    )


def damped_update_spec(layout: ResidualLayout, sharp, eta: float) -> BlockSpec:
    """The damped variant's update block: Lloyd's head; the MLP moves C a fraction ``eta`` towards C_stage and
    keeps N equal to the squared norm of the *new* C."""
    base = lloyd_update_spec(layout, sharp)
    e = exact(eta)

    def commit(layout: ResidualLayout, flags: dict[str, int]) -> dict[str, Poly]:
        return {_lab(layout, "C", m): (_v(_lab(layout, "C_stage", m)) - _v(_lab(layout, "C", m))).scale(e * flags["IS_CENTROID"])
                for m in range(layout.d)}

    def square(layout: ResidualLayout, flags: dict[str, int]) -> dict[str, Poly]:
        total = -_v("N")
        for m in range(layout.d):
            c, s = _v(_lab(layout, "C", m)), _v(_lab(layout, "C_stage", m))
            new = c + (s - c).scale(e)
            total = total + new * new
        return {"N": total}

    groups = (
        MLPGroup("update.MLP.damped_commit",
                 "C moves a fraction eta of the way to the staged centroid on centroid tokens and is unchanged"
                 " elsewhere (change eta*IS_CENTROID*(C_stage - C)), for every real C and C_stage.", ("C",), commit),
        base.mlp.groups[1],
        MLPGroup("update.MLP.damped_square_norm",
                 "N becomes |C + eta*(C_stage - C)|^2, the squared norm of the new centroid, on every token (N >= 0),"
                 " in exact arithmetic on the weights.", ("N",), square),
    )
    return BlockSpec(base.kind, base.qk, base.qk_zero_statement, base.ov, base.ov_zero_statement,
                     MLPSpec(base.mlp.support_statement, base.mlp.reads, base.mlp.writes, groups), step=e)


def trimmed_specs(layout: ResidualLayout, sharp, radius: float) -> tuple[BlockSpec, BlockSpec]:
    """Trimmed k-means: Lloyd's blocks, plus an exact-distance channel and an attention sink in the assign head
    (threshold ``theta = radius^2``), a sink that is never used in the update head, and ``NX = |x|^2`` kept by the
    update MLP."""
    beta, tau = exact(sharp.beta), exact(sharp.tie_break)
    theta = exact(radius) ** 2
    k = layout.k
    assign = lloyd_assign_spec(layout, sharp)
    exact_distance = FormSpec(
        "assign.QK.exact_distance",
        "The point query also reads NX = |x|^2 against every key's ONE: NX x ONE is -beta, so a point scores"
        " centroid j exactly -beta*(|x - c_j|^2 + t_j), which a fixed sink logit can be compared with.",
        (Entry("NX", "ONE", -beta, "-beta"),),
    )
    assign = replace(assign, qk=assign.qk + (exact_distance,), sink=(
        "assign.sink.threshold",
        "The assign head's attention sink (a virtual key with value 0) has logit -beta*(theta + tie_break*k), theta ="
        " radius^2 (up to the builder's 4 roundings): a point farther than sqrt(theta) from every centroid attends to"
        " the sink alone and stays unassigned (an outlier); a point exactly at the threshold stays in.",
        -beta * (theta + tau * k), "-beta*(radius^2 + tie_break*k)", 5 * UNIT_ROUNDOFF))
    update = lloyd_update_spec(layout, sharp)

    def nx_square(layout: ResidualLayout, flags: dict[str, int]) -> dict[str, Poly]:
        return squared_norm_change(layout, "X", "NX")

    mlp = MLPSpec(
        "The update MLP's live units read only C, C_stage, N, X, NX, IS_CENTROID and ONE and write only C, C_stage,"
        " N and NX; there are no biases; every other coordinate is unchanged on every token.",
        update.mlp.reads + ("X", "NX"), update.mlp.writes + ("NX",),
        update.mlp.groups + (MLPGroup(
            "update.MLP.nx_square",
            "NX becomes |X|^2 on every token (change sum_m X[m]^2 - NX, for NX >= 0): points carry |x|^2 for the"
            " exact-distance channel, other tokens 0.", ("NX",), nx_square),),
    )
    update = replace(update, mlp=mlp, sink=(
        "update.sink.never",
        "The update head's sink logit is -1e300, below every score the head produces (>= 0 for the maximal key), so"
        " it is never attended.", Fraction(-1e300), "-1e300", Fraction(0)))
    return assign, update


def _lab(layout: ResidualLayout, name: str, i: int) -> str:
    return name if layout.width(name) == 1 else f"{name}[{i}]"


def identity_block(layout: ResidualLayout, rows: str, cols: str, value: Fraction, formula: str) -> tuple[Entry, ...]:
    """The whole ``rows x cols`` block: ``value`` on the diagonal, 0 off it (the block is ``value * I``)."""
    return tuple(
        Entry(_lab(layout, rows, i), _lab(layout, cols, j), value if i == j else Fraction(0), formula if i == j else "0")
        for i in range(layout.width(rows)) for j in range(layout.width(cols))
    )


# ---------------------------------------------------------------------------------------------------------------
# Running the specs on a model


def check_block(layout: ResidualLayout, params: LayerParams, spec: BlockSpec) -> dict[str, tuple[str, list[str]]]:
    """``{obligation name: (method, problems)}`` for one layer."""
    idx = _index(layout)
    label = lambda i: coordinate_label(layout, i)  # noqa: E731
    out: dict[str, tuple[str, list[str]]] = {}
    qk = qk_form(params.head)
    named, zero = check_form(qk, spec.qk, idx, idx, label, label, "W_QK")
    exact_method = "exact rational entries of the (bias-augmented) form, from the state dict"
    for name, problems in named.items():
        out[name] = (exact_method, problems)
    out[f"{spec.kind}.QK.zero_elsewhere"] = (exact_method, zero)
    ov, b_O = ov_form(params.head)
    named, zero = check_form(ov, spec.ov, idx, idx, label, label, "W_OV",
                             extra_zero={f"b_O[{layout.labels[i]}]": v for i, v in b_O.items()})
    for name, problems in named.items():
        out[name] = (exact_method, problems)
    out[f"{spec.kind}.OV.zero_elsewhere"] = (exact_method, zero)
    if spec.sink is not None:
        name, _, value, formula, rel = spec.sink
        got = params.head.sinks
        if got is None:
            problems = ["the head has no attention sink"]
        else:
            problems = [] if abs(exact(got) - value) <= rel * abs(value) else [
                f"sink logit = {got!r}, intended {formula} = {_show(value)}"]
        out[name] = ("exact rational value of the sink parameter", problems)
    units = mlp_units(params.mlp)
    b_out = {i: exact(float(params.mlp.b_out[i])) for i in range(layout.d_model) if params.mlp.b_out[i] != 0}
    mlp = check_mlp(layout, units, b_out, spec.mlp)
    region = "region by region over the valid domain, exact"
    for g in spec.mlp.groups:
        out[g.name] = (region, mlp[g.name])
    out[f"{spec.kind}.MLP.support"] = ("exact sparsity of live units + " + region, mlp["support"])
    return out


def block_statements(spec: BlockSpec) -> list[tuple[str, str, str]]:
    """(name, component, statement) of every obligation of a block spec, in order."""
    rows = [(s.name, "QK", s.statement) for s in spec.qk]
    rows.append((f"{spec.kind}.QK.zero_elsewhere", "QK", spec.qk_zero_statement))
    if spec.sink is not None:
        rows.append((spec.sink[0], "QK", spec.sink[1]))
    rows += [(s.name, "OV", s.statement) for s in spec.ov]
    rows.append((f"{spec.kind}.OV.zero_elsewhere", "OV", spec.ov_zero_statement))
    rows.append((f"{spec.kind}.MLP.support", "MLP", spec.mlp.support_statement))
    rows += [(g.name, "MLP", g.statement) for g in spec.mlp.groups]
    return rows


def check_unembed(layout: ResidualLayout, params: ModelParams) -> list[str]:
    idx = _index(layout)
    cols = {f"logit[{j}]": j for j in range(params.W_U.shape[1])}
    spec = FormSpec("unembed.reads_y", "", tuple(Entry(_lab(layout, "Y", i), f"logit[{j}]", Fraction(int(i == j)),
                                                       "1" if i == j else "0")
                                                 for i in range(layout.k) for j in range(layout.k)))
    if params.W_U.shape[1] != layout.k:
        return [f"W_U has {params.W_U.shape[1]} logits, intended k = {layout.k}"]
    named, zero = check_form(unembed_form(params.W_U, params.b_U), (spec,), idx, cols,
                             lambda i: coordinate_label(layout, i), lambda j: f"logit[{j}]", "W_U")
    return named["unembed.reads_y"] + [z.replace(f"W_U[{BIAS},", "b_U[") for z in zero]


UNEMBED_STATEMENT = ("The unembedding reads exactly the assignment: W_U maps Y[j] to logit j, every other entry and"
                     " b_U are 0, so the logits at a point are its assignment.")

#: Configuration the block equations assume (field -> required value); fields a TransformerLens version lacks are skipped.
REQUIRED_CONFIG: dict[str, object] = {
    "n_heads": 1,
    "attention_dir": "bidirectional",
    "normalization_type": None,
    "act_fn": "relu",
    "gated_mlp": True,
    "attn_only": False,
    "parallel_attn_mlp": False,
    "positional_embedding_type": "standard",
    "use_normalization_before_and_after": False,
    "use_qk_norm": False,
    "use_local_attn": False,
    "scale_attn_by_inverse_layer_idx": False,
    "use_attention_sinks": False,
    "clip_qkv": None,
    "use_logn_attn": False,
    "n_key_value_heads": None,
    "original_architecture": None,
    "post_embedding_ln": False,
    "final_rms": False,
    "num_experts": None,
}

ARCHITECTURE_STATEMENT = (
    "The configuration is the one the block equations assume: one head per block, bidirectional attention with no"
    " score scaling or soft-capping, no normalisation, a gated ReLU MLP after the attention (not in parallel), no"
    " positional terms in the scores (inputs enter the residual stream with start_at_layer=0)."
)

SEMANTICS_STATEMENT = (
    "TransformerLens computes the block equations the proof reasons about (scores = (xW_Q+b_Q)(xW_K+b_K)^T,"
    " softmax, out = pattern (xW_V+b_V) W_O + b_O, resid_mid = x + out, gated MLP on resid_mid, W_U): compared"
    " stage by stage on a random residual. Numeric evidence, not part of the proof."
)


def check_architecture(cfg, overrides: dict[str, object] | None = None) -> list[str]:
    """Configuration fields that differ from :data:`REQUIRED_CONFIG` (with a variant's ``overrides``)."""
    problems = []
    missing = object()
    for name, required in {**REQUIRED_CONFIG, **(overrides or {})}.items():
        value = getattr(cfg, name, missing)
        if value is missing:
            continue
        if value != required:
            problems.append(f"cfg.{name} = {value!r}, required {required!r}")
    if getattr(cfg, "use_attn_scale", False) and getattr(cfg, "attn_scale", 1.0) != 1.0:
        problems.append(f"cfg.use_attn_scale is on (scores divided by {cfg.attn_scale})")
    for cap in ("attn_scores_soft_cap", "output_logits_soft_cap"):
        value = getattr(cfg, cap, -1.0)
        if value is not None and value > 0:
            problems.append(f"cfg.{cap} = {value} (scores soft-capped)")
    return problems


def check_semantics(model, params: ModelParams, seed: int = 0, n_tokens: int = 7) -> list[str]:
    """Stage-by-stage comparison of TransformerLens' forward pass with the equations, on a random residual."""
    import numpy as np
    import torch

    from circuits import hook_names

    rng = np.random.default_rng(seed)
    d_model = params.W_U.shape[0]
    x = rng.normal(size=(1, n_tokens, d_model)) * 0.3
    names = set()
    for layer in range(len(params.layers)):
        names |= {hook_names.resid_pre(layer), hook_names.attn_scores(layer), hook_names.pattern(layer),
                  hook_names.attn_out(layer), hook_names.resid_mid(layer), hook_names.mlp_out(layer),
                  hook_names.resid_post(layer)}
    with torch.no_grad():
        logits, cache = model.run_with_cache(torch.as_tensor(x, dtype=model.cfg.dtype), start_at_layer=0,
                                             names_filter=hook_names.names_filter(names))
    eps = float(torch.finfo(model.cfg.dtype).eps)
    get = lambda name: cache[name][0].double().cpu().numpy()  # noqa: E731
    problems = []

    def close(name: str, got, want) -> None:
        scale = max(1.0, float(np.abs(want).max()))
        err = float(np.abs(got - want).max())
        if err > 1e3 * eps * scale * d_model:
            problems.append(f"{name}: differs from the equation by {err:.3g}")

    for lp in params.layers:
        h, m = lp.head, lp.mlp
        r = get(hook_names.resid_pre(lp.layer))
        scores = (r @ h.W_Q + h.b_Q) @ (r @ h.W_K + h.b_K).T
        close(hook_names.attn_scores(lp.layer), get(hook_names.attn_scores(lp.layer))[0], scores)
        s = get(hook_names.attn_scores(lp.layer))[0]
        if h.sinks is not None:
            # A sink is one more key with logit `sinks` and value 0: it joins the softmax and is dropped after.
            s = np.concatenate([s, np.full((s.shape[0], 1), h.sinks)], axis=1)
        p = np.exp(s - s.max(axis=-1, keepdims=True))
        p = p / p.sum(axis=-1, keepdims=True)
        close(hook_names.pattern(lp.layer), get(hook_names.pattern(lp.layer))[0], p[:, : n_tokens])
        pattern = get(hook_names.pattern(lp.layer))[0]
        out = pattern @ (r @ h.W_V + h.b_V) @ h.W_O + h.b_O
        close(hook_names.attn_out(lp.layer), get(hook_names.attn_out(lp.layer)), out)
        mid = get(hook_names.resid_mid(lp.layer))
        close(hook_names.resid_mid(lp.layer), mid, r + get(hook_names.attn_out(lp.layer)))
        mlp = (np.maximum(mid @ m.W_gate, 0) * (mid @ m.W_in) + m.b_in) @ m.W_out + m.b_out
        close(hook_names.mlp_out(lp.layer), get(hook_names.mlp_out(lp.layer)), mlp)
        close(hook_names.resid_post(lp.layer), get(hook_names.resid_post(lp.layer)), mid + get(hook_names.mlp_out(lp.layer)))
    final = get(hook_names.resid_post(len(params.layers) - 1))
    close("logits", logits[0].double().cpu().numpy(), final @ params.W_U + params.b_U)
    return problems
