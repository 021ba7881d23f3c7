"""Soft k-means: a finite temperature in the assignment head and normalised linear attention in the update head.

Alteration (two levers a TransformerLens user knows):

* **Assignment: finite stiffness.** The assign head is Lloyd's with ``beta`` finite (a temperature) and no
  tie-break: a point query scores centroid ``j`` with ``beta (2 x.c_j - |c_j|^2) = -beta |x - c_j|^2 + beta |x|^2``,
  so its softmax over the centroids is ``r_ij = softmax_j(-beta |x_i - c_j|^2)``, the soft k-means
  responsibilities, written to ``Y`` by the (unchanged) assign MLP. Point and BOS keys are masked by an absolute
  ``-(4 beta + 1000)``, not by ``beta * mask``, so masking stays exact at any temperature.
* **Update: normalised linear attention.** Centroid query ``j`` scores ``b r_ij`` on point ``i`` (the Lloyd
  membership form, now reading soft ``Y``) and ``b * prior`` on its own key. A permanent hook on
  ``hook_attn_scores`` replaces the scores ``s`` by ``log relu(s)`` (:func:`circuits.variants.attention.linear`),
  so the pattern is ``s / sum(s)``: the new centroid is ``(sum_i r_ij x_i + prior c_j) / (sum_i r_ij + prior)``.
  The ``prior`` pseudo-count (default 1e-200) keeps a centroid whose responsibilities all underflow to 0 in place
  (the soft empty-cluster rule) and moves any other centroid by less than 1e-184 of the data scale.

What is exact: each block equals the soft k-means step applied to its input up to float64 rounding. The
responsibilities carry the rounding of the scores, ``~ beta * eps`` relative (softmax is that sensitive at
stiffness ``beta``: the reference has the same conditioning); the update's weights carry ``~ |log w| * eps``.

``annealed`` (a variant of our own): the temperature is *untied across layers*, ``beta_t = beta * growth**t`` at
assignment ``t``. That is deterministic annealing (soft k-means whose stiffness grows each iteration), which starts
as a blurred clustering and ends as Lloyd's.

``beta`` is in unit-scaled squared distances (the encoder divides the data by its radius ``s``): on the user's data
the stiffness is ``beta / s^2``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import ClassVar, TYPE_CHECKING

import numpy as np

from circuits import hook_names
from circuits.blocks import ASSIGN, UPDATE, assign_mlp, layers_of, update_block, update_mlp, write_label, write_mean
from circuits.layout import ResidualLayout
from circuits.reference import Reference, sq_distances
from circuits.sharpness import Sharpness
from circuits.spec import NoObligations, Param, VariantSpec
from circuits.variants.base import assemble, unit_sharpness
from circuits.variants.references import softmax_rows
from circuits.weights import BlockWeights, HeadBuilder

if TYPE_CHECKING:
    import torch

    from circuits.build import KMeansCircuit


@dataclass
class SoftKMeans(Reference):
    """Soft k-means with stiffness ``beta``: ``R = softmax_j(-beta_t |x - c_j|^2)``, responsibility-weighted means.

    ``prior`` is a pseudo-count on the old centroid: ``c_j <- (sum_i r_ij x_i + prior c_j) / (sum_i r_ij + prior)``.
    It only matters when a centroid's responsibilities all but vanish (it then keeps its place, the soft analogue
    of the empty-cluster rule); ``prior = 0`` is textbook soft k-means. ``growth`` anneals the stiffness,
    ``beta_t = beta * growth**t`` at assignment ``t`` (deterministic annealing; ``growth = 1`` is plain soft k-means).
    """

    beta: float = 1.0
    prior: float = 0.0
    growth: float = 1.0
    name: str = "soft"
    mean_update: ClassVar[bool] = False

    def __post_init__(self) -> None:
        self.hard = False

    def stiffness(self, t: int) -> float:
        return self.beta * self.growth**t

    def assign(self, X, C, t):
        return softmax_rows(-self.stiffness(t) * sq_distances(X, C))

    update = Reference.weighted_update

    def update_weights(self, X, R, C, u):
        mass = R.sum(axis=0) + self.prior
        W = np.concatenate([R.T, np.full((C.shape[0], 1), self.prior)], axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            W = W / mass[:, None]
        # No responsibility and no prior: nothing to average, keep the centroid.
        W[mass == 0] = 0.0
        W[mass == 0, -1] = 1.0
        return W


#: Largest stiffness a soft assign head takes: its scores ``beta * |x - c|^2`` (unit-scaled, up to 4) and their
#: differences must stay finite in float64 (max ~1.8e308) with room for the softmax's sums.
MAX_STIFFNESS = 1e250


def stiffness_overflow(beta: float, growth: float, iterations: int) -> str | None:
    """Why ``beta * growth**t`` for ``t <= iterations`` exceeds :data:`MAX_STIFFNESS`, or ``None``.

    Compared in logarithms: ``growth**iterations`` itself overflows (OverflowError) long before the product is
    compared, e.g. growth 1e6 over 60 iterations.
    """
    if growth <= 1 or iterations <= 0:
        peak_log = math.log10(beta)
    else:
        peak_log = math.log10(beta) + iterations * math.log10(growth)
    if peak_log > math.log10(MAX_STIFFNESS):
        return (f"the last stiffness beta * growth^T = 1e{peak_log:.1f} exceeds {MAX_STIFFNESS:g}"
                f" (its scores overflow float64); lower beta, growth or the iterations")
    return None


#: Pseudo-count on the old centroid in the soft update (see the module docstring).
DEFAULT_PRIOR = 1e-200
#: Extra margin of the masked keys beyond the largest possible spread of centroid scores (3 beta).
MASK_MARGIN = 1000.0


def soft_assign_head(layout: ResidualLayout, beta: float) -> HeadBuilder:
    """Point queries: softmax over centroids of ``-beta |x - c_j|^2``; other queries sit on the BOS sink."""
    masked = 4 * beta + MASK_MARGIN
    head = HeadBuilder(layout)
    for m in range(layout.d):
        head.qk({("X", m): 2 * beta}, {("C", m): 1.0})
    head.qk({("IS_POINT", 0): -beta}, {("N", 0): 1.0})
    head.qk({("IS_POINT", 0): -masked}, {("IS_POINT", 0): 1.0, ("IS_BOS", 0): 1.0})
    head.qk({("IS_CENTROID", 0): masked, ("IS_BOS", 0): masked}, {("IS_BOS", 0): 1.0})
    return write_label(head)


def soft_assign_block(layout: ResidualLayout, beta: float) -> BlockWeights:
    return BlockWeights(ASSIGN, soft_assign_head(layout, beta).build(), assign_mlp(layout).build(),
                        notes={"beta": beta, "mask": 4 * beta + MASK_MARGIN})


def soft_update_head(layout: ResidualLayout, b: float, prior: float) -> HeadBuilder:
    """Scores ``b r_ij`` on points, ``b prior`` on the centroid's own key; read through linear attention."""
    head = HeadBuilder(layout)
    for j in range(layout.k):
        head.qk({("ID", j): b}, {("Y", j): 1.0, ("ID", j): prior})
    head.qk({("IS_POINT", 0): b, ("IS_BOS", 0): b}, {("IS_BOS", 0): 1.0})
    return write_mean(head)


def _check(beta: float, growth: float, prior: float, iterations: int) -> None:
    if not 0 < beta:
        raise ValueError(f"soft k-means needs beta > 0, got {beta}")
    if not growth >= 1:
        raise ValueError(f"growth must be >= 1, got {growth}")
    overflow = stiffness_overflow(beta, growth, iterations)
    if overflow:
        raise ValueError(overflow)
    if not 0 < prior < 1e-6:
        raise ValueError(f"prior must lie in (0, 1e-6), got {prior}")


def build_soft_circuit(d: int, k: int, iterations: int = 10, *, beta: float, growth: float = 1.0,
                       prior: float = DEFAULT_PRIOR, sharpness: Sharpness | None = None,
                       dtype: torch.dtype | None = None, device: str = "cpu",
                       name: str | None = None) -> KMeansCircuit:
    """Soft k-means with unit-scaled stiffness ``beta`` (``growth > 1``: annealed, ``beta * growth**t``)."""
    from circuits.variants import attention  # torch: at build time only (circuits.variants.base)

    _check(beta, growth, prior, iterations)
    name = name or ("soft" if growth == 1 else "annealed")
    layout = ResidualLayout(d, k)
    b = unit_sharpness(sharpness).beta_update
    sharp = unit_sharpness(sharpness, beta=beta, tie_break=0.0)
    update = BlockWeights(UPDATE, soft_update_head(layout, b, prior).build(), update_mlp(layout).build(),
                          notes={"beta_update": b, "prior": prior})
    blocks: list[BlockWeights] = []
    for t in range(iterations + 1):
        # The first update commits C0 exactly like Lloyd's; the others average with soft responsibilities.
        blocks.append(update_block(layout, sharp) if t == 0 else update)
        blocks.append(soft_assign_block(layout, beta * growth**t))
    hooks = {
        layer: (hook_names.attn_scores(layer), attention.linear,
                "normalised linear attention: scores s -> log relu(s), pattern s / sum(s)")
        for layer in layers_of(iterations, UPDATE)[1:]
    }
    params = {"beta": beta, "prior": prior} | ({"growth": growth} if name == "annealed" else {})

    def reference(scale: float, tie_break_abs: float, problem: int = 0) -> SoftKMeans:
        return SoftKMeans(beta=beta / scale**2, prior=prior, growth=growth, name=name)

    spec = (SOFT if name == "soft" else ANNEALED).built(params, reference)
    return assemble(spec, layout, blocks, iterations, sharp, dtype=dtype, device=device, hooks=hooks)


def build_annealed_circuit(d: int, k: int, iterations: int = 10, *, beta: float, growth: float,
                           **kwargs) -> KMeansCircuit:
    """Deterministic annealing: the soft circuit with stiffness ``beta * growth**t`` at assignment ``t``."""
    return build_soft_circuit(d, k, iterations, beta=beta, growth=growth, name="annealed", **kwargs)


EXACTNESS = ("float64-exact step by step: responsibilities to ~beta*eps relative (the conditioning of softmax"
             " at that stiffness), update weights to ~|log w|*eps")
#: The update head of both: normalised linear attention through a permanent hook.
LINEAR_UPDATE = "; normalised linear attention (permanent hook on hook_attn_scores) in the update head"
STIFFNESS = Param("beta", 30.0, 0.0, MAX_STIFFNESS, low_inclusive=False)

SOFT = VariantSpec(
    name="soft",
    algorithm="soft k-means: r_ij = softmax_j(-beta |x_i - c_j|^2), c_j = sum_i r_ij x_i / sum_i r_ij",
    alteration="finite temperature in the assign head" + LINEAR_UPDATE,
    exactness=EXACTNESS,
    builder=build_soft_circuit,
    reference_class=SoftKMeans,
    parameters=(STIFFNESS,),
    replaced_knobs=("beta", "tie_break"),
    soft_assignments=True,
    swapped_update_normalisation=True,
    proof=NoObligations.soft_by_design("soft", "soft k-means: finite temperature is the algorithm"),
)

#: Soft k-means whose temperature is untied across layers (``growth``), capped by :func:`stiffness_overflow`.
ANNEALED = replace(
    SOFT,
    name="annealed",
    algorithm="deterministic annealing: soft k-means with stiffness beta * growth^t at iteration t",
    alteration="finite temperature in the assign head, untied and growing per layer" + LINEAR_UPDATE,
    builder=build_annealed_circuit,
    parameters=(replace(STIFFNESS, default=1.0), Param("growth", 2.0, 1.0, 1e6)),
    joint_limit=lambda p, iterations: stiffness_overflow(p["beta"], p["growth"], iterations),
    proof=NoObligations.soft_by_design("annealed", "deterministic annealing: soft assignments at every temperature"),
)
