"""The hard-attention theorem, executed: the proven pieces compose into one Lloyd iteration per (U, A) pair.

Hard attention: every softmax is replaced by *hardmax*, the uniform distribution over the keys of maximal score
(the limit of the softmax as the scores' scale grows). Coordinates are the encoder's unit-scaled ones: every point
and every initial centroid lies in the closed unit ball.

Theorem. Let the obligations of :mod:`analysis.proof.obligations` hold. Write ``t_j`` for the tie-break the assign
head's key ``j`` pays (``tie_break * j`` rounded once to float64) and ``V_ij = |x_i - c_j|^2 + t_j``. Feed the
circuit the encoded problem (points ``x_i``, initial centroids ``c^0_j`` in ``C_stage``). If at every assignment each
point has a unique minimiser ``a(i) = argmin_j V_ij``, then under hard attention

* after layer ``2t`` (an update) ``C`` holds Lloyd's centroids ``c^t``, ``N = |c^t|^2`` and both staging slots are 0;
* after layer ``2t + 1`` (an assign) ``Y`` at point ``i`` is the one-hot of ``a^t(i) = argmin_j V_ij(c^t)``;
* the logits at point ``i`` are that one-hot, for the final centroids;

where ``c^{t+1}_j`` is the mean of the points with ``a^t(i) = j``, or ``c^t_j`` when there are none. With
``t_0 < t_1 < ... < t_{k-1}`` (a positive tie-break) an exact tie in distance goes to the lowest index; a point
whose distances differ by less than the tie-break's spread goes to the lower index as well (the price of the
rule, reported as a tie by the verifier). A point with two minimisers of ``V`` (distances differing by exactly
``t_j - t_l``) is split evenly by hardmax; the theorem excludes it, and the finite-sharpness certificate reports
its margin as 0.

Each step below is executed on the circuit's actual weights: scores and values are computed symbolically (sympy,
exact rationals from the state dict) for generic tokens of each type and compared with the claimed expressions;
conditions on the knobs are checked in exact arithmetic; the MLP steps apply the changes the MLP obligations proved
and check that the state lies in the domain they were proven on. Finally the whole circuit is run on small random
problems in exact rational arithmetic with hardmax attention and compared with Lloyd's algorithm in exact rational
arithmetic (evidence, marked CHECKED, not part of the proof).

Variants with an obligation set run the same steps with their blocks' specs: damped updates move ``C`` a fraction
``eta`` of the way (``BlockSpec.step``; centroids may then leave the unit ball, which the masking step accounts
for), and trimmed assignments add an attention sink, a virtual key with value 0 that takes the points farther
than its threshold (outliers, ``Y = 0``, left out of every update).
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from analysis.proof.exact import ModelParams, Sparse, ov_form, qk_form
from analysis.proof.algebra import Poly
from analysis.proof.obligations import (
    CHECKED, FAILED, PROVED, MLPSpec, Obligation, _lab, lloyd_assign_spec, lloyd_update_spec, token_flags,
)
from circuits.layout import ResidualLayout

# ---------------------------------------------------------------------------------------------------------------
# Symbolic tokens


def _R(f: Fraction):
    import sympy

    return sympy.Rational(f.numerator, f.denominator)


class SymbolicTokens:
    """Generic tokens of a valid Lloyd state, as sympy vectors over the residual (plus the constant ``bias``)."""

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

    def vector(self, kind: str, **values) -> list:
        """Residual of a token of type ``kind`` with subspaces set from ``values`` (sequences or scalars)."""
        L = self.layout
        vec = [self.sp.Integer(0)] * (L.d_model + 1)
        vec[L.d_model] = self.sp.Integer(1)  # the bias coordinate
        vec[L.index("ONE")] = self.sp.Integer(1)
        vec[L.index({"point": "IS_POINT", "centroid": "IS_CENTROID", "bos": "IS_BOS"}[kind])] = self.sp.Integer(1)
        for name, value in values.items():
            seq = value if isinstance(value, (list, tuple)) else [value]
            for i, v in enumerate(seq):
                vec[L.index(name, i)] = self.sp.sympify(v)
        return vec

    def onehot(self, j: int, k: int) -> list:
        return [self.sp.Integer(int(i == j)) for i in range(k)]


def poly_value(poly: Poly, values: dict):
    """Evaluate an exact polynomial in coordinate labels at ``values`` (numbers or sympy expressions)."""
    import sympy

    total = sympy.Integer(0)
    for mono, c in poly.terms.items():
        term = _R(c)
        for v in mono:
            term = term * values[v]
        total += term
    return sympy.expand(total)


def apply_delta(spec: MLPSpec, layout: ResidualLayout, token_type: str, state: dict) -> dict:
    """``state + change`` for the coordinates in ``state``, with the changes the MLP obligations proved."""
    out = dict(state)
    for group in spec.groups:
        for label, poly in group.delta(layout, token_flags(token_type)).items():
            if label in out:
                out[label] = state[label] + poly_value(poly, state)
    return out


def score(form: Sparse, q: list, k: list):
    """Exact bilinear form on symbolic vectors."""
    import sympy

    total = sympy.Integer(0)
    for (i, j), v in form.items():
        if q[i] != 0 and k[j] != 0:
            total += _R(v) * q[i] * k[j]
    return sympy.expand(total)


def value_out(ov: Sparse, b_O: dict[int, Fraction], key: list, d_model: int) -> list:
    """What one attended key writes into the query's residual (without the pattern weight, plus ``b_O``)."""
    import sympy

    out = [sympy.Integer(0)] * d_model
    for (i, o), v in ov.items():
        if key[i] != 0:
            out[o] += _R(v) * key[i]
    for o, v in b_O.items():
        out[o] += _R(v)
    return [sympy.expand(e) for e in out]


# ---------------------------------------------------------------------------------------------------------------
# Steps


class _Steps:
    def __init__(self, obligations: dict[str, Obligation]):
        self.rows: list[Obligation] = []
        self.obligations = obligations

    def add(self, name: str, statement: str, problems: list[str], uses: tuple[str, ...] = (), detail: str = "",
            status_ok: str = PROVED) -> None:
        broken = [u for u in uses if u in self.obligations and not self.obligations[u].ok]
        missing = [u for u in uses if u not in self.obligations]
        why = list(problems)
        if broken:
            why.append("depends on failed obligation(s) " + ", ".join(broken))
        if missing:
            why.append("obligation(s) not checked: " + ", ".join(missing))
        method = "uses " + ", ".join(uses) if uses else "symbolic computation on the weights"
        text = "; ".join(why[:4]) if why else detail
        self.rows.append(Obligation(name, "theorem", statement, FAILED if why else status_ok, method, [], text))


def _check_eq(sp, got, want, what: str, problems: list[str]) -> None:
    if sp.expand(got - want) != 0:
        problems.append(f"{what} = {_short(got)}, claimed {_short(want)}")


def _short(expr, limit: int = 160) -> str:
    text = str(expr)
    return text if len(text) <= limit else text[:limit] + " ..."


def lloyd_theorem(circuit, params: ModelParams, obligations: dict[str, Obligation], examples: int = 1,
                  seed: int = 0, specs=None) -> list[Obligation]:
    """Execute the theorem's steps on the circuit's weights; one row per step.

    ``specs(layer)`` gives each layer's :class:`~analysis.proof.obligations.BlockSpec` (default: Lloyd's); an update
    spec's ``step`` (``eta``) makes the commit a damped one, ``C + eta (C_stage - C)``.
    """
    import sympy as sp

    from circuits.blocks import ASSIGN, UPDATE

    layout, sharp = circuit.layout, circuit.sharpness
    L, d, k = layout, layout.d, layout.k
    if specs is None:
        assign_default, update_default = lloyd_assign_spec(layout, sharp), lloyd_update_spec(layout, sharp)
        specs = lambda layer: assign_default if circuit.schedule[layer] == "assign" else update_default  # noqa: E731
    steps = _Steps(obligations)
    T = SymbolicTokens(layout)
    beta, M = _R(Fraction(sharp.beta)), _R(Fraction(sharp.mask))
    bu = _R(Fraction(sharp.beta_update))
    t = [Fraction(float(sharp.tie_break * j)) for j in range(k)]
    # The theorem runs once for each distinct set of weights of each kind (layers are usually tied).
    groups: dict[tuple[str, str, int], list[int]] = {}
    for lp in params.layers:
        groups.setdefault((circuit.schedule[lp.layer], lp.fingerprint(), id(specs(lp.layer))), []).append(lp.layer)
    assign_layers = [layers[0] for (kind, _, _), layers in groups.items() if kind == ASSIGN]
    update_layers = [layers[0] for (kind, _, _), layers in groups.items() if kind == UPDATE]
    roles = {layers[0]: layers for layers in groups.values()}
    x2 = sum(xi**2 for xi in T.x)
    cc = sum(ci**2 for ci in T.c)
    dist = sum((xi - ci) ** 2 for xi, ci in zip(T.x, T.c))

    # --- assign block -------------------------------------------------------------------------------------------
    for layer in assign_layers:
        head = params.layers[layer].head
        qk = qk_form(head)
        ov, b_O = ov_form(head)
        tag = f"[L{layer}]" if len(assign_layers) > 1 else ""
        block = specs(layer)
        # The tie-breaks as the weights hold them: t_j = -W_QK[IS_POINT, ID[j]] / beta (the tie_break obligation
        # ties them to tie_break * j up to one rounding; the steps below use these exact values).
        t = [-qk.get((L.index("IS_POINT"), L.index("ID", j)), Fraction(0)) / Fraction(sharp.beta) for j in range(k)]
        # Variants with the exact-distance channel (trimmed) read NX = |x|^2 and drop it from every score.
        nx = 1 if any(f.name == "assign.QK.exact_distance" for f in block.qk) else 0
        problems: list[str] = []
        point_q = T.vector("point", X=list(T.x), Y=list(T.y), **({"NX": x2} if nx else {}))
        for j in range(k):
            cent = T.vector("centroid", C=list(T.c), N=cc, ID=T.onehot(j, k))
            _check_eq(sp, score(qk, point_q, cent), beta * ((1 - nx) * x2 - dist - _R(t[j])), f"score(point, centroid {j})",
                      problems)
        point_k = T.vector("point", X=list(T.x2), Y=list(T.y2), N=T.n2)
        masked = -beta * M - beta * T.n2 - nx * beta * x2
        _check_eq(sp, score(qk, point_q, point_k), masked, "score(point, point)", problems)
        bos_k = T.vector("bos", N=T.n2)
        _check_eq(sp, score(qk, point_q, bos_k), masked, "score(point, BOS)", problems)
        steps.add(
            "theorem.assign.point_scores" + tag,
            ("A point query x (any Y, NX = |x|^2) scores centroid key j, holding c_j and N = |c_j|^2, with exactly"
             " -beta*(|x - c_j|^2 + t_j); point and BOS keys (any N' >= 0) get -beta*(mask + N' + |x|^2)." if nx else
             "A point query x (any Y) scores centroid key j, holding c_j and N = |c_j|^2, with"
             " beta*(|x|^2 - |x - c_j|^2 - t_j); point and BOS keys (any N' >= 0) get -beta*(mask + N')."),
            problems, uses=("assign.QK.distance", "assign.QK.tie_break", "assign.QK.mask", "assign.QK.zero_elsewhere")
            + (("assign.QK.exact_distance",) if nx else ()),
            detail=f"computed for j = 0..{k - 1} with d = {d} symbolic coordinates: score(x, c_j) minus the claimed"
                   f" expression expands to 0",
        )
        # Masked keys lose; the argmax over centroids is the tie-broken nearest centroid.
        problems = []
        t_max = max(t)
        # Points and initial centroids lie in the unit ball, and so do means; a damped step c + eta (m - c) with
        # eta > 1 can leave it: |c| <= (eta - 1)|c| + eta stays below eta / (2 - eta).
        eta = _later_step(circuit, specs)
        radius = Fraction(1) if eta <= 1 else max(Fraction(1), eta / (2 - eta))
        far = (1 + radius) ** 2
        slack = Fraction(sharp.mask) - far - t_max
        if not beta > 0:
            problems.append("beta <= 0")
        if not slack > 0:
            problems.append(f"mask - (1 + r_c)^2 - t_max = {float(slack):.6g} <= 0 with centroids of norm up to"
                            f" r_c = {float(radius):g}: a centroid's score is not guaranteed to beat the masked keys")
        steps.add(
            "theorem.assign.argmax" + tag,
            "For a point query, every centroid key beats every point or BOS key: with |x| <= 1 and |c_j| <= r_c"
            " (r_c = 1: the unit ball holds the points, the initial centroids and every mean), score(centroid) >="
            " beta*(|x|^2 - (1 + r_c)^2 - t_max) > -beta*mask >= score(masked), since beta > 0 and"
            " mask - (1 + r_c)^2 - t_max > 0. So the hardmax keys of point i are argmin_j V_ij, V_ij = |x_i - c_j|^2 + t_j.",
            problems, uses=("assign.QK.distance", "assign.QK.tie_break", "assign.QK.mask", "assign.QK.zero_elsewhere"),
            detail=f"beta = {float(beta):g} > 0; r_c = {float(radius):g}; mask - (1 + r_c)^2 - t_max = {float(slack):.6g}"
                   f" > 0 (slack for the encoder's rounding of the unit ball)",
        )
        increasing = all(t[j] < t[j + 1] for j in range(k - 1))
        if sharp.tie_break > 0:
            steps.add(
                "theorem.assign.tie_rule" + tag,
                "The tie-breaks increase strictly, t_0 = 0 < t_1 < ... < t_{k-1}: of centroids at exactly equal"
                " distance the lowest index has the smallest V, so exact ties go to the lowest index. A point whose"
                " distances differ by less than t_j - t_l also goes to the lower index l.",
                [] if increasing and t[0] == 0 else [f"tie-breaks not strictly increasing: {[float(v) for v in t]}"],
                detail=f"t_j - t_(j-1) >= {float(min((t[j + 1] - t[j] for j in range(k - 1)), default=Fraction(0))):.6g}",
            )
        else:
            steps.add(
                "theorem.assign.tie_rule" + tag,
                "tie_break = 0: there is no tie rule; a point with two exactly nearest centroids is split evenly by"
                " hardmax, so the theorem covers only points with a unique nearest centroid.",
                [],
            )
        if block.sink is not None:
            # The attention sink: a virtual key with value 0 and a fixed logit.
            problems = []
            sink = head.sinks
            if sink is None:
                problems.append("the head has no sink")
                theta_eff = Fraction(0)
            else:
                theta_eff = -Fraction(sink) / Fraction(sharp.beta)
                theta = Fraction(block.sink[2]) / -Fraction(sharp.beta) - Fraction(sharp.tie_break) * k
                if not theta_eff - theta > max(t):
                    problems.append("a point exactly at the threshold would not stay in (theta_eff - theta <= t_max)")
                if not (theta_eff < Fraction(sharp.mask) or theta_eff > 4 + max(t)):
                    problems.append("the sink could lose to masked keys for an outlier")
            steps.add(
                "theorem.assign.sink" + tag,
                "With the sink logit -beta*theta_eff, a point query attends to its tie-broken nearest centroid when"
                " min_j V_ij < theta_eff and to the sink alone (value 0: Y_stage = 0, an outlier) when min_j V_ij >"
                " theta_eff; theta_eff exceeds theta + t_max, so a point exactly at the threshold stays in, and the sink"
                " beats every masked key (theta_eff < mask) unless no point can be an outlier (theta_eff > 4 + t_max).",
                problems, uses=(block.sink[0],),
                detail=f"theta_eff = {float(theta_eff):.17g}",
            )
        # Centroid and BOS queries attend to the sink; values.
        problems = []
        cent_q = T.vector("centroid", C=list(T.c), N=cc, ID=T.onehot(0, k))
        bos_q = T.vector("bos")
        sink_cent = score(qk, cent_q, T.vector("bos"))
        sink_bos = score(qk, bos_q, T.vector("bos"))
        for qname, q, sink in (("centroid", cent_q, sink_cent), ("BOS", bos_q, sink_bos)):
            if not (sink.is_number and sink > 0):
                problems.append(f"score({qname}, BOS) = {_short(sink)} is not a positive constant")
            for kname, key in (("point", point_k), ("centroid", T.vector("centroid", C=list(T.c2), N=T.n2, ID=T.onehot(k - 1, k)))):
                s = score(qk, q, key)
                if s != 0:
                    problems.append(f"score({qname}, {kname}) = {_short(s)}, claimed 0")
        v_cent = [value_out(ov, b_O, T.vector("centroid", C=list(T.c), N=cc, ID=T.onehot(j, k)), L.d_model) for j in range(k)]
        v_point = value_out(ov, b_O, T.vector("point", X=list(T.x), Y=list(T.y)), L.d_model)
        v_bos = value_out(ov, b_O, T.vector("bos"), L.d_model)
        for j in range(k):
            want = [sp.Integer(0)] * L.d_model
            want[L.index("Y_stage", j)] = sp.Integer(1)
            if v_cent[j] != want:
                problems.append(f"value of centroid key {j} is not e_{j} in Y_stage")
        if any(e != 0 for e in v_point):
            problems.append("a point key's value is not 0")
        if any(e != 0 for e in v_bos):
            problems.append("the BOS key's value is not 0")
        steps.add(
            "theorem.assign.values" + tag,
            "Centroid and BOS queries score the BOS key beta*mask > 0 and every other key 0, so they attend to BOS"
            " alone. Values: centroid key j writes e_j into Y_stage, point and BOS keys write 0. Hence after the head"
            " Y_stage = e_a(i) at point i (hardmax on its unique minimiser) and Y_stage = 0 on other tokens.",
            problems, uses=("assign.QK.mask", "assign.QK.zero_elsewhere", "assign.OV.id_to_y_stage",
                            "assign.OV.zero_elsewhere"),
            detail=f"score(centroid, BOS) = {float(sink_cent):g}, score(BOS, BOS) = {float(sink_bos):g}",
        )
        # MLP: apply the change the MLP obligations proved, on the post-attention states.
        problems = []
        spec = specs(layer).mlp
        for a in [*range(k), *([None] if block.sink is not None else [])]:
            for old in [None, *range(k)]:
                state = {_lab(L, "Y_stage", j): int(j == a) for j in range(k)}
                state.update({_lab(L, "Y", j): int(j == old) for j in range(k)})
                if any(v < 0 for v in state.values()):
                    problems.append("post-attention point state outside the MLP's domain")
                new = apply_delta(spec, L, "point", state)
                if [new[_lab(L, "Y", j)] for j in range(k)] != [int(j == a) for j in range(k)] or \
                        any(new[_lab(L, "Y_stage", j)] for j in range(k)):
                    problems.append(f"point: assignment {a} after {old} is not committed")
        for kind in ("centroid", "bos"):
            state = {_lab(L, "Y_stage", j): 0 for j in range(k)} | {_lab(L, "Y", j): 0 for j in range(k)}
            if any(apply_delta(spec, L, kind, state)[lab] != 0 for lab in state):
                problems.append(f"{kind} tokens change")
        steps.add(
            "theorem.assign.commit" + tag,
            "The post-attention state lies in the MLP's domain (Y_stage = e_a >= 0, Y in {0, e_b}, flags one-hot),"
            " so by the MLP obligations Y becomes e_a(i) on points, Y_stage becomes 0, other tokens and coordinates"
            " are unchanged: the assign block maps (X, C, Y) to (X, C, e_a).",
            problems, uses=("assign.MLP.commit", "assign.MLP.clear_stage", "assign.MLP.support"),
            detail=f"the proven changes applied for every new assignment a and old assignment (none or b), k = {k}",
        )

    # --- update block -------------------------------------------------------------------------------------------
    for layer in update_layers:
        head = params.layers[layer].head
        qk = qk_form(head)
        ov, b_O = ov_form(head)
        tag = f"[L{layer}]" if len(update_layers) > 1 else ""
        problems = []
        for j in range(k):
            cent_q = T.vector("centroid", C=list(T.c), N=cc, ID=T.onehot(j, k), C_stage=list(T.s))
            _check_eq(sp, score(qk, cent_q, T.vector("point", X=list(T.x), Y=list(T.y), N=T.n2)), bu * T.y[j],
                      f"score(centroid {j}, point)", problems)
            for l in range(k):
                key = T.vector("centroid", C=list(T.c2), N=T.n2, ID=T.onehot(l, k))
                _check_eq(sp, score(qk, cent_q, key), bu / 2 if l == j else 0, f"score(centroid {j}, centroid {l})", problems)
            _check_eq(sp, score(qk, cent_q, T.vector("bos", N=T.n2)), 0, f"score(centroid {j}, BOS)", problems)
        for qname, q in (("point", T.vector("point", X=list(T.x), Y=list(T.y))), ("BOS", T.vector("bos"))):
            _check_eq(sp, score(qk, q, T.vector("bos", N=T.n2)), bu, f"score({qname}, BOS)", problems)
            _check_eq(sp, score(qk, q, T.vector("point", X=list(T.x2), Y=list(T.y2), N=T.n2)), 0, f"score({qname}, point)", problems)
            _check_eq(sp, score(qk, q, T.vector("centroid", C=list(T.c2), N=T.n2, ID=T.onehot(0, k))), 0,
                      f"score({qname}, centroid)", problems)
        steps.add(
            "theorem.update.scores" + tag,
            "A centroid query j scores beta_update*y_j on a point key with assignment y, beta_update/2 on its own"
            " key and 0 on other centroids and BOS; point and BOS queries score BOS beta_update and everything else 0.",
            problems, uses=("update.QK.membership", "update.QK.self", "update.QK.sink", "update.QK.zero_elsewhere"),
            detail=f"computed for every pair of centroids j, l (k = {k}) with symbolic coordinates and assignments",
        )
        steps.add(
            "theorem.update.argmax" + tag,
            "With one-hot assignments and beta_update > 0, members score beta_update > beta_update/2 (own key) > 0"
            " (everything else): the hardmax keys of centroid j are its members if it has any, else its own key;"
            " point and BOS queries attend to BOS alone.",
            [] if bu > 0 else ["beta_update <= 0"], detail=f"beta_update = {float(bu):g}",
            uses=("update.QK.membership", "update.QK.self", "update.QK.sink", "update.QK.zero_elsewhere"),
        )
        problems = []
        vp = value_out(ov, b_O, T.vector("point", X=list(T.x), Y=list(T.y), N=T.n2), L.d_model)
        vc = value_out(ov, b_O, T.vector("centroid", C=list(T.c), N=cc, ID=T.onehot(0, k), C_stage=list(T.s)), L.d_model)
        vb = value_out(ov, b_O, T.vector("bos", N=T.n2), L.d_model)
        for vname, got, src in (("point", vp, T.x), ("centroid", vc, T.c)):
            want = [sp.Integer(0)] * L.d_model
            for m in range(d):
                want[L.index("C_stage", m)] = src[m]
            if [sp.expand(a - b) for a, b in zip(got, want)] != [0] * L.d_model:
                problems.append(f"value of a {vname} key is not its coordinates in C_stage")
        if any(e != 0 for e in vb):
            problems.append("the BOS key's value is not 0")
        steps.add(
            "theorem.update.values" + tag,
            "A point key's value is its x in C_stage, a centroid key's is its C, BOS's is 0. So centroid j's C_stage"
            " gains the mean of its members' x (or its own C when it has none); point and BOS tokens gain 0.",
            problems, uses=("update.OV.coordinates_to_c_stage", "update.OV.zero_elsewhere"),
        )
        # MLP on the two kinds of update input: the first block (C = 0, C_stage = c0) and later ones (C_stage = 0).
        problems = []
        spec = specs(layer)
        eta = _R(spec.step)
        cases = []
        if 0 in roles[layer]:
            cases.append(("first update", [0] * d, list(T.s), 0, list(T.s)))
        if any(other > 0 for other in roles[layer]):
            cases.append(("later update, members (C_stage = their mean m)", list(T.c), list(T.x), cc,
                          [T.c[m] + eta * (T.x[m] - T.c[m]) for m in range(d)]))
            cases.append(("later update, empty cluster (C_stage = own C)", list(T.c), list(T.c), cc, list(T.c)))
        for case, C, Cs, N, want in cases:
            state = {_lab(L, "C", m): C[m] for m in range(d)} | {_lab(L, "C_stage", m): Cs[m] for m in range(d)}
            state["N"] = N
            new = apply_delta(spec.mlp, L, "centroid", state)
            if any(sp.expand(new[_lab(L, "C", m)] - want[m]) != 0 for m in range(d)) \
                    or sp.expand(new["N"] - sum(v**2 for v in want)) != 0 \
                    or any(sp.expand(new[_lab(L, "C_stage", m)]) != 0 for m in range(d)):
                problems.append(f"{case}: C, N, C_stage are not (new centroid, its squared norm, 0)")
        for kind in ("point", "bos"):
            state = {_lab(L, "C", m): 0 for m in range(d)} | {_lab(L, "C_stage", m): 0 for m in range(d)} | {"N": 0}
            if "NX" in L:
                # Variants that keep |x|^2: NX becomes |X|^2 (X = x on points, 0 on BOS), from any NX >= 0.
                xs = list(T.x) if kind == "point" else [0] * d
                state |= {_lab(L, "X", m): xs[m] for m in range(d)} | {"NX": T.n2}
            new = apply_delta(spec.mlp, L, kind, state)
            if "NX" in L and sp.expand(new.pop("NX") - sum(v**2 for v in state_x(L, state, d))) != 0:
                problems.append(f"{kind} tokens: NX is not |x|^2")
            if any(sp.expand(new[lab] - state[lab]) != 0 for lab in new if lab.startswith("X")) or \
                    any(sp.expand(v) != 0 for lab, v in new.items() if not lab.startswith("X")):
                problems.append(f"{kind} tokens change")
        if head.sinks is not None and not head.sinks < 0:
            problems.append(f"the update head's sink logit {head.sinks!r} is not below 0, the smallest maximal score")
        moves = "becomes the staged centroid" if spec.step == 1 else f"moves a fraction eta = {float(spec.step):g} of the way to the staged centroid"
        steps.add(
            "theorem.update.commit" + tag,
            f"N >= 0 and C, C_stage are real, so by the MLP obligations C {moves}, N becomes the squared norm of the new"
            " C and C_stage 0 on centroid tokens; point and BOS tokens are unchanged. "
            + ("First block (C = 0, C_stage = c0): C = c0. " if 0 in roles[layer] else "")
            + ("Later blocks (C_stage = 0 before the head): C = " + ("mean of the members" if spec.step == 1 else
               "c + eta*(mean of the members - c)") + ", or the old C for an empty cluster. "
               if any(other > 0 for other in roles[layer]) else "")
            + "Means of points in the unit ball stay in it (convexity).",
            problems, uses=tuple(g.name for g in spec.mlp.groups) + ("update.MLP.support",)
            + ((spec.sink[0],) if spec.sink is not None else ()),
            detail="the proven changes applied symbolically to " + ", ".join(c[0] for c in cases),
        )

    # --- unembedding and composition ------------------------------------------------------------------------------
    problems = []
    U = {(i, j): Fraction(float(params.W_U[i, j])) for i, j in zip(*np.nonzero(params.W_U))}
    point = T.vector("point", X=list(T.x), Y=list(T.y))
    for j in range(min(k, params.W_U.shape[1])):
        logit = sp.expand(sum(_R(v) * point[i] for (i, jj), v in U.items() if jj == j) + _R(Fraction(float(params.b_U[j]))))
        _check_eq(sp, logit, T.y[j], f"logit {j} at a point", problems)
    steps.add("theorem.unembed", "The logits at a point are its Y: after the last assign block, its assignment.",
              problems, uses=("unembed.reads_y",))
    steps.add(
        "theorem.composition",
        "By induction over the schedule U A (U A)^T: the encoder's state (C = 0, N = 0, C_stage = c0, Y = 0)"
        " is mapped by the first U to (C = c0, N = |c0|^2); each following A then U performs one Lloyd iteration"
        " (assignment to the tie-broken nearest centroid" + (", or none (an outlier, Y = 0) when every V exceeds the"
        " sink's threshold" if any(specs(layer).sink is not None for layer in assign_layers) else "")
        + ", then " + ("means" if _later_step(circuit, specs) == 1 else "c + eta*(mean - c)")
        + ", empty clusters kept); the last A leaves the"
        " final assignment in Y, which the unembedding reads. This holds whenever every assignment has a unique"
        " minimiser of V.",
        [], uses=("model.architecture", "model.schedule"),
    )
    if examples:
        steps.rows.append(run_examples(circuit, params, examples, seed, eta=_later_step(circuit, specs)))
    return steps.rows


# ---------------------------------------------------------------------------------------------------------------
# The theorem, run: exact rational forward pass with hardmax attention vs exact Lloyd.


def state_x(L: ResidualLayout, state: dict, d: int) -> list:
    return [state[_lab(L, "X", m)] for m in range(d)]


def _later_step(circuit, specs) -> Fraction:
    """The step of the update blocks after the first (1 for Lloyd's)."""
    later = [layer for layer, kind in enumerate(circuit.schedule) if kind == "update" and layer > 0]
    return specs(later[0]).step if later else Fraction(1)


def _sparse_cols(W: np.ndarray) -> list[list[tuple[int, Fraction]]]:
    return [[(int(i), Fraction(float(W[i, c]))) for i in np.flatnonzero(W[:, c])] for c in range(W.shape[1])]


def hard_forward(params: ModelParams, resid: list[list[Fraction]]) -> list[list[list[Fraction]]]:
    """Run every block on ``resid`` (tokens x d_model, Fractions) with hardmax attention; return each resid_post."""
    states = []
    zero = Fraction(0)
    for lp in params.layers:
        h, m = lp.head, lp.mlp
        Qc, Kc, Vc = _sparse_cols(h.W_Q), _sparse_cols(h.W_K), _sparse_cols(h.W_V)
        Oc = _sparse_cols(h.W_O)  # per output coordinate o: the head dimensions writing it
        bq, bk, bv = ([Fraction(float(v)) for v in b] for b in (h.b_Q, h.b_K, h.b_V))
        bo = [Fraction(float(v)) for v in h.b_O]
        sink = None if h.sinks is None else Fraction(h.sinks)

        def proj(cols, bias, r):
            return [sum((r[i] * w for i, w in col), zero) + b for col, b in zip(cols, bias)]

        q = [proj(Qc, bq, r) for r in resid]
        kk = [proj(Kc, bk, r) for r in resid]
        v = [proj(Vc, bv, r) for r in resid]
        new = []
        for a, qa in enumerate(q):
            s = [sum((x * y for x, y in zip(qa, kb) if x and y), zero) for kb in kk]
            top = max(s) if sink is None else max(max(s), sink)
            chosen = [b for b, sb in enumerate(s) if sb == top]
            # A sink (use_attention_sinks) is one more key with value 0: it counts in the average, adds nothing.
            share = len(chosen) + (1 if sink is not None and sink == top else 0)
            z = [sum((v[b][c] for b in chosen), zero) / share for c in range(len(bv))]
            out = [sum((z[c] * w for c, w in col), zero) + bo[o] for o, col in enumerate(Oc)]
            new.append([x + y for x, y in zip(resid[a], out)])
        Gc, Ic = _sparse_cols(m.W_gate), _sparse_cols(m.W_in)
        Wout = [[(int(o), Fraction(float(m.W_out[u, o]))) for o in np.flatnonzero(m.W_out[u])] for u in range(m.W_out.shape[0])]
        b_in = [Fraction(float(b)) for b in m.b_in]
        b_out = [Fraction(float(b)) for b in m.b_out]
        post = []
        for r in new:
            acc = list(r)
            for o, b in enumerate(b_out):
                acc[o] += b
            for u in range(len(Gc)):
                if not Wout[u]:
                    continue
                g = sum((r[i] * w for i, w in Gc[u]), zero)
                act = (max(g, zero) * sum((r[i] * w for i, w in Ic[u]), zero)) + b_in[u]
                if act:
                    for o, w in Wout[u]:
                        acc[o] += act * w
            post.append(acc)
        resid = post
        states.append(resid)
    return states


def exact_lloyd(X: list[list[Fraction]], C0: list[list[Fraction]], iterations: int, t: list[Fraction],
                eta: Fraction = Fraction(1), theta: Fraction | None = None):
    """Lloyd in exact arithmetic with the circuit's rule: argmin |x - c_j|^2 + t_j, means, empty clusters kept
    (``eta != 1``: damped, each centroid moves a fraction ``eta`` of the way to its mean; ``theta``: trimmed, a
    point with ``min_j |x - c_j|^2 + t_j > theta`` is an outlier, label -1, left out of the update)."""
    C = [list(c) for c in C0]
    cents, labs = [C], []
    for it in range(iterations + 1):
        labels = []
        for x in X:
            V = [sum(((a - b) ** 2 for a, b in zip(x, c)), Fraction(0)) + t[j] for j, c in enumerate(C)]
            best = min(V)
            if V.count(best) > 1 or best == theta:
                return None  # a split point: outside the theorem
            labels.append(-1 if theta is not None and best > theta else V.index(best))
        labs.append(labels)
        if it < iterations:
            new = []
            for j, c in enumerate(C):
                members = [x for x, lab in zip(X, labels) if lab == j]
                mean = [sum(col, Fraction(0)) / len(members) for col in zip(*members)] if members else list(c)
                new.append([a + eta * (m - a) for a, m in zip(c, mean)])
            C = new
            cents.append(C)
    return cents, labs


def run_examples(circuit, params: ModelParams, examples: int, seed: int = 0, eta: Fraction = Fraction(1)) -> Obligation:
    # Trimmed circuits: the threshold is what the assign head's sink logit says (its obligation ties it to radius).
    """Run the exact hardmax circuit on small random problems; compare every layer with exact Lloyd."""
    from circuits.blocks import ASSIGN, UPDATE

    layout, sharp = circuit.layout, circuit.sharpness
    L, d, k = layout, layout.d, layout.k
    t = [Fraction(float(sharp.tie_break * j)) for j in range(k)]
    rng = np.random.default_rng(seed)
    # Grid coordinates (exact in float64) inside the unit ball: many exact ties, which exercise the tie rule.
    denom = 2 ** int(np.ceil(np.log2(4 * np.sqrt(d) + 1)))
    problems, ran = [], 0
    for _ in range(examples):
        n = k + 3
        X = [[Fraction(int(v), denom) for v in row] for row in rng.integers(-4, 5, size=(n, d))]
        rows = rng.choice(n, size=k, replace=False)
        C0 = [list(X[r]) for r in rows]
        sinks = [lp.head.sinks for lp in params.layers if circuit.schedule[lp.layer] == ASSIGN]
        theta = None if sinks[0] is None else -Fraction(sinks[0]) / Fraction(sharp.beta)
        ref = exact_lloyd(X, C0, circuit.iterations, t, eta, theta)
        if ref is None:
            continue
        ran += 1
        cents, labs = ref
        resid = []
        for pos in range(1 + n + k):
            r = [Fraction(0)] * L.d_model
            r[L.index("ONE")] = Fraction(1)
            if pos == 0:
                r[L.index("IS_BOS")] = Fraction(1)
            elif pos <= n:
                r[L.index("IS_POINT")] = Fraction(1)
                for m in range(d):
                    r[L.index("X", m)] = X[pos - 1][m]
            else:
                j = pos - 1 - n
                r[L.index("IS_CENTROID")] = Fraction(1)
                r[L.index("ID", j)] = Fraction(1)
                for m in range(d):
                    r[L.index("C_stage", m)] = C0[j][m]
            resid.append(r)
        states = hard_forward(params, resid)
        it_u = it_a = 0
        for layer, state in enumerate(states):
            kind = circuit.schedule[layer]
            if kind == UPDATE:
                for j in range(k):
                    row = state[1 + n + j]
                    c = [row[L.index("C", m)] for m in range(d)]
                    if c != cents[it_u][j] or row[L.index("N")] != sum((v * v for v in c), Fraction(0)):
                        problems.append(f"layer {layer}: centroid {j} (C or N) differs from the exact reference")
                    if any(row[L.index("C_stage", m)] for m in range(d)):
                        problems.append(f"layer {layer}: C_stage not emptied")
                it_u += 1
            elif kind == ASSIGN:
                for i in range(n):
                    row = state[1 + i]
                    y = [row[L.index("Y", j)] for j in range(k)]
                    if y != [Fraction(int(j == labs[it_a][i])) for j in range(k)]:
                        problems.append(f"layer {layer}: point {i} is not assigned like the exact reference")
                it_a += 1
        if problems:
            break
    return Obligation(
        "theorem.examples", "theorem",
        f"Executed: the whole circuit in exact rational arithmetic with hardmax attention, on {ran} random grid"
        f" problem(s) (n = k + 3, exact ties included), equals exact Lloyd at every layer. Evidence, not proof.",
        FAILED if problems else CHECKED, "exact forward pass (Fractions) vs exact Lloyd", [],
        "; ".join(problems[:3]),
    )
