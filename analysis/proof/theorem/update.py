"""The theorem's update-block steps: a centroid averages its members into ``C_stage``, and ``C`` commits it.

Under hardmax a centroid query attends to its members, or to its own key when it has none
(:func:`update_scores`, :func:`members_win`); the values are the keys' coordinates (:func:`update_values`), and
the MLP moves ``C`` to the staged centroid (or a fraction ``eta`` of the way) with ``N = |C|^2``
(:func:`update_commit`).
"""

from __future__ import annotations

from analysis.proof.exact import HeadParams, ov_form, qk_form
from analysis.proof.obligations.specs import BlockSpec, labels
from analysis.proof.theorem.symbolic import apply_delta, check_eq, rational, score, subspace_state, value_out
from analysis.proof.theorem.steps import TheoremContext

SCORE_USES = ("update.QK.membership", "update.QK.self", "update.QK.sink", "update.QK.zero_elsewhere")


def update_scores(ctx: TheoremContext, head: HeadParams, tag: str) -> None:
    """Centroid ``j`` scores ``beta_u y_j`` on a point, ``beta_u / 2`` on itself, 0 elsewhere; others look at BOS."""
    T, k, bu, qk = ctx.tokens, ctx.layout.k, ctx.beta_update, qk_form(head)
    problems: list[str] = []
    for j in range(k):
        cent_q = T.centroid(j, C_stage=list(T.s))
        check_eq(score(qk, cent_q, T.vector("point", X=list(T.x), Y=list(T.y), N=T.n2)), bu * T.y[j],
                 f"score(centroid {j}, point)", problems)
        for l in range(k):
            check_eq(score(qk, cent_q, T.other_centroid(l)), bu / 2 if l == j else 0,
                     f"score(centroid {j}, centroid {l})", problems)
        check_eq(score(qk, cent_q, T.vector("bos", N=T.n2)), 0, f"score(centroid {j}, BOS)", problems)
    for qname, q in (("point", T.vector("point", X=list(T.x), Y=list(T.y))), ("BOS", T.vector("bos"))):
        check_eq(score(qk, q, T.vector("bos", N=T.n2)), bu, f"score({qname}, BOS)", problems)
        check_eq(score(qk, q, T.other_point()), 0, f"score({qname}, point)", problems)
        check_eq(score(qk, q, T.other_centroid(0)), 0, f"score({qname}, centroid)", problems)
    ctx.steps.add(
        "theorem.update.scores" + tag,
        "A centroid query j scores beta_update*y_j on a point key with assignment y, beta_update/2 on its own"
        " key and 0 on other centroids and BOS; point and BOS queries score BOS beta_update and everything else 0.",
        problems, uses=SCORE_USES,
        detail=f"computed for every pair of centroids j, l (k = {k}) with symbolic coordinates and assignments",
    )


def members_win(ctx: TheoremContext, tag: str) -> None:
    """With one-hot assignments, a centroid's hardmax keys are its members, else its own key."""
    bu = ctx.beta_update
    ctx.steps.add(
        "theorem.update.argmax" + tag,
        "With one-hot assignments and beta_update > 0, members score beta_update > beta_update/2 (own key) > 0"
        " (everything else): the hardmax keys of centroid j are its members if it has any, else its own key;"
        " point and BOS queries attend to BOS alone.",
        [] if bu > 0 else ["beta_update <= 0"], detail=f"beta_update = {float(bu):g}", uses=SCORE_USES,
    )


def update_values(ctx: TheoremContext, head: HeadParams, tag: str) -> None:
    """A point key's value is its ``x`` in ``C_stage``, a centroid key's its ``C``, BOS's 0."""
    import sympy as sp

    T, L, d = ctx.tokens, ctx.layout, ctx.layout.d
    ov, b_O = ov_form(head)
    problems = []
    vp = value_out(ov, b_O, T.vector("point", X=list(T.x), Y=list(T.y), N=T.n2), L.d_model)
    vc = value_out(ov, b_O, T.centroid(0, C_stage=list(T.s)), L.d_model)
    vb = value_out(ov, b_O, T.vector("bos", N=T.n2), L.d_model)
    for vname, got, src in (("point", vp, T.x), ("centroid", vc, T.c)):
        want = [sp.Integer(0)] * L.d_model
        for m in range(d):
            want[L.index("C_stage", m)] = src[m]
        if [sp.expand(a - b) for a, b in zip(got, want)] != [0] * L.d_model:
            problems.append(f"value of a {vname} key is not its coordinates in C_stage")
    if any(e != 0 for e in vb):
        problems.append("the BOS key's value is not 0")
    ctx.steps.add(
        "theorem.update.values" + tag,
        "A point key's value is its x in C_stage, a centroid key's is its C, BOS's is 0. So centroid j's C_stage"
        " gains the mean of its members' x (or its own C when it has none); point and BOS tokens gain 0.",
        problems, uses=("update.OV.coordinates_to_c_stage", "update.OV.zero_elsewhere"),
    )


def commit_cases(ctx: TheoremContext, layer: int, block: BlockSpec) -> list[tuple[str, list, list, object, list]]:
    """The update inputs the layer's weights see: ``(case, C, C_stage, N, the C it must leave)``.

    The first update (``C = 0``, ``C_stage = c0``) commits the initial centroids; later ones (``C_stage = 0`` before
    the head) see their members' mean, or their own ``C`` for an empty cluster.
    """
    T, d, eta = ctx.tokens, ctx.layout.d, rational(block.step)
    layers = ctx.roles[layer]
    cases = []
    if ctx.first_update in layers:
        cases.append(("first update", [0] * d, list(T.s), 0, list(T.s)))
    if any(other > ctx.first_update for other in layers):
        cases.append(("later update, members (C_stage = their mean m)", list(T.c), list(T.x), T.c_sq,
                      [T.c[m] + eta * (T.x[m] - T.c[m]) for m in range(d)]))
        cases.append(("later update, empty cluster (C_stage = own C)", list(T.c), list(T.c), T.c_sq, list(T.c)))
    return cases


def _centroid_commit_problems(ctx: TheoremContext, block: BlockSpec, cases) -> list[str]:
    import sympy as sp

    L = ctx.layout
    problems = []
    for case, C, Cs, N, want in cases:
        new = apply_delta(block.mlp, L, "centroid", subspace_state(L, C=C, C_stage=Cs, N=N))
        if any(sp.expand(new[name] - want[m]) != 0 for m, name in enumerate(labels(L, "C"))) \
                or sp.expand(new["N"] - sum(v**2 for v in want)) != 0 \
                or any(sp.expand(new[name]) != 0 for name in labels(L, "C_stage")):
            problems.append(f"{case}: C, N, C_stage are not (new centroid, its squared norm, 0)")
    return problems


def _other_tokens_problems(ctx: TheoremContext, block: BlockSpec) -> list[str]:
    """Point and BOS tokens are unchanged (a variant's ``NX`` becomes ``|X|^2`` from any ``NX >= 0``)."""
    import sympy as sp

    T, L, d = ctx.tokens, ctx.layout, ctx.layout.d
    problems = []
    for kind in ("point", "bos"):
        state = subspace_state(L, C=[0] * d, C_stage=[0] * d, N=0)
        if "NX" in L:
            xs = list(T.x) if kind == "point" else [0] * d
            state |= subspace_state(L, X=xs, NX=T.n2)
        new = apply_delta(block.mlp, L, kind, state)
        if "NX" in L and sp.expand(new.pop("NX") - sum(state[name] ** 2 for name in labels(L, "X"))) != 0:
            problems.append(f"{kind} tokens: NX is not |x|^2")
        if any(sp.expand(new[name] - state[name]) != 0 for name in new if name.startswith("X")) or \
                any(sp.expand(v) != 0 for name, v in new.items() if not name.startswith("X")):
            problems.append(f"{kind} tokens change")
    return problems


def update_commit(ctx: TheoremContext, head: HeadParams, layer: int, tag: str) -> None:
    """The MLP, applied as its obligations proved, commits the staged centroid and its squared norm."""
    block = ctx.specs(layer)
    cases = commit_cases(ctx, layer, block)
    problems = _centroid_commit_problems(ctx, block, cases) + _other_tokens_problems(ctx, block)
    if head.sinks is not None and not head.sinks < 0:
        problems.append(f"the update head's sink logit {head.sinks!r} is not below 0, the smallest maximal score")
    damped = block.step != 1
    moves = f"moves a fraction eta = {float(block.step):g} of the way to the staged centroid" if damped \
        else "becomes the staged centroid"
    first = ctx.first_update in ctx.roles[layer]
    later = any(other > ctx.first_update for other in ctx.roles[layer])
    ctx.steps.add(
        "theorem.update.commit" + tag,
        f"N >= 0 and C, C_stage are real, so by the MLP obligations C {moves}, N becomes the squared norm of the new"
        " C and C_stage 0 on centroid tokens; point and BOS tokens are unchanged. "
        + ("First block (C = 0, C_stage = c0): C = c0. " if first else "")
        + ("Later blocks (C_stage = 0 before the head): C = " + ("c + eta*(mean of the members - c)" if damped else
           "mean of the members") + ", or the old C for an empty cluster. " if later else "")
        + "Means of points in the unit ball stay in it (convexity).",
        problems, uses=tuple(g.name for g in block.mlp.groups) + ("update.MLP.support",)
        + ((block.sink.name,) if block.sink is not None else ()),
        detail="the proven changes applied symbolically to " + ", ".join(c[0] for c in cases),
    )


def prove_update_block(ctx: TheoremContext, layer: int, tag: str) -> None:
    """Every step of the update block whose weights are those of ``layer``."""
    head = ctx.params.layers[layer].head
    update_scores(ctx, head, tag)
    members_win(ctx, tag)
    update_values(ctx, head, tag)
    update_commit(ctx, head, layer, tag)
