"""The Lloyd construction's obligations, stated in the named basis independently of :mod:`circuits.blocks`.

The prover checks the weights against these specs, so they say again, from the paper's equations, what the builder
should have produced: the assign head scores ``-beta |x - c_j|^2`` up to the query's constant and a tie-break, the
update head averages members' coordinates into ``C_stage``, and the MLPs commit the staged values.
"""

from __future__ import annotations

from fractions import Fraction

from analysis.proof.algebra import Poly, exact
from analysis.proof.obligations.specs import (
    BlockSpec, Entry, FormSpec, MLPGroup, MLPSpec, identity_block, label, squared_norm_change, var,
)
from circuits.blocks import ASSIGN, UPDATE
from circuits.layout import ResidualLayout


def lloyd_assign_spec(layout: ResidualLayout, sharp) -> BlockSpec:
    """The assign block's statements (QK, OV, MLP). Long because it is a declaration: one statement after another,
    each with its text, as the proof report prints them."""
    beta, M, tau = exact(sharp.beta), exact(sharp.mask), exact(sharp.tie_break)
    k = layout.k
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
            tuple(Entry("IS_POINT", label(layout, "ID", j), -beta * tau * j, "-beta*tie_break*" + str(j), rounded=True)
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
        return {label(layout, "Y", j): var(layout, "Y_stage", j).scale(flags["IS_POINT"]) - var(layout, "Y", j)
                for j in range(layout.k)}

    def clear(layout: ResidualLayout, flags: dict[str, int]) -> dict[str, Poly]:
        return {label(layout, "Y_stage", j): -var(layout, "Y_stage", j) for j in range(layout.k)}

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
        ASSIGN, qk,
        "Every other entry of the assign head's QK form is exactly 0, biases b_Q and b_K included: scores depend on"
        " nothing else.",
        ov,
        "Every other entry of the assign head's OV map is 0 (b_V*W_O and b_O included): the head writes only Y_stage.",
        mlp,
    )


def lloyd_update_spec(layout: ResidualLayout, sharp) -> BlockSpec:
    """The update block's statements (QK, OV, MLP); long for the same reason as :func:`lloyd_assign_spec`."""
    bu = exact(sharp.beta_update)
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
        return {label(layout, "C", m): (var(layout, "C_stage", m) - var(layout, "C", m)).scale(flags["IS_CENTROID"])
                for m in range(layout.d)}

    def clear(layout: ResidualLayout, flags: dict[str, int]) -> dict[str, Poly]:
        return {label(layout, "C_stage", m): -var(layout, "C_stage", m) for m in range(layout.d)}

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
        UPDATE, qk,
        "Every other entry of the update head's QK form is exactly 0, biases included.",
        ov,
        "Every other entry of the update head's OV map is 0 (b_V*W_O and b_O included): the head writes only C_stage.",
        mlp,
    )
