"""Where the safeguarded-swap circuit keeps things: its residual subspaces and its token positions.

The residual stream is the exact Lloyd circuit's (:mod:`circuits.layout`) plus the subspaces of
:data:`SWAP_SUBSPACE_DOCS`. Centroids live on three *groups* of ``k`` tokens that share ``C``, ``C_stage`` and
``N`` (so one update head serves all three) and differ in their identity subspace and group flag:

========  =========  ========  ===========================================================
group     identity   flag      holds
========  =========  ========  ===========================================================
current   ``ID``     ``G_C``   the algorithm's centroids ``C`` (and, mid-step, Lloyd's step from them)
lloyd     ``ID_L``   ``G_L``   Lloyd's own reference trajectory ``L_t`` from the same start
proposal  ``ID_P``   ``G_P``   the swapped centroids, then Lloyd's step from them
========  =========  ========  ===========================================================

A point's assignment to each group has its own subspace (``Y``, ``Y_L``, ``Y_P``); ``Y_stage`` is shared, since
every assignment is staged and committed within one block.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from circuits.layout import SUBSPACE_DOCS, ResidualLayout, SequenceLayout

#: The centroid groups in token order, with their identity subspace and flag.
GROUPS: tuple[tuple[str, str, str], ...] = (("current", "ID", "G_C"), ("lloyd", "ID_L", "G_L"),
                                             ("proposal", "ID_P", "G_P"))
#: The assignment subspace of each group.
ASSIGNMENT_OF: dict[str, str] = {"current": "Y", "lloyd": "Y_L", "proposal": "Y_P"}
#: Candidates in tie order (:mod:`circuits.swap.reference`) and the group whose tokens hold each one.
CANDIDATE_GROUPS: tuple[tuple[str, str], ...] = (("lloyd", "current"), ("swap", "proposal"), ("reference", "lloyd"))



@dataclass(frozen=True)
class StepGroups:
    """Which centroid groups a safeguarded step has and what each does, so that :mod:`circuits.swap.stages` can build
    the blocks of the swap step (:data:`SWAP_GROUPS`) and of steps with more candidates (:mod:`circuits.learned`).

    ``groups``: ``(name, identity, flag)`` in token order, ``current`` first and ``proposal`` among them;
    ``assignment_of``: each group's assignment subspace; ``candidates``: ``(candidate, group)`` in the order of the
    ``D_CAND``/``OBJ``/``CHOICE`` slots; ``ranks``: each candidate's tie-order rank (the select margin's factor);
    ``selected``: the groups that take the kept candidate at the end of a step; ``with_proposal``: further groups
    whose ``C_stage`` the propose block commits."""

    groups: tuple[tuple[str, str, str], ...]
    assignment_of: dict[str, str]
    candidates: tuple[tuple[str, str], ...]
    ranks: dict[str, int]
    selected: tuple[str, ...] = ("current",)
    with_proposal: tuple[str, ...] = field(default=())

    def ident(self, group: str) -> str:
        return {name: ident for name, ident, _ in self.groups}[group]

    def flag(self, group: str) -> str:
        return {name: flag for name, _, flag in self.groups}[group]

    def slot(self, candidate: str) -> int:
        """The candidate's index in ``D_CAND``, ``OBJ`` and ``CHOICE``."""
        return [c for c, _ in self.candidates].index(candidate)


#: The safeguarded swap's groups and candidates.
SWAP_GROUPS = StepGroups(GROUPS, ASSIGNMENT_OF, CANDIDATE_GROUPS, {c: r for r, (c, _) in enumerate(CANDIDATE_GROUPS)})

#: What each subspace the swap circuit adds holds.
SWAP_SUBSPACE_DOCS: dict[str, str] = {
    "ID_L": "one-hot identity of a token of the Lloyd's-reference group",
    "ID_P": "one-hot identity of a token of the proposal group",
    "G_C": "group flag: current centroids",
    "G_L": "group flag: Lloyd's reference trajectory",
    "G_P": "group flag: proposal (swapped) centroids",
    "Y_L": "one-hot assignment of a point to the Lloyd's-reference group",
    "Y_P": "one-hot assignment of a point to the proposal group",
    "PIDX": "point index i / n (points), for the lower-index tie-break of the farthest point",
    "NEAR_stage": "staging slot: coordinates of the chosen centroid, copied to a point",
    "D1": "squared distance of a point to its nearest current centroid",
    "D2": "squared distance of a point to its second-nearest current centroid",
    "GAIN": "on a point: (D2 - D1) in the bit of its current centroid (removal-cost terms)",
    "REM_stage": "staging slot: mean over points of GAIN (removal cost / n of every centroid)",
    "OWN_REM": "removal cost / n of this current centroid",
    "OBJ0": "mean over points of D1: objective / n of the current centroids",
    "SWAP_stage": "staging slot: one-hot of the centroid to move",
    "IS_SWAP": "1 on the proposal token that moves onto the farthest point",
    "D_CAND": "squared distance of a point to its nearest centroid of each candidate (lloyd, swap, reference)",
    "OBJ": "mean over points of D_CAND: objective / n of each candidate",
    "OWN_OBJ": "on a centroid token: its candidate's OBJ with the tie-order margin added",
    "CHOICE_stage": "staging slot: group flags of the best candidate",
    "CHOICE": "one-hot of the candidate kept (lloyd, swap, reference)",
}


def swap_extra(d: int, k: int) -> tuple[tuple[str, int], ...]:
    """The swap circuit's subspaces beyond the Lloyd circuit's, with their widths."""
    widths = {"ID_L": k, "ID_P": k, "Y_L": k, "Y_P": k, "NEAR_stage": d, "GAIN": k, "REM_stage": k,
              "SWAP_stage": k, "D_CAND": 3, "OBJ": 3, "CHOICE_stage": 3, "CHOICE": 3}
    return tuple((name, widths.get(name, 1)) for name in SWAP_SUBSPACE_DOCS)


def swap_layout(d: int, k: int) -> ResidualLayout:
    return ResidualLayout(d, k, extra=swap_extra(d, k))


def describe(layout: ResidualLayout) -> list[dict[str, object]]:
    """:meth:`ResidualLayout.describe` with the swap subspaces documented."""
    docs = {**SUBSPACE_DOCS, **SWAP_SUBSPACE_DOCS}
    return [{**row, "holds": docs.get(str(row["name"]), row["holds"])} for row in layout.describe()]


@dataclass(frozen=True)
class SwapSequence(SequenceLayout):
    """Token positions: ``[BOS, point_0 .. point_{n-1}, current_0.., lloyd_0.., proposal_0..]`` (``k`` each).

    A :class:`~circuits.layout.SequenceLayout` whose centroids (``centroids``, ``centroid(j)``) are the current
    group, followed by the other groups (``names``: the swap circuit's three by default)."""

    names: tuple[str, ...] = tuple(g[0] for g in GROUPS)

    def group(self, name: str) -> slice:
        """Positions of the ``k`` tokens of a centroid group (``"current"``, ``"lloyd"``, ``"proposal"``, ...)."""
        names = list(self.names)
        if name not in names:
            raise ValueError(f"unknown centroid group {name!r}; expected one of {names}")
        start = 1 + self.n + names.index(name) * self.k
        return slice(start, start + self.k)

    @property
    def n_tokens(self) -> int:
        return 1 + self.n + len(self.names) * self.k

    @property
    def token_labels(self) -> list[str]:
        return ["BOS", *(f"x{i}" for i in range(self.n)),
                *(f"{_initials(name)}{j}" for name in self.names for j in range(self.k))]


def _initials(group: str) -> str:
    """A group's token label prefix: ``c``, ``l``, ``p`` for swap's groups (``sp`` for ``swapchain_proposal``)."""
    return "".join(part[0] for part in group.split("_"))
