"""The two blocks of the exact Lloyd circuit, written in the named residual basis.

Lloyd's algorithm alternates an *assignment* (each point takes its nearest centroid) and an *update* (each
centroid moves to the mean of its points). The circuit alternates two blocks that do exactly this; both write
their result into a staging slot with attention and let the MLP commit it, because an MLP built from ReLU
identities overwrites a value exactly, which softmax self-attention cannot.

Assign block (A)
    Head: a point query scores centroid key j with ``beta * (2 x.c_j - |c_j|^2 - tie_break * j)``, which is
    ``-beta * |x - c_j|^2`` up to a constant of the query, so the softmax over centroids picks the nearest one
    (the lower index on ties). Point and BOS keys are pushed down by ``beta * mask``. Centroid and BOS queries
    look at the BOS sink, whose value is 0. Value = ``ID`` of the key, written to ``Y_stage``.
    MLP (``Y_stage >= 0`` and ``Y >= 0`` always): ``Y += IS_POINT * relu(Y_stage) - relu(Y)`` commits the new
    one-hot on point tokens and erases the old one; ``Y_stage -= relu(Y_stage)`` empties the slot.

Update block (U)
    Head: centroid query j scores ``beta_update`` on each point whose ``Y`` has bit j, ``beta_update / 2`` on its
    own key and 0 elsewhere, so it averages its members or, with none, keeps itself (empty-cluster rule).
    Point and BOS queries look at the sink. Value = ``X + C`` (a point's coordinates, or a centroid's own),
    written to ``C_stage``.
    MLP: ``C += IS_CENTROID * (relu(s - C) - relu(C - s))`` with ``s = C_stage`` sets ``C = s`` on centroid tokens;
    ``C_stage -= relu(s) - relu(-s)`` empties the slot; ``N += sum_m relu(s_m) s_m + relu(-s_m)(-s_m) - relu(N)``
    replaces ``N`` by ``|s|^2`` (a gated unit multiplies, so the square is exact).

Unembedding reads ``Y``: the logits at a point position are its assignment.
"""

from __future__ import annotations

from enum import Enum

import numpy as np
from jaxtyping import Float

from circuits.layout import ResidualLayout
from circuits.sharpness import Sharpness
from circuits.weights import BlockWeights, HeadBuilder, MLPBuilder, MLPWeights, dense

class BlockKind(str, Enum):
    """The two block types. A ``str`` enum: a kind compares and serialises as its name (``"assign"``)."""

    ASSIGN = "assign"
    UPDATE = "update"

    def __str__(self) -> str:
        return self.value


ASSIGN = BlockKind.ASSIGN
UPDATE = BlockKind.UPDATE


def write_label(head: HeadBuilder) -> HeadBuilder:
    """An assign head's values: the attended centroid's identity ``ID_j`` into the query's ``Y_stage_j``."""
    for j in range(head.layout.k):
        head.ov({("ID", j): 1.0}, {("Y_stage", j): 1.0})
    return head


def write_mean(head: HeadBuilder) -> HeadBuilder:
    """An update head's values: each attended key's ``X + C`` (a point's coordinates, or a centroid's own) into
    ``C_stage``, so that the query receives the attention-weighted mean."""
    for m in range(head.layout.d):
        head.ov({("X", m): 1.0, ("C", m): 1.0}, {("C_stage", m): 1.0})
    return head


def assign_head(layout: ResidualLayout, sharp: Sharpness) -> HeadBuilder:
    """Point queries pick their nearest centroid key; the chosen key's ``ID`` goes to ``Y_stage``."""
    beta, M = sharp.beta, sharp.mask
    head = HeadBuilder(layout)
    for m in range(layout.d):
        head.qk({("X", m): 2 * beta}, {("C", m): 1.0})
    key_penalty = {("N", 0): 1.0, ("IS_POINT", 0): M, ("IS_BOS", 0): M}
    key_penalty.update({("ID", j): sharp.tie_break * j for j in range(layout.k)})
    head.qk({("IS_POINT", 0): -beta}, key_penalty)
    head.qk({("IS_CENTROID", 0): beta * M, ("IS_BOS", 0): beta * M}, {("IS_BOS", 0): 1.0})
    return write_label(head)


def assign_mlp(layout: ResidualLayout) -> MLPBuilder:
    mlp = MLPBuilder(layout)
    for j in range(layout.k):
        mlp.unit(gate={("Y_stage", j): 1.0}, linear={("IS_POINT", 0): 1.0}, output={("Y", j): 1.0})
        mlp.unit(gate={("Y", j): 1.0}, linear={("ONE", 0): 1.0}, output={("Y", j): -1.0})
        mlp.unit(gate={("Y_stage", j): 1.0}, linear={("ONE", 0): 1.0}, output={("Y_stage", j): -1.0})
    return mlp


def update_head(layout: ResidualLayout, sharp: Sharpness) -> HeadBuilder:
    """Centroid queries average their members (or keep themselves); ``X + C`` of the keys goes to ``C_stage``."""
    b = sharp.beta_update
    head = HeadBuilder(layout)
    for j in range(layout.k):
        head.qk({("ID", j): b}, {("Y", j): 1.0, ("ID", j): 0.5})
    head.qk({("IS_POINT", 0): b, ("IS_BOS", 0): b}, {("IS_BOS", 0): 1.0})
    return write_mean(head)


def update_mlp(layout: ResidualLayout) -> MLPBuilder:
    mlp = MLPBuilder(layout)
    for m in range(layout.d):
        s, c = ("C_stage", m), ("C", m)
        mlp.unit(gate={s: 1.0, c: -1.0}, linear={("IS_CENTROID", 0): 1.0}, output={c: 1.0})
        mlp.unit(gate={c: 1.0, s: -1.0}, linear={("IS_CENTROID", 0): 1.0}, output={c: -1.0})
        mlp.unit(gate={s: 1.0}, linear={("ONE", 0): 1.0}, output={s: -1.0})
        mlp.unit(gate={s: -1.0}, linear={("ONE", 0): 1.0}, output={s: 1.0})
        mlp.unit(gate={s: 1.0}, linear={s: 1.0}, output={("N", 0): 1.0})
        mlp.unit(gate={s: -1.0}, linear={s: -1.0}, output={("N", 0): 1.0})
    mlp.unit(gate={("N", 0): 1.0}, linear={("ONE", 0): 1.0}, output={("N", 0): -1.0})
    return mlp


def assign_block(layout: ResidualLayout, sharp: Sharpness, mlp: MLPWeights | None = None) -> BlockWeights:
    """The assign block; ``mlp``: the built :func:`assign_mlp` of ``layout``, when the caller has it already."""
    return BlockWeights(
        ASSIGN, assign_head(layout, sharp).build(), mlp if mlp is not None else assign_mlp(layout).build(),
        notes={"beta": sharp.beta, "mask": sharp.mask, "tie_break": sharp.tie_break},
    )


def update_block(layout: ResidualLayout, sharp: Sharpness) -> BlockWeights:
    return BlockWeights(
        UPDATE, update_head(layout, sharp).build(), update_mlp(layout).build(),
        notes={"beta_update": sharp.beta_update},
    )


def lloyd_schedule(iterations: int) -> list[str]:
    """Block kinds for ``iterations`` Lloyd steps: ``U A U A ... U A`` (2 * iterations + 2 blocks).

    The first U commits the initial centroids (no point is assigned yet, so each keeps itself); each following
    U A pair is one Lloyd iteration; the trailing A assigns the points to the final centroids, which is what
    scikit-learn's ``labels_`` means.
    """
    if iterations < 0:
        raise ValueError(f"iterations must be >= 0, got {iterations}")
    return [UPDATE, ASSIGN] * (iterations + 1)


def n_layers(iterations: int) -> int:
    """Number of blocks of the schedule for ``iterations`` Lloyd steps."""
    return len(lloyd_schedule(iterations))


def layers_of(iterations: int, kind: BlockKind) -> list[int]:
    """Layers of the schedule that are ``kind`` blocks: ``layers_of(T, UPDATE)[t]`` commits centroids ``t``."""
    return [layer for layer, k in enumerate(lloyd_schedule(iterations)) if k == kind]


def unembed_matrix(layout: ResidualLayout) -> Float[np.ndarray, "d_model k"]:
    """``W_U`` reading the assignment subspace ``Y``: logit j at a point is its assignment bit j."""
    return np.stack([dense(layout, {("Y", j): 1.0}) for j in range(layout.k)], axis=1)
