"""The trainable layout and the construction a trained model starts from, written in the named basis.

The trainable model keeps the exact circuit's residual layout and adds two subspaces, so that one pair of tied
blocks (update, assign) can carry a *per-step* sharpness — the freedom a recurrent model needs to do better than
Lloyd's from a poor start (soft assignments early, hard ones late):

* ``BETA`` (1, point tokens): the stiffness of the next assignment, in units of the construction's stiffness
  ``a`` (so it starts at 1). The update MLP advances it every step, ``BETA <- g * BETA + 1`` (gated units reading
  ``ONE``), so ``g = 0`` gives the constant stiffness ``a`` of plain (soft) Lloyd's and ``g > 0`` a schedule that
  training may choose.
* ``XB`` (d, point tokens): ``BETA * X``, made by gated units ``relu(BETA) * X_m`` — a product, which is what a
  gated MLP computes exactly. The assign head's query reads ``XB`` and ``BETA``.

The stiffness itself (``a``, tens to 1e12) lives in the head's weights, not in the residual stream: residual
features stay of order 1, so a small change of any dense weight is a small change of the computation.

The construction at finite sharpness (all stiffnesses in unit-scaled squared distances, like
:mod:`circuits.sharpness`):

Update block (U)
    Head: centroid query j scores ``b Y_ij`` on point i, ``b rho`` on its own key and 0 on other centroids and
    BOS; point and BOS queries sit on the BOS sink (value 0). Value ``X + C`` -> ``C_stage``. With ``b -> inf``
    this is the exact update head of :mod:`circuits.blocks`.
    MLP: the exact update MLP (``C = C_stage``, clear ``C_stage``, ``N = |C_stage|^2``) plus the schedule units.
Assign block (A)
    Head: point query scores centroid j with ``a (2 XB . c_j - BETA (|c_j|^2 + tie_break j))``, i.e.
    ``-a BETA |x - c_j|^2`` up to a constant of the query: a softmax over centroids at stiffness ``a BETA``.
    BOS keys get ``-16 a BETA`` (as the exact head's ``mask``); centroid and BOS queries sit on the BOS sink.
    Value ``ID`` -> ``Y_stage``. MLP: the exact assign MLP (commit ``Y``, clear ``Y_stage``).

Input: the initial centroids enter committed — ``C = c0`` and ``N = |c0|^2`` on centroid tokens — with
``BETA = 1`` and ``XB = X`` on point tokens (:func:`prepare_input`), and step 0 is the assign block alone. So the
update head never meets an unassigned point, and the model needs no large masking gain for the first step (a
large gain on an order-1 feature turns every small weight change into a large score change).

A *structural* channel, ``-(STRUCTURAL_MASK + 16 a BETA)`` on every point query x point key pair, is part of
both heads and is never trained: it keeps point-to-point attention (the only O(n^2) part of a dense head) switched off, which is
what makes the fast forward pass in :mod:`circuits.training.model` cost O(n k) per step. Everything else in
both heads is trainable, dense over the whole residual.

With ``a -> inf``, ``g = 0`` and ``b -> inf`` the construction is Lloyd's exactly; at
finite values it is a softened Lloyd's whose every knob is a weight.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from circuits.blocks import ASSIGN, UPDATE, assign_mlp, update_mlp
from circuits.layout import ResidualLayout, SequenceLayout
from circuits.weights import BlockWeights, HeadBuilder, MLPBuilder

#: Extra subspaces of the trainable layout, with what they hold.
EXTRA_SUBSPACES_DOCS: dict[str, str] = {
    "BETA": "stiffness of the next assignment in units of the initial one (point tokens); advanced every step",
    "XB": "BETA * X, the assign head's query (point tokens)",
}

#: Re-embedding between steps resets these to their encoded values ...
CONSTANT_SUBSPACES = ("X", "ID", "ONE", "IS_POINT", "IS_CENTROID", "IS_BOS")
#: ... and empties these; the rest (C, N, Y, BETA, XB) is the state carried from step to step.
STAGING_SUBSPACES = ("C_stage", "Y_stage")

#: Score added to every point-query x point-key pair by the fixed structural channel.
STRUCTURAL_MASK = 1e4
#: Sink / masking scores of the construction (trainable like every other weight).
SINK = 30.0
BOS_MASK = 16.0

BLOCK_KINDS = (UPDATE, ASSIGN)


def trainable_layout(d: int, k: int) -> ResidualLayout:
    """The exact circuit's layout plus ``BETA`` and ``XB`` (appended, so every standard subspace keeps its place)."""
    return ResidualLayout(d, k, extra=(("BETA", 1), ("XB", d)))


@dataclass(frozen=True)
class InitSharpness:
    """Knobs of the construction a model starts from (unit-scaled squared distances).

    ``beta``: stiffness ``a`` of the assignments (``a * BETA``, and ``BETA = 1`` after each update when ``growth = 0``).
    ``growth``: ``g`` in ``BETA <- g BETA + 1``; 0 is a constant stiffness (plain soft Lloyd's).
    ``beta_update``: ``b``, the update head's stiffness on assignments (exact Lloyd's needs ``b >~ 1600``).
    ``self_weight``: ``rho``, a centroid's score on its own key in units of ``b`` (keeps empty clusters in place).
    ``sink``: score of the BOS sink for the queries that must write nothing (exact below ``exp(-sink)``).
    ``tie_break``: per-index key offset in the assign head (lower index wins ties when ``beta * tie_break`` is large).
    """

    beta: float = 5.0
    growth: float = 0.0
    beta_update: float = 5.0
    self_weight: float = 0.5
    sink: float = SINK
    tie_break: float = 0.0

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if not np.isfinite(value):
                raise ValueError(f"{name} must be finite, got {value}")
        if self.beta <= 0 or self.beta_update <= 0:
            raise ValueError("beta and beta_update must be positive")
        if self.growth < 0:
            raise ValueError(f"growth must be >= 0, got {self.growth}")

    def to_dict(self) -> dict[str, float]:
        return asdict(self)


#: Lloyd's exactly (float64): huge constant stiffness, hard update, tie-break as the reference's.
EXACT = InitSharpness(beta=1e12, growth=0.0, beta_update=4000.0, self_weight=0.5, sink=1000.0, tie_break=1e-11)


def assign_head(layout: ResidualLayout, s: InitSharpness) -> HeadBuilder:
    head = HeadBuilder(layout)
    for m in range(layout.d):
        head.qk({("XB", m): 2.0 * s.beta}, {("C", m): 1.0})
    key = {("N", 0): 1.0, ("IS_BOS", 0): BOS_MASK}
    key.update({("ID", j): s.tie_break * j for j in range(layout.k) if s.tie_break})
    head.qk({("BETA", 0): -s.beta}, key)
    head.qk({("IS_CENTROID", 0): s.sink, ("IS_BOS", 0): s.sink}, {("IS_BOS", 0): 1.0})
    for j in range(layout.k):
        head.ov({("ID", j): 1.0}, {("Y_stage", j): 1.0})
    return head


def update_head(layout: ResidualLayout, s: InitSharpness) -> HeadBuilder:
    b = s.beta_update
    head = HeadBuilder(layout)
    for j in range(layout.k):
        head.qk({("ID", j): b}, {("Y", j): 1.0, ("ID", j): s.self_weight})
    head.qk({("IS_POINT", 0): s.sink, ("IS_BOS", 0): s.sink}, {("IS_BOS", 0): 1.0})
    for m in range(layout.d):
        head.ov({("X", m): 1.0, ("C", m): 1.0}, {("C_stage", m): 1.0})
    return head


def schedule_units(mlp: MLPBuilder, layout: ResidualLayout, s: InitSharpness) -> None:
    """``BETA <- g BETA + 1`` on point tokens and ``XB <- (g BETA + 1) X`` (the new BETA times X)."""
    one = {("ONE", 0): 1.0}
    mlp.unit(gate=one, linear={("BETA", 0): 1.0}, output={("BETA", 0): s.growth - 1.0})
    mlp.unit(gate=one, linear={("IS_POINT", 0): 1.0}, output={("BETA", 0): 1.0})
    for m in range(layout.d):
        mlp.unit(gate={("BETA", 0): 1.0}, linear={("X", m): 1.0}, output={("XB", m): s.growth})
        mlp.unit(gate=one, linear={("X", m): 1.0}, output={("XB", m): 1.0})
        mlp.unit(gate=one, linear={("XB", m): 1.0}, output={("XB", m): -1.0})


def construction_blocks(layout: ResidualLayout, s: InitSharpness) -> list[BlockWeights]:
    """``[update, assign]``: one Lloyd iteration of the construction at sharpness ``s`` (no structural channel)."""
    mlp_u = update_mlp(layout)
    schedule_units(mlp_u, layout, s)
    notes = s.to_dict()
    return [
        BlockWeights(UPDATE, update_head(layout, s).build(), mlp_u.build(), notes=notes),
        BlockWeights(ASSIGN, assign_head(layout, s).build(), assign_mlp(layout).build(), notes=notes),
    ]


def structural_channel(layout: ResidualLayout, beta: float) -> tuple[np.ndarray, np.ndarray]:
    """Query and key columns of the fixed channel: ``-(STRUCTURAL_MASK + 16 beta BETA)`` on point x point pairs.

    The ``BETA`` term keeps the mask below every centroid score (at least ``-4 beta BETA`` in the construction)
    however stiff the schedule gets, as the exact head's ``beta * mask``.
    """
    q, k = np.zeros(layout.d_model), np.zeros(layout.d_model)
    q[layout.index("IS_POINT")] = -STRUCTURAL_MASK
    q[layout.index("BETA")] = -BOS_MASK * beta
    k[layout.index("IS_POINT")] = 1.0
    return q, k


def prepare_input(layout: ResidualLayout, resid: np.ndarray, n: int) -> np.ndarray:
    """The exact circuit's encoding (initial centroids staged in ``C_stage``) turned into the trainable model's
    input: centroids committed to ``C`` with ``N = |c|^2``, ``BETA = 1`` and ``XB = X`` on the points."""
    out = np.array(resid, dtype=np.float64, copy=True)
    seq = SequenceLayout(n, out.shape[1] - n - 1)  # k centroid tokens, k <= layout.k for a general model
    cents = seq.centroids
    staged = out[:, cents, layout["C_stage"]]
    out[:, cents, layout["C"]] = staged
    out[:, cents, layout["N"]] = (staged**2).sum(-1, keepdims=True)
    out[:, cents, layout["C_stage"]] = 0.0
    points = seq.points
    out[:, points, layout["BETA"]] = 1.0
    out[:, points, layout["XB"]] = out[:, points, layout["X"]]
    return out
