"""The learned safeguarded swap's step as transformer blocks: the swap step (:mod:`circuits.swap.stages`) with a
fourth centroid group that holds the trained candidate, and the untrained swap's own chain
(:mod:`circuits.learned.chain`, two more groups) for the fifth.

The *extrapolated* group (identity ``ID_E``, flag ``G_E``, assignment ``Y_E``, token labels ``e0..``) holds the
current centroids ``C`` at the start of a step. Two blocks are added to the swap step, and the rest are the swap
step's blocks built on all six groups (:data:`LEARNED_GROUPS`; the chain's are ``s0..`` and ``sp0..``):

==================  ==============================================================  ================================
block               head                                                            MLP
==================  ==============================================================  ================================
extrapolate         extrapolated j -> mean of the points whose ``Y`` is j (or       ``C_stage += (1 - alpha) C`` on
                    itself): Lloyd's update head with ``W_O`` scaled by ``alpha``:   ``G_E`` tokens
                    ``alpha M(C)_j`` -> ``C_stage``
assign_learned      point -> nearest extrapolated centroid                          commit ``Y_E``
==================  ==============================================================  ================================

``extrapolate`` runs just before ``propose``, whose MLP commits the extrapolated group as well as the proposal
(``C = C_stage = C + alpha (M(C) - C)``, ``N = |C|^2``). ``assign_learned`` follows ``assign_proposal``; the update
block then moves the extrapolated group by ``Y_E`` (Lloyd's step from the extrapolated centroids: the learned
candidate), ``distance_learned`` measures it. The chain's blocks run between the main step's (:data:`STEP_BLOCKS`)
and leave ``S_{t+1}`` on the ``swapchain`` group before the main distances; the choice is among five candidates in
the reference's tie order (:data:`circuits.learned.reference.CANDIDATES`: lloyd 0, swap 1, learned 2, reference 3,
swap_reference 4; the chain's proposal group holds none and is masked). ``select`` writes the kept candidate into
the current *and* the extrapolated group, so the next step starts with ``E = C``.

The trained factor ``alpha`` of a step appears in exactly two weights of the ``extrapolate`` block: the head's
``W_O`` (``alpha``) and the MLP's linear weight (``1 - alpha``); every other block is the same in every step.
"""

from __future__ import annotations

from circuits.layout import SUBSPACE_DOCS, ResidualLayout
from circuits.learned.chain import CHAIN_BLOCKS, CHAIN_SUBSPACE_DOCS, chain_blocks, chain_extra
from circuits.learned.reference import CANDIDATES
from circuits.swap import stages as swap
from circuits.swap.knobs import SwapKnobs
from circuits.swap.layout import ASSIGNMENT_OF, GROUPS, SWAP_SUBSPACE_DOCS, StepGroups, swap_extra
from circuits.weights import BlockWeights, HeadBuilder, MLPBuilder

#: The candidates the circuit builds, in tie order: all five of the reference's.
CIRCUIT_CANDIDATES: tuple[str, ...] = CANDIDATES

LEARNED_GROUPS = StepGroups(
    groups=(*GROUPS, ("extrapolated", "ID_E", "G_E"), ("swapchain", "ID_S", "G_S"),
            ("swapchain_proposal", "ID_SP", "G_SP")),
    assignment_of={**ASSIGNMENT_OF, "extrapolated": "Y_E", "swapchain": "Y_S", "swapchain_proposal": "Y_SP"},
    candidates=(("lloyd", "current"), ("swap", "proposal"), ("learned", "extrapolated"), ("reference", "lloyd"),
                ("swap_reference", "swapchain")),
    ranks={c: CANDIDATES.index(c) for c in CIRCUIT_CANDIDATES},
    selected=("current", "extrapolated"),
    with_proposal=("extrapolated",),
)

#: What each subspace the learned circuit adds to the swap circuit's holds.
LEARNED_SUBSPACE_DOCS: dict[str, str] = {
    "ID_E": "one-hot identity of a token of the extrapolated (learned candidate's) group",
    "G_E": "group flag: extrapolated centroids C + alpha (M(C) - C), then Lloyd's step from them",
    "Y_E": "one-hot assignment of a point to the extrapolated group",
}

#: The blocks of one step, in order.
_CHAIN = [name for name, _ in CHAIN_BLOCKS]
STEP_BLOCKS: tuple[str, ...] = ("nearest", "second", "assign_lloyd", "removal", "swap_slot", *_CHAIN[:5],
                                "extrapolate", "propose", _CHAIN[5], "assign_proposal", _CHAIN[6], "assign_learned",
                                "update", *_CHAIN[7:], *(f"distance_{c}" for c in CIRCUIT_CANDIDATES), "objectives",
                                "choose", "select")
#: The one block whose weights depend on the step (through ``alpha``).
ALPHA_BLOCK = "extrapolate"


def learned_layout(d: int, k: int) -> ResidualLayout:
    """The swap circuit's subspaces (the per-candidate slots five wide), :data:`LEARNED_SUBSPACE_DOCS`'s and the
    untrained swap chain's (:mod:`circuits.learned.chain`)."""
    wide = {"D_CAND", "OBJ", "CHOICE_stage", "CHOICE"}
    extra = tuple((name, len(CIRCUIT_CANDIDATES) if name in wide else width) for name, width in swap_extra(d, k))
    return ResidualLayout(d, k, extra=(*extra, ("ID_E", k), ("G_E", 1), ("Y_E", k), *chain_extra(k)))


def describe(layout: ResidualLayout) -> list[dict[str, object]]:
    """:meth:`ResidualLayout.describe` with the swap and learned subspaces documented."""
    docs = {**SUBSPACE_DOCS, **SWAP_SUBSPACE_DOCS, **LEARNED_SUBSPACE_DOCS, **CHAIN_SUBSPACE_DOCS}
    return [{**row, "holds": docs.get(str(row["name"]), row["holds"])} for row in layout.describe()]


def extrapolate_block(layout: ResidualLayout, knobs: SwapKnobs, alpha: float) -> BlockWeights:
    """``C_stage = alpha M(C) + (1 - alpha) C`` on the extrapolated tokens (which hold ``C``).

    The head is Lloyd's update head (:func:`circuits.blocks.update_head`'s scores) with the extrapolated group's
    queries, reading the current assignment ``Y``: query j averages the points of cluster j, or keeps itself when
    the cluster is empty (then ``M(C)_j = C_j`` and the result is ``C_j``); every other query looks at the sink.
    Its output matrix is the update head's times ``alpha``; the MLP adds ``(1 - alpha) C`` (one product by the
    flag, exact)."""
    b = knobs.sharpness.beta_update
    head = HeadBuilder(layout)
    for j in range(layout.k):
        head.qk({("ID_E", j): b}, {("Y", j): 1.0, ("ID_E", j): 0.5})
    others = [flag for name, _, flag in LEARNED_GROUPS.groups if name != "extrapolated"]
    head.qk({("IS_POINT", 0): b, ("IS_BOS", 0): b, **{(f, 0): b for f in others}}, {("IS_BOS", 0): 1.0})
    for m in range(layout.d):
        head.ov({("X", m): 1.0, ("C", m): 1.0}, {("C_stage", m): alpha})
    mlp = MLPBuilder(layout)
    for m in range(layout.d):
        mlp.unit(gate={("G_E", 0): 1.0}, linear={("C", m): 1.0 - alpha}, output={("C_stage", m): 1.0})
    out = swap.block(ALPHA_BLOCK, head, mlp, knobs)
    out.notes["alpha"] = float(alpha)
    return out


def update_block(layout: ResidualLayout, knobs: SwapKnobs) -> BlockWeights:
    """The swap step's update on all four groups (:func:`circuits.swap.stages.update_block`)."""
    return swap.update_block(layout, knobs, LEARNED_GROUPS)


def step_blocks(layout: ResidualLayout, knobs: SwapKnobs, alpha: float) -> list[BlockWeights]:
    """The blocks of one step with extrapolation factor ``alpha``, in :data:`STEP_BLOCKS` order."""
    g = LEARNED_GROUPS
    built = {b.kind: b for b in (
        swap.nearest_block(layout, knobs, g), swap.second_block(layout, knobs, g),
        swap.assign_lloyd_block(layout, knobs, g), swap.removal_block(layout, knobs),
        swap.swap_slot_block(layout, knobs, g), extrapolate_block(layout, knobs, alpha),
        swap.propose_block(layout, knobs, g), swap.assign_proposal_block(layout, knobs, g),
        swap.assign_block(layout, knobs, "extrapolated", "assign_learned", g), update_block(layout, knobs),
        *(swap.distance_block(layout, knobs, cand, g) for cand in CIRCUIT_CANDIDATES),
        swap.objectives_block(layout, knobs, g), swap.choose_block(layout, knobs, g),
        swap.select_block(layout, knobs, g))}
    built.update(chain_blocks(layout, knobs, g))
    assert set(built) == set(STEP_BLOCKS)
    return [built[name] for name in STEP_BLOCKS]
