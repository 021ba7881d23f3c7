"""Gumbel k-means: each centroid jumps to one of its members, drawn by Gumbel-max sampling (seeded).

Alteration: the update head of :mod:`circuits.variants.sparse` (closeness to the centroid plus membership), with
its softmax swapped for *Gumbel-max* hard attention by a permanent hook on ``hook_attn_scores``
(:func:`circuits.variants.attention.gumbel_max`): each centroid query adds seeded Gumbel noise ``g`` to its scores
and attends only to the top key. Since ``argmax_i(s_i + g_i)`` is a draw from ``softmax(s)``, centroid ``j``
becomes member ``i`` with probability ``softmax_i(-gamma |x_i - c_j|^2)`` over its members (``gamma = 0``:
uniformly), a randomised k-medoids-style step; a centroid without members keeps its place.

Membership must dominate the noise: numpy's float64 Gumbel draws lie in [-3.7, 36.8] (``-log(-log u)`` for ``u``
in ``[2^-53, 1 - 2^-53]``), so ``M = 8 gamma + 100`` puts every member above the own key (``M / 2``) and every
non-member whatever the noise. The noise is ``gumbel_noise(seed, update, problem)``: the reference draws the same
numbers, so the circuit is checked exactly, draw for draw.

What is exact: the choice of member, unless two members' perturbed scores agree to the rounding of ``M`` (~1e-14,
probability ~0); the assignment as in Lloyd's circuit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, TYPE_CHECKING

import numpy as np

from circuits import hook_names
from circuits.blocks import UPDATE, layers_of
from circuits.layout import ResidualLayout
from circuits.reference import Reference
from circuits.sharpness import Sharpness
from circuits.spec import NoObligations, Param, VariantSpec
from circuits.variants.base import NX, assemble, unit_sharpness
from circuits.variants.references import closeness, gumbel_noise
from circuits.variants.sparse import closeness_blocks

if TYPE_CHECKING:
    import torch

    from circuits.build import KMeansCircuit

@dataclass
class GumbelKMeans(Reference):
    """Hard assignment; each centroid jumps to one of its members drawn by Gumbel-max sampling,
    ``argmax_i(-gamma |x_i - c_j|^2 + g_ij)`` with seeded Gumbel noise ``g`` (:func:`gumbel_noise`), i.e. a member
    drawn with probability ``softmax_i(-gamma |x_i - c_j|^2)``; ``gamma = 0`` draws uniformly (a randomised
    k-medoids-style step). ``problem`` is the problem's index in its batch (it seeds the noise)."""

    gamma: float = 0.0
    seed: int = 0
    problem: int = 0
    name: str = "gumbel"
    mean_update: ClassVar[bool] = False

    update = Reference.weighted_update

    def update_weights(self, X, R, C, u):
        k, n = C.shape[0], X.shape[0]
        noise = gumbel_noise(self.seed, u, self.problem, k, 1 + n + k)

        def draw(members, j):
            # Point i is key 1 + i of the sequence, as in the circuit.
            return np.eye(len(members))[np.argmax(closeness(X, C, members, j, self.gamma) + noise[j, 1 + members])]

        return self.member_weights(X, R, C, draw)


#: Width of the float64 Gumbel range, rounded up: membership must beat it twice over.
NOISE_RANGE = 44.0


def build_gumbel_circuit(d: int, k: int, iterations: int = 10, *, gamma: float, seed: int,
                         sharpness: Sharpness | None = None, dtype: torch.dtype | None = None,
                         device: str = "cpu") -> KMeansCircuit:
    """Gumbel k-means: each update draws one member per centroid, with probability softmax(-gamma D)."""
    from circuits.variants import attention  # torch: at build time only (circuits.variants.base)

    if not 0 <= gamma <= 1e6:
        raise ValueError(f"gamma must lie in [0, 1e6], got {gamma}")
    seed = int(seed)
    if seed < 0:
        raise ValueError(f"seed must be >= 0, got {seed}")
    sharp = unit_sharpness(sharpness)
    layout = ResidualLayout(d, k, extra=(NX,))
    member = 8 * gamma + 2 * NOISE_RANGE + 12
    blocks = closeness_blocks(layout, sharp, gamma, member, iterations)
    hooks = {
        layer: (hook_names.attn_scores(layer), attention.gumbel_max(seed, u, k),
                f"Gumbel-max hard attention (seed {seed}, update {u}): one-hot argmax(s + g)")
        for u, layer in enumerate(layers_of(iterations, UPDATE))
    }

    def reference(scale: float, tie_break_abs: float, problem: int = 0) -> GumbelKMeans:
        return GumbelKMeans(tie_break=tie_break_abs, gamma=gamma / scale**2, seed=seed, problem=problem)

    spec = GUMBEL.built({"gamma": gamma, "seed": seed}, reference)
    return assemble(spec, layout, blocks, iterations, sharp, dtype=dtype, device=device, hooks=hooks)


GUMBEL = VariantSpec(
    name="gumbel",
    algorithm="hard assignment; centroid j <- member i drawn with probability softmax_i(-gamma |x_i - c_j|^2)",
    alteration="update head scores closeness; Gumbel-max hard attention with seeded noise (permanent hook on"
               " hook_attn_scores)",
    exactness="exact draw for draw (same seeded noise as the reference), assignments as in Lloyd's circuit",
    builder=build_gumbel_circuit,
    reference_class=GumbelKMeans,
    parameters=(Param("gamma", 0.0, 0.0, 1e6), Param("seed", 0, 0, 2**63 - 1)),
    swapped_update_normalisation=True,
    proof=NoObligations(
        "Gumbel k-means draws its update with a Python hook on hook_attn_scores, not with weights; obligations on the"
        " state dict cannot cover it, so it is not proven here (the verifier checks it draw for draw)", exact=True),
    distance_head=True,
)
