"""The blocks of one safeguarded-swap step, in the named residual basis (one head and one gated MLP each).

A step is :data:`STEP_BLOCKS`, in order; every step uses the same weights. ``beta``, ``tie_break``, ``mask`` are
the :class:`~circuits.sharpness.Sharpness` knobs, ``H = beta * mask``; see :mod:`circuits.swap.knobs`.

==================  ==============================================================  ================================
block               head                                                            MLP
==================  ==============================================================  ================================
nearest             point -> nearest current centroid: ``ID`` -> ``Y_stage``,       commit ``Y``; ``D1 = |x - c|^2``
                    ``C`` -> ``NEAR_stage``
second              point -> nearest current centroid other than its own ``Y``      ``D2 = |x - c|^2``
assign_lloyd        point -> nearest Lloyd's-reference centroid: ``ID_L``           commit ``Y_L``;
                                                                                    ``GAIN_j = Y_j (D2 - D1)``
removal             every token -> uniform over points: ``GAIN`` -> ``REM_stage``,   ``OWN_REM = ID . REM_stage``
                    ``D1`` -> ``OBJ0``
swap_slot           every token -> current centroid of least ``OWN_REM``            ``IS_SWAP = SWAP . ID_P``
                    (lower index on ties): ``ID`` -> ``SWAP_stage``
propose             proposal j -> current j, or (``IS_SWAP``) -> point of largest   commit ``C``, ``N`` on proposal
                    ``D1`` (lower index on ties): ``X + C`` -> ``C_stage``            tokens
assign_proposal     point -> nearest proposal centroid: ``ID_P`` -> ``Y_stage``     commit ``Y_P``
update              centroid of each group -> mean of its members (or itself)      commit ``C``, ``N`` (all groups)
distance_<cand>     point -> nearest centroid of the candidate's group             ``D_CAND[cand] = |x - c|^2``
objectives          every token -> uniform over points: ``D_CAND`` -> ``OBJ``       ``OWN_OBJ`` on centroid tokens
choose              every token -> centroid tokens of least ``OWN_OBJ``:            ``CHOICE`` = hardened stage
                    group flags -> ``CHOICE_stage``
select              current j -> token j of the chosen group: ``C`` -> ``C_stage``  commit ``C``, ``N`` on current
==================  ==============================================================  ================================

Queries with nothing to do look at the BOS sink, whose values are 0. Every staging slot is emptied by the MLP of
the block that fills it or a later block of the same step, and every state slot is overwritten (old value
erased) when it is written, so the steps need no re-embedding.
"""

from __future__ import annotations

from circuits.blocks import update_head, update_mlp
from circuits.layout import ResidualLayout
from circuits.swap.knobs import SwapKnobs
from circuits.swap.layout import CANDIDATE_GROUPS, SWAP_GROUPS, StepGroups
from circuits.weights import BlockWeights, HeadBuilder, MLPBuilder

# Every builder below takes the step's groups (``spec``, :class:`~circuits.swap.layout.StepGroups`): the swap
# circuit's by default; :mod:`circuits.learned.stages` passes its own (one more group, one more candidate).

#: The blocks of one step, in order.
STEP_BLOCKS: tuple[str, ...] = ("nearest", "second", "assign_lloyd", "removal", "swap_slot", "propose",
                                "assign_proposal", "update", *(f"distance_{c}" for c, _ in CANDIDATE_GROUPS),
                                "objectives", "choose", "select")
ONE = ("ONE", 0)


def _to_sink(head: HeadBuilder, big: float, queries: list[str]) -> None:
    """Queries with any of the flags ``queries`` look at the BOS sink (value 0) with score ``big``."""
    head.qk({(q, 0): big for q in queries}, {("IS_BOS", 0): 1.0})


def erase(mlp: MLPBuilder, name: str, i: int = 0) -> None:
    """Subtract the slot's value, whatever its sign: ``-relu(v) + relu(-v)``."""
    mlp.unit(gate={(name, i): 1.0}, linear={ONE: 1.0}, output={(name, i): -1.0})
    mlp.unit(gate={(name, i): -1.0}, linear={ONE: 1.0}, output={(name, i): 1.0})


def erase_all(mlp: MLPBuilder, name: str) -> None:
    for i in range(mlp.layout.width(name)):
        erase(mlp, name, i)


def square_distance(mlp: MLPBuilder, out: tuple[str, int]) -> None:
    """``out += |X - NEAR_stage|^2`` (exact: ``relu(u) u + relu(-u) (-u)``), erase ``out``'s old value and empty
    ``NEAR_stage``. On tokens other than points both are 0 and so is the result."""
    erase(mlp, *out)
    for m in range(mlp.layout.d):
        u = {("X", m): 1.0, ("NEAR_stage", m): -1.0}
        neg = {c: -v for c, v in u.items()}
        mlp.unit(gate=u, linear=u, output={out: 1.0})
        mlp.unit(gate=neg, linear=neg, output={out: 1.0})
    erase_all(mlp, "NEAR_stage")


def commit_one_hot(mlp: MLPBuilder, target: str, stage: str = "Y_stage", flag: str = "IS_POINT") -> None:
    """``target = stage`` on tokens with ``flag`` (both one-hot, >= 0), and empty ``stage``."""
    for j in range(mlp.layout.width(target)):
        mlp.unit(gate={(stage, j): 1.0}, linear={(flag, 0): 1.0}, output={(target, j): 1.0})
        mlp.unit(gate={(target, j): 1.0}, linear={ONE: 1.0}, output={(target, j): -1.0})
        mlp.unit(gate={(stage, j): 1.0}, linear={ONE: 1.0}, output={(stage, j): -1.0})


def commit_centroids(mlp: MLPBuilder, flag: str | tuple[str, ...]) -> None:
    """On tokens with ``flag`` (or any of several flags): ``C = C_stage`` and ``N = |C_stage|^2``; empty ``C_stage``
    everywhere. Other tokens have ``C_stage = 0`` (they looked at the sink) and keep ``C`` and ``N``."""
    flags = {(f, 0): 1.0 for f in ((flag,) if isinstance(flag, str) else flag)}
    for m in range(mlp.layout.d):
        s, c = ("C_stage", m), ("C", m)
        mlp.unit(gate={s: 1.0, c: -1.0}, linear=flags, output={c: 1.0})
        mlp.unit(gate={c: 1.0, s: -1.0}, linear=flags, output={c: -1.0})
        mlp.unit(gate={s: 1.0}, linear={s: 1.0}, output={("N", 0): 1.0})
        mlp.unit(gate={s: -1.0}, linear={s: -1.0}, output={("N", 0): 1.0})
        erase(mlp, *s)
    mlp.unit(gate={("N", 0): 1.0}, linear=flags, output={("N", 0): -1.0})


def nearest_head(layout: ResidualLayout, knobs: SwapKnobs, group: str, *, label: bool, second: bool = False,
                 spec: StepGroups = SWAP_GROUPS) -> HeadBuilder:
    """Point queries pick their nearest centroid of ``group`` (lower index on ties), or with ``second`` the nearest
    other than their own ``Y``; the key's ``C`` goes to ``NEAR_stage`` and, with ``label``, its identity to
    ``Y_stage``. Score on centroid j of the group: ``beta (2 x.c_j - |c_j|^2 - tie_break j)``."""
    sharp = knobs.sharpness
    beta, M, ident = sharp.beta, sharp.mask, spec.ident(group)
    head = HeadBuilder(layout)
    for m in range(layout.d):
        head.qk({("X", m): 2 * beta}, {("C", m): 1.0})
    penalty = {("N", 0): 1.0, ("IS_POINT", 0): M, ("IS_BOS", 0): M}
    penalty.update({(flag, 0): M for name, _, flag in spec.groups if name != group})
    penalty.update({(ident, j): sharp.tie_break * j for j in range(layout.k)})
    head.qk({("IS_POINT", 0): -beta}, penalty)
    if second:
        for j in range(layout.k):
            head.qk({(spec.assignment_of[group], j): -beta * M}, {(ident, j): 1.0})
    _to_sink(head, knobs.big, ["IS_CENTROID", "IS_BOS"])
    for m in range(layout.d):
        head.ov({("C", m): 1.0}, {("NEAR_stage", m): 1.0})
    if label:
        for j in range(layout.k):
            head.ov({(ident, j): 1.0}, {("Y_stage", j): 1.0})
    return head


def uniform_head(layout: ResidualLayout, knobs: SwapKnobs, values: list[tuple[str, str]]) -> HeadBuilder:
    """Every query attends uniformly to the points: the mean over points of each ``(source, target)`` slot."""
    head = HeadBuilder(layout)
    head.qk({ONE: knobs.big}, {("IS_POINT", 0): 1.0})
    for source, target in values:
        for i in range(layout.width(source)):
            head.ov({(source, i): 1.0}, {(target, i): 1.0})
    return head


def block(kind: str, head: HeadBuilder, mlp: MLPBuilder, knobs: SwapKnobs) -> BlockWeights:
    return BlockWeights(kind, head.build(), mlp.build(), notes=knobs.to_dict())


def nearest_block(layout: ResidualLayout, knobs: SwapKnobs, spec: StepGroups = SWAP_GROUPS) -> BlockWeights:
    mlp = MLPBuilder(layout)
    commit_one_hot(mlp, "Y")
    square_distance(mlp, ("D1", 0))
    return block("nearest", nearest_head(layout, knobs, "current", label=True, spec=spec), mlp, knobs)


def second_block(layout: ResidualLayout, knobs: SwapKnobs, spec: StepGroups = SWAP_GROUPS) -> BlockWeights:
    mlp = MLPBuilder(layout)
    square_distance(mlp, ("D2", 0))
    return block("second", nearest_head(layout, knobs, "current", label=False, second=True, spec=spec), mlp, knobs)


def assign_lloyd_block(layout: ResidualLayout, knobs: SwapKnobs, spec: StepGroups = SWAP_GROUPS) -> BlockWeights:
    """Assign the points to Lloyd's reference centroids; the MLP also writes the removal-cost terms."""
    mlp = MLPBuilder(layout)
    commit_one_hot(mlp, "Y_L")
    erase_all(mlp, "NEAR_stage")
    for j in range(layout.k):
        erase(mlp, "GAIN", j)
        mlp.unit(gate={("Y", j): 1.0}, linear={("D2", 0): 1.0, ("D1", 0): -1.0}, output={("GAIN", j): 1.0})
    return block("assign_lloyd", nearest_head(layout, knobs, "lloyd", label=True, spec=spec), mlp, knobs)


def removal_block(layout: ResidualLayout, knobs: SwapKnobs) -> BlockWeights:
    head = uniform_head(layout, knobs, [("GAIN", "REM_stage"), ("D1", "OBJ0")])
    mlp = MLPBuilder(layout)
    erase(mlp, "OWN_REM")
    for j in range(layout.k):
        mlp.unit(gate={("ID", j): 1.0}, linear={("REM_stage", j): 1.0}, output={("OWN_REM", 0): 1.0})
    erase_all(mlp, "REM_stage")
    return block("removal", head, mlp, knobs)


def swap_slot_block(layout: ResidualLayout, knobs: SwapKnobs, spec: StepGroups = SWAP_GROUPS) -> BlockWeights:
    """Every query finds the current centroid of least removal cost; proposal token j* learns it is the one."""
    sharp = knobs.sharpness
    head = HeadBuilder(layout)
    key = {("OWN_REM", 0): 1.0, **{("ID", j): sharp.tie_break * j for j in range(layout.k)}}
    head.qk({ONE: -sharp.beta}, key)
    others = {(flag, 0): 1.0 for name, _, flag in spec.groups if name != "current"}
    head.qk({ONE: -knobs.big}, {("IS_POINT", 0): 1.0, ("IS_BOS", 0): 1.0, **others})
    for j in range(layout.k):
        head.ov({("ID", j): 1.0}, {("SWAP_stage", j): 1.0})
    mlp = MLPBuilder(layout)
    erase(mlp, "IS_SWAP")
    for j in range(layout.k):
        mlp.unit(gate={("SWAP_stage", j): 1.0}, linear={("ID_P", j): 1.0}, output={("IS_SWAP", 0): 1.0})
    erase_all(mlp, "SWAP_stage")
    erase(mlp, "OBJ0")
    return block("swap_slot", head, mlp, knobs)


def propose_block(layout: ResidualLayout, knobs: SwapKnobs, spec: StepGroups = SWAP_GROUPS) -> BlockWeights:
    """Proposal token j copies current centroid j, except the swap token, which takes the farthest point. The MLP
    also commits the groups of ``spec.with_proposal`` (their ``C_stage`` was written by an earlier block).

    Scores of a proposal query: ``H`` on current token j; with ``IS_SWAP``, ``-2 H`` more on every centroid and
    the sink, and ``beta (D1 - tie_break * i / n)`` on point i (no large term, so the points compare exactly)."""
    sharp, H = knobs.sharpness, knobs.big
    head = HeadBuilder(layout)
    for j in range(layout.k):
        head.qk({("ID_P", j): H}, {("ID", j): 1.0})
    head.qk({("IS_SWAP", 0): sharp.beta}, {("D1", 0): 1.0, ("PIDX", 0): -sharp.tie_break})
    head.qk({("IS_SWAP", 0): -2 * H}, {("IS_CENTROID", 0): 1.0, ("IS_BOS", 0): 1.0})
    _to_sink(head, 4 * H, ["IS_POINT", "IS_BOS", *(flag for name, _, flag in spec.groups if name != "proposal")])
    for m in range(layout.d):
        head.ov({("X", m): 1.0, ("C", m): 1.0}, {("C_stage", m): 1.0})
    mlp = MLPBuilder(layout)
    commit_centroids(mlp, ("G_P", *(spec.flag(g) for g in spec.with_proposal)))
    return block("propose", head, mlp, knobs)


def assign_block(layout: ResidualLayout, knobs: SwapKnobs, group: str, kind: str,
                 spec: StepGroups = SWAP_GROUPS) -> BlockWeights:
    """Points take their nearest centroid of ``group``: its assignment subspace is committed."""
    mlp = MLPBuilder(layout)
    commit_one_hot(mlp, spec.assignment_of[group])
    erase_all(mlp, "NEAR_stage")
    return block(kind, nearest_head(layout, knobs, group, label=True, spec=spec), mlp, knobs)


def assign_proposal_block(layout: ResidualLayout, knobs: SwapKnobs, spec: StepGroups = SWAP_GROUPS) -> BlockWeights:
    return assign_block(layout, knobs, "proposal", "assign_proposal", spec)


def update_block(layout: ResidualLayout, knobs: SwapKnobs, spec: StepGroups = SWAP_GROUPS) -> BlockWeights:
    """Lloyd's update for every group at once: the Lloyd circuit's update head with a channel per group."""
    head = update_head(layout, knobs.sharpness)
    b = knobs.sharpness.beta_update
    for name, ident, _ in spec.groups[1:]:
        for j in range(layout.k):
            head.qk({(ident, j): b}, {(spec.assignment_of[name], j): 1.0, (ident, j): 0.5})
    return block("update", head, update_mlp(layout), knobs)


def distance_block(layout: ResidualLayout, knobs: SwapKnobs, candidate: str,
                   spec: StepGroups = SWAP_GROUPS) -> BlockWeights:
    group = dict(spec.candidates)[candidate]
    mlp = MLPBuilder(layout)
    square_distance(mlp, ("D_CAND", spec.slot(candidate)))
    return block(f"distance_{candidate}", nearest_head(layout, knobs, group, label=False, spec=spec), mlp, knobs)


def objectives_block(layout: ResidualLayout, knobs: SwapKnobs, spec: StepGroups = SWAP_GROUPS) -> BlockWeights:
    """Each candidate's objective / n on every token; a centroid token keeps its own candidate's, tie-ordered:
    ``OWN_OBJ = OBJ_r (1 + select_margin r) + select_floor r`` for the candidate of rank r (its tie-order index)."""
    head = uniform_head(layout, knobs, [("D_CAND", "OBJ")])
    mlp = MLPBuilder(layout)
    for cand, group in spec.candidates:
        r = spec.ranks[cand]
        mlp.unit(gate={(spec.flag(group), 0): 1.0},
                 linear={("OBJ", spec.slot(cand)): 1.0 + knobs.select_margin * r, ONE: knobs.select_floor * r},
                 output={("OWN_OBJ", 0): 1.0})
    return block("objectives", head, mlp, knobs)


def choose_block(layout: ResidualLayout, knobs: SwapKnobs, spec: StepGroups = SWAP_GROUPS) -> BlockWeights:
    """Every query attends to the candidates' centroid tokens of least ``OWN_OBJ`` (score ``-beta_select * OWN_OBJ``,
    no large term on them; groups that hold no candidate are masked like points) and reads their group flags; the MLP
    hardens the one-hot: ``clamp(2 s - 1/2, 0, 1)``."""
    head = HeadBuilder(layout)
    head.qk({ONE: -knobs.beta_select}, {("OWN_OBJ", 0): 1.0})
    bystanders = {(flag, 0): 1.0 for name, _, flag in spec.groups if name not in dict(spec.candidates).values()}
    head.qk({ONE: -knobs.select_mask}, {("IS_POINT", 0): 1.0, ("IS_BOS", 0): 1.0, **bystanders})
    for cand, group in spec.candidates:
        head.ov({(spec.flag(group), 0): 1.0}, {("CHOICE_stage", spec.slot(cand)): 1.0})
    mlp = MLPBuilder(layout)
    for r in range(len(spec.candidates)):
        s, c = ("CHOICE_stage", r), ("CHOICE", r)
        erase(mlp, *c)
        mlp.unit(gate={s: 2.0, ONE: -0.5}, linear={ONE: 1.0}, output={c: 1.0})
        mlp.unit(gate={s: 2.0, ONE: -1.5}, linear={ONE: 1.0}, output={c: -1.0})
        erase(mlp, *s)
    erase(mlp, "OWN_OBJ")
    return block("choose", head, mlp, knobs)


def select_block(layout: ResidualLayout, knobs: SwapKnobs, spec: StepGroups = SWAP_GROUPS) -> BlockWeights:
    """Current token j (and token j of every group of ``spec.selected``) takes token j of the chosen group (score
    2H; every other key at most H)."""
    H = knobs.big
    head = HeadBuilder(layout)
    for j in range(layout.k):
        head.qk({(spec.ident(g), j): H for g in spec.selected}, {(ident, j): 1.0 for _, ident, _ in spec.groups})
    for cand, group in spec.candidates:
        head.qk({("CHOICE", spec.slot(cand)): H}, {(spec.flag(group), 0): 1.0})
    _to_sink(head, 4 * H, ["IS_POINT", "IS_BOS", *(flag for name, _, flag in spec.groups if name not in spec.selected)])
    for m in range(layout.d):
        head.ov({("C", m): 1.0}, {("C_stage", m): 1.0})
    mlp = MLPBuilder(layout)
    commit_centroids(mlp, tuple(spec.flag(g) for g in spec.selected))
    erase_all(mlp, "OBJ")
    return block("select", head, mlp, knobs)


def step_blocks(layout: ResidualLayout, knobs: SwapKnobs) -> list[BlockWeights]:
    """The blocks of one step, in :data:`STEP_BLOCKS` order."""
    out = [nearest_block(layout, knobs), second_block(layout, knobs), assign_lloyd_block(layout, knobs),
           removal_block(layout, knobs), swap_slot_block(layout, knobs), propose_block(layout, knobs),
           assign_proposal_block(layout, knobs), update_block(layout, knobs),
           *(distance_block(layout, knobs, cand) for cand, _ in CANDIDATE_GROUPS),
           objectives_block(layout, knobs), choose_block(layout, knobs), select_block(layout, knobs)]
    assert tuple(b.kind for b in out) == STEP_BLOCKS
    return out
