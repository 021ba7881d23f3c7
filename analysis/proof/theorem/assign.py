"""The theorem's assign-block steps: a point attends to its tie-broken nearest centroid, and ``Y`` commits it.

Under hardmax, the point query's scores (:func:`point_scores`) make every centroid beat every masked key
(:func:`centroids_beat_masked_keys`), the tie-breaks order equally near centroids (:func:`tie_rule`), a trimmed
head's sink takes the outliers (:func:`sink_threshold`), the values write the winner's one-hot into ``Y_stage``
(:func:`assign_values`) and the MLP moves it to ``Y`` (:func:`assign_commit`).
"""

from __future__ import annotations

from fractions import Fraction

from analysis.proof.exact import HeadParams, ov_form, qk_form
from analysis.proof.obligations.specs import BlockSpec, labels
from analysis.proof.theorem.symbolic import apply_delta, check_eq, rational, score, short, subspace_state, value_out
from analysis.proof.theorem.steps import TheoremContext

SCORE_USES = ("assign.QK.distance", "assign.QK.tie_break", "assign.QK.mask", "assign.QK.zero_elsewhere")


def tie_breaks(ctx: TheoremContext, head: HeadParams) -> list[Fraction]:
    """The tie-breaks as the weights hold them: ``t_j = -W_QK[IS_POINT, ID[j]] / beta`` (the ``tie_break``
    obligation ties them to ``tie_break * j`` up to one rounding; the steps use these exact values)."""
    L, qk = ctx.layout, qk_form(head)
    return [-qk.get((L.index("IS_POINT"), L.index("ID", j)), Fraction(0)) / Fraction(ctx.sharp.beta) for j in range(L.k)]


def point_scores(ctx: TheoremContext, head: HeadParams, block: BlockSpec, t: list[Fraction], tag: str) -> None:
    """A point query scores centroid ``j`` by ``-beta V_ij`` (plus a constant of the query); masked keys far below."""
    T, qk, beta, k = ctx.tokens, qk_form(head), ctx.beta, ctx.layout.k
    # Variants with the exact-distance channel (trimmed) read NX = |x|^2 and drop it from every score.
    nx = 1 if any(f.name == "assign.QK.exact_distance" for f in block.qk) else 0
    problems: list[str] = []
    point_q = T.vector("point", X=list(T.x), Y=list(T.y), **({"NX": T.x_sq} if nx else {}))
    for j in range(k):
        check_eq(score(qk, point_q, T.centroid(j)), beta * ((1 - nx) * T.x_sq - T.dist - rational(t[j])),
                 f"score(point, centroid {j})", problems)
    masked = -beta * ctx.mask - beta * T.n2 - nx * beta * T.x_sq
    check_eq(score(qk, point_q, T.other_point()), masked, "score(point, point)", problems)
    check_eq(score(qk, point_q, T.vector("bos", N=T.n2)), masked, "score(point, BOS)", problems)
    ctx.steps.add(
        "theorem.assign.point_scores" + tag,
        ("A point query x (any Y, NX = |x|^2) scores centroid key j, holding c_j and N = |c_j|^2, with exactly"
         " -beta*(|x - c_j|^2 + t_j); point and BOS keys (any N' >= 0) get -beta*(mask + N' + |x|^2)." if nx else
         "A point query x (any Y) scores centroid key j, holding c_j and N = |c_j|^2, with"
         " beta*(|x|^2 - |x - c_j|^2 - t_j); point and BOS keys (any N' >= 0) get -beta*(mask + N')."),
        problems, uses=SCORE_USES + (("assign.QK.exact_distance",) if nx else ()),
        detail=f"computed for j = 0..{k - 1} with d = {ctx.layout.d} symbolic coordinates: score(x, c_j) minus the"
               f" claimed expression expands to 0",
    )


def centroid_radius(ctx: TheoremContext) -> Fraction:
    """How far from 0 a centroid can be: points, initial centroids and means lie in the unit ball; a damped step
    ``c + eta (m - c)`` with ``eta > 1`` can leave it, ``|c| <= (eta - 1)|c| + eta`` stays below ``eta / (2 - eta)``."""
    eta = ctx.later_step
    return Fraction(1) if eta <= 1 else max(Fraction(1), eta / (2 - eta))


def centroids_beat_masked_keys(ctx: TheoremContext, t: list[Fraction], tag: str) -> None:
    """The argmax over keys is the tie-broken nearest centroid: every centroid beats every masked key."""
    radius = centroid_radius(ctx)
    slack = Fraction(ctx.sharp.mask) - (1 + radius) ** 2 - max(t)
    problems = []
    if not ctx.beta > 0:
        problems.append("beta <= 0")
    if not slack > 0:
        problems.append(f"mask - (1 + r_c)^2 - t_max = {float(slack):.6g} <= 0 with centroids of norm up to"
                        f" r_c = {float(radius):g}: a centroid's score is not guaranteed to beat the masked keys")
    ctx.steps.add(
        "theorem.assign.argmax" + tag,
        "For a point query, every centroid key beats every point or BOS key: with |x| <= 1 and |c_j| <= r_c"
        " (r_c = 1: the unit ball holds the points, the initial centroids and every mean), score(centroid) >="
        " beta*(|x|^2 - (1 + r_c)^2 - t_max) > -beta*mask >= score(masked), since beta > 0 and"
        " mask - (1 + r_c)^2 - t_max > 0. So the hardmax keys of point i are argmin_j V_ij, V_ij = |x_i - c_j|^2 + t_j.",
        problems, uses=SCORE_USES,
        detail=f"beta = {float(ctx.beta):g} > 0; r_c = {float(radius):g}; mask - (1 + r_c)^2 - t_max = {float(slack):.6g}"
               f" > 0 (slack for the encoder's rounding of the unit ball)",
    )


def tie_rule(ctx: TheoremContext, t: list[Fraction], tag: str) -> None:
    """Strictly increasing tie-breaks send exact ties to the lowest index (none at ``tie_break = 0``)."""
    k = ctx.layout.k
    if not ctx.sharp.tie_break > 0:
        ctx.steps.add(
            "theorem.assign.tie_rule" + tag,
            "tie_break = 0: there is no tie rule; a point with two exactly nearest centroids is split evenly by"
            " hardmax, so the theorem covers only points with a unique nearest centroid.",
            [],
        )
        return
    increasing = all(t[j] < t[j + 1] for j in range(k - 1))
    ctx.steps.add(
        "theorem.assign.tie_rule" + tag,
        "The tie-breaks increase strictly, t_0 = 0 < t_1 < ... < t_{k-1}: of centroids at exactly equal"
        " distance the lowest index has the smallest V, so exact ties go to the lowest index. A point whose"
        " distances differ by less than t_j - t_l also goes to the lower index l.",
        [] if increasing and t[0] == 0 else [f"tie-breaks not strictly increasing: {[float(v) for v in t]}"],
        detail=f"t_j - t_(j-1) >= {float(min((t[j + 1] - t[j] for j in range(k - 1)), default=Fraction(0))):.6g}",
    )


def sink_threshold(ctx: TheoremContext, head: HeadParams, block: BlockSpec, t: list[Fraction], tag: str) -> None:
    """The attention sink (a virtual key with value 0 and a fixed logit) takes exactly the points beyond theta."""
    sharp, k = ctx.sharp, ctx.layout.k
    problems = []
    if head.sinks is None:
        problems.append("the head has no sink")
        theta_eff = Fraction(0)
    else:
        theta_eff = -Fraction(head.sinks) / Fraction(sharp.beta)
        theta = Fraction(block.sink.value) / -Fraction(sharp.beta) - Fraction(sharp.tie_break) * k
        if not theta_eff - theta > max(t):
            problems.append("a point exactly at the threshold would not stay in (theta_eff - theta <= t_max)")
        if not (theta_eff < Fraction(sharp.mask) or theta_eff > 4 + max(t)):
            problems.append("the sink could lose to masked keys for an outlier")
    ctx.steps.add(
        "theorem.assign.sink" + tag,
        "With the sink logit -beta*theta_eff, a point query attends to its tie-broken nearest centroid when"
        " min_j V_ij < theta_eff and to the sink alone (value 0: Y_stage = 0, an outlier) when min_j V_ij >"
        " theta_eff; theta_eff exceeds theta + t_max, so a point exactly at the threshold stays in, and the sink"
        " beats every masked key (theta_eff < mask) unless no point can be an outlier (theta_eff > 4 + t_max).",
        problems, uses=(block.sink.name,),
        detail=f"theta_eff = {float(theta_eff):.17g}",
    )


def _sink_scores_problems(ctx: TheoremContext, qk) -> tuple[list[str], object, object]:
    """Centroid and BOS queries: the BOS key scores a positive constant, every other key 0."""
    T, k = ctx.tokens, ctx.layout.k
    problems = []
    cent_q, bos_q = T.centroid(0), T.vector("bos")
    sink_cent, sink_bos = score(qk, cent_q, T.vector("bos")), score(qk, bos_q, T.vector("bos"))
    for qname, q, sink in (("centroid", cent_q, sink_cent), ("BOS", bos_q, sink_bos)):
        if not (sink.is_number and sink > 0):
            problems.append(f"score({qname}, BOS) = {short(sink)} is not a positive constant")
        for kname, key in (("point", T.other_point()), ("centroid", T.other_centroid(k - 1))):
            s = score(qk, q, key)
            if s != 0:
                problems.append(f"score({qname}, {kname}) = {short(s)}, claimed 0")
    return problems, sink_cent, sink_bos


def assign_values(ctx: TheoremContext, head: HeadParams, tag: str) -> None:
    """Centroid and BOS queries attend to BOS; centroid key ``j`` writes ``e_j`` into ``Y_stage``, others 0."""
    import sympy as sp

    T, L, k = ctx.tokens, ctx.layout, ctx.layout.k
    ov, b_O = ov_form(head)
    problems, sink_cent, sink_bos = _sink_scores_problems(ctx, qk_form(head))
    for j in range(k):
        want = [sp.Integer(0)] * L.d_model
        want[L.index("Y_stage", j)] = sp.Integer(1)
        if value_out(ov, b_O, T.centroid(j), L.d_model) != want:
            problems.append(f"value of centroid key {j} is not e_{j} in Y_stage")
    if any(e != 0 for e in value_out(ov, b_O, T.vector("point", X=list(T.x), Y=list(T.y)), L.d_model)):
        problems.append("a point key's value is not 0")
    if any(e != 0 for e in value_out(ov, b_O, T.vector("bos"), L.d_model)):
        problems.append("the BOS key's value is not 0")
    ctx.steps.add(
        "theorem.assign.values" + tag,
        "Centroid and BOS queries score the BOS key beta*mask > 0 and every other key 0, so they attend to BOS"
        " alone. Values: centroid key j writes e_j into Y_stage, point and BOS keys write 0. Hence after the head"
        " Y_stage = e_a(i) at point i (hardmax on its unique minimiser) and Y_stage = 0 on other tokens.",
        problems, uses=("assign.QK.mask", "assign.QK.zero_elsewhere", "assign.OV.id_to_y_stage",
                        "assign.OV.zero_elsewhere"),
        detail=f"score(centroid, BOS) = {float(sink_cent):g}, score(BOS, BOS) = {float(sink_bos):g}",
    )


def assign_commit(ctx: TheoremContext, block: BlockSpec, tag: str) -> None:
    """The MLP, applied as its obligations proved on the post-attention states, commits ``Y := Y_stage``."""
    L, k, spec = ctx.layout, ctx.layout.k, block.mlp
    problems = []
    onehot = lambda a: [int(j == a) for j in range(k)]  # noqa: E731  (a = None: all zeros)
    for a in [*range(k), *([None] if block.sink is not None else [])]:
        for old in [None, *range(k)]:
            state = subspace_state(L, Y_stage=onehot(a), Y=onehot(old))
            if any(v < 0 for v in state.values()):
                problems.append("post-attention point state outside the MLP's domain")
            new = apply_delta(spec, L, "point", state)
            if [new[name] for name in labels(L, "Y")] != onehot(a) or any(new[name] for name in labels(L, "Y_stage")):
                problems.append(f"point: assignment {a} after {old} is not committed")
    for kind in ("centroid", "bos"):
        state = subspace_state(L, Y_stage=[0] * k, Y=[0] * k)
        if any(apply_delta(spec, L, kind, state)[name] != 0 for name in state):
            problems.append(f"{kind} tokens change")
    ctx.steps.add(
        "theorem.assign.commit" + tag,
        "The post-attention state lies in the MLP's domain (Y_stage = e_a >= 0, Y in {0, e_b}, flags one-hot),"
        " so by the MLP obligations Y becomes e_a(i) on points, Y_stage becomes 0, other tokens and coordinates"
        " are unchanged: the assign block maps (X, C, Y) to (X, C, e_a).",
        problems, uses=("assign.MLP.commit", "assign.MLP.clear_stage", "assign.MLP.support"),
        detail=f"the proven changes applied for every new assignment a and old assignment (none or b), k = {k}",
    )


def prove_assign_block(ctx: TheoremContext, layer: int, tag: str) -> None:
    """Every step of the assign block whose weights are those of ``layer``."""
    head, block = ctx.params.layers[layer].head, ctx.specs(layer)
    t = tie_breaks(ctx, head)
    point_scores(ctx, head, block, t, tag)
    centroids_beat_masked_keys(ctx, t, tag)
    tie_rule(ctx, t, tag)
    if block.sink is not None:
        sink_threshold(ctx, head, block, t, tag)
    assign_values(ctx, head, tag)
    assign_commit(ctx, block, tag)
