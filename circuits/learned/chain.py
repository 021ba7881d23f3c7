"""The untrained safeguarded swap's own trajectory ``S_t`` inside the learned circuit: the swap step run a second
time, on two more centroid groups, to give the learned model its fifth candidate (``"swap_reference"``).

The blocks are the swap step's own builders (:mod:`circuits.swap.stages`) applied to a :class:`Renamed` view of
the learned layout, in which the names the swap step uses for its current and proposal groups and its per-chain
slots point at the chain's subspaces (:data:`RENAMES`): ``ID`` is ``ID_S``, ``Y`` is ``Y_S``, ``D1`` is ``D1_S``,
``CHOICE`` is ``CHOICE_S`` and so on. Lloyd's group (``ID_L``, ``Y_L``) is shared with the main step: ``S_t`` and
the learned model start from the same ``C0``, so their Lloyd's trajectories are one. Slots filled and emptied within
one block (``NEAR_stage``, ``Y_stage``, ``C_stage``, ``REM_stage``, ``SWAP_stage``, ``OWN_OBJ``, ...) and slots the
main step has finished with when the chain rewrites them (``D2``, ``GAIN``, ``OWN_REM``, ``OBJ0``) are shared too.

==================  ================================================================================
chain block         the swap block it is (on the chain's groups)
==================  ================================================================================
nearest_S           nearest: ``Y_S``, ``D1_S``
second_S            second: ``D2``
gain_S              assign_lloyd: ``Y_L`` again (the same assignment) and ``GAIN`` from ``Y_S``
removal_S           removal
swap_slot_S         swap_slot: ``IS_SWAP_S`` on the chain's proposal token
propose_S           propose: the chain's proposal group ``SP``
assign_proposal_S   assign_proposal: ``Y_SP``
distance_S_<cand>   distance_<cand>: ``D_S_CAND`` (lloyd: ``S``, swap: ``SP``, reference: Lloyd's group)
objectives_S        objectives: ``OBJ_S`` and ``OWN_OBJ``
choose_S            choose: ``CHOICE_S``
select_S            select: ``S`` takes the kept candidate, ``S_{t+1}``
==================  ================================================================================

The main update block moves ``S`` by ``Y_S`` and ``SP`` by ``Y_SP`` (:mod:`circuits.learned.stages`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from circuits.layout import ResidualLayout
from circuits.swap import stages as swap
from circuits.swap.knobs import SwapKnobs
from circuits.swap.layout import CANDIDATE_GROUPS, SWAP_GROUPS, StepGroups
from circuits.weights import BlockWeights

#: The swap step's names -> the chain's subspaces. ``ID_M``, ``G_M``, ... name the main step's groups (masked).
RENAMES: dict[str, str] = {
    "ID": "ID_S", "G_C": "G_S", "Y": "Y_S", "ID_P": "ID_SP", "G_P": "G_SP", "Y_P": "Y_SP", "D1": "D1_S",
    "IS_SWAP": "IS_SWAP_S", "D_CAND": "D_S_CAND", "OBJ": "OBJ_S", "CHOICE_stage": "CHOICE_S_stage",
    "CHOICE": "CHOICE_S", "ID_M": "ID", "G_M": "G_C", "Y_M": "Y", "ID_MP": "ID_P", "G_MP": "G_P", "Y_MP": "Y_P",
}

#: The chain's own subspaces (besides its groups' identities and flags), with what they hold.
CHAIN_SUBSPACE_DOCS: dict[str, str] = {
    "ID_S": "one-hot identity of a token of the untrained swap's chain S_t",
    "G_S": "group flag: the untrained swap's chain S_t",
    "Y_S": "one-hot assignment of a point to S_t",
    "ID_SP": "one-hot identity of a token of the chain's proposal group",
    "G_SP": "group flag: the chain's proposal (swapped S_t)",
    "Y_SP": "one-hot assignment of a point to the chain's proposal group",
    "D1_S": "squared distance of a point to its nearest centroid of S_t",
    "IS_SWAP_S": "1 on the chain's proposal token that moves onto the farthest point",
    "D_S_CAND": "squared distance of a point to its nearest centroid of each chain candidate (lloyd, swap, reference)",
    "OBJ_S": "mean over points of D_S_CAND: objective / n of each chain candidate",
    "CHOICE_S_stage": "staging slot: group flags of the chain's best candidate",
    "CHOICE_S": "one-hot of the chain's candidate kept (lloyd, swap, reference)",
}


def chain_extra(k: int) -> tuple[tuple[str, int], ...]:
    widths = {"ID_S": k, "Y_S": k, "ID_SP": k, "Y_SP": k, "D_S_CAND": 3, "OBJ_S": 3, "CHOICE_S_stage": 3,
              "CHOICE_S": 3}
    return tuple((name, widths.get(name, 1)) for name in CHAIN_SUBSPACE_DOCS)


@dataclass(frozen=True)
class Renamed(ResidualLayout):
    """A :class:`~circuits.layout.ResidualLayout` in which some names point at other subspaces (``renames``: name ->
    the subspace it stands for); the swap step's builders write through it unchanged."""

    renames: dict = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        slices = dict(self._slices)
        slices.update({name: self._slices[target] for name, target in self.renames.items()})
        object.__setattr__(self, "_slices", slices)


def chain_groups(main: StepGroups) -> StepGroups:
    """The swap step's groups for the chain: its own three (``current`` = ``S``, ``proposal`` = ``SP``, Lloyd's),
    then every other group of the main step under a name the renaming leaves alone (so their keys are masked)."""
    alias = {"current": ("ID_M", "G_M"), "proposal": ("ID_MP", "G_MP")}
    own = {"swapchain", "swapchain_proposal", "lloyd"}
    others = tuple((f"main_{name}", *alias.get(name, (ident, flag))) for name, ident, flag in main.groups
                   if name not in own)
    return replace(SWAP_GROUPS, groups=(*SWAP_GROUPS.groups, *others),
                   assignment_of={**SWAP_GROUPS.assignment_of, **{g[0]: "unused" for g in others}})


#: The chain's blocks, in order, each with the swap block it is built as.
CHAIN_BLOCKS: tuple[tuple[str, str], ...] = (
    ("nearest_S", "nearest"), ("second_S", "second"), ("gain_S", "assign_lloyd"), ("removal_S", "removal"),
    ("swap_slot_S", "swap_slot"), ("propose_S", "propose"), ("assign_proposal_S", "assign_proposal"),
    *((f"distance_S_{c}", f"distance_{c}") for c, _ in CANDIDATE_GROUPS),
    ("objectives_S", "objectives"), ("choose_S", "choose"), ("select_S", "select"))


def chain_blocks(layout: ResidualLayout, knobs: SwapKnobs, main: StepGroups) -> dict[str, BlockWeights]:
    """Every chain block by its name (:data:`CHAIN_BLOCKS`), built by the swap step's builders on the renamed view."""
    view, g = Renamed(layout.d, layout.k, layout.extra, renames=RENAMES), chain_groups(main)
    built = {
        "nearest": swap.nearest_block(view, knobs, g), "second": swap.second_block(view, knobs, g),
        "assign_lloyd": swap.assign_lloyd_block(view, knobs, g), "removal": swap.removal_block(view, knobs),
        "swap_slot": swap.swap_slot_block(view, knobs, g), "propose": swap.propose_block(view, knobs, g),
        "assign_proposal": swap.assign_proposal_block(view, knobs, g),
        **{f"distance_{c}": swap.distance_block(view, knobs, c, g) for c, _ in CANDIDATE_GROUPS},
        "objectives": swap.objectives_block(view, knobs, g), "choose": swap.choose_block(view, knobs, g),
        "select": swap.select_block(view, knobs, g)}
    return {name: replace(built[kind], kind=name) for name, kind in CHAIN_BLOCKS}
