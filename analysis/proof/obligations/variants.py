"""The obligations of the exact variants, as changes to Lloyd's specs (:mod:`analysis.proof.obligations.lloyd`).

* ``damped``: the update MLP moves ``C`` a fraction ``eta`` of the way to ``C_stage`` and keeps ``N`` the new
  centroid's squared norm;
* ``trimmed``: an exact-distance channel (``NX = |x|^2``) and an attention sink in the assign head, a sink that is
  never used in the update head, and ``NX`` kept by the update MLP.
"""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction

from analysis.proof.algebra import Poly, exact
from analysis.proof.obligations.lloyd import lloyd_assign_spec, lloyd_update_spec
from analysis.proof.obligations.specs import (
    UNIT_ROUNDOFF, BlockSpec, Entry, FormSpec, MLPGroup, MLPSpec, SinkSpec, label, squared_norm_change, var,
)
from circuits.layout import ResidualLayout


def damped_update_spec(layout: ResidualLayout, sharp, eta: float) -> BlockSpec:
    """The damped variant's update block: Lloyd's head; the MLP moves C a fraction ``eta`` towards C_stage and
    keeps N equal to the squared norm of the *new* C."""
    base = lloyd_update_spec(layout, sharp)
    e = exact(eta)

    def commit(layout: ResidualLayout, flags: dict[str, int]) -> dict[str, Poly]:
        return {label(layout, "C", m): (var(layout, "C_stage", m) - var(layout, "C", m)).scale(e * flags["IS_CENTROID"])
                for m in range(layout.d)}

    def square(layout: ResidualLayout, flags: dict[str, int]) -> dict[str, Poly]:
        total = -Poly.var("N")
        for m in range(layout.d):
            c, s = var(layout, "C", m), var(layout, "C_stage", m)
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
    return replace(base, mlp=replace(base.mlp, groups=groups), step=e)


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
    assign = replace(assign, qk=assign.qk + (exact_distance,), sink=SinkSpec(
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
    update = replace(update, mlp=mlp, sink=SinkSpec(
        "update.sink.never",
        "The update head's sink logit is -1e300, below every score the head produces (>= 0 for the maximal key), so"
        " it is never attended.", Fraction(-1e300), "-1e300", Fraction(0)))
    return assign, update
