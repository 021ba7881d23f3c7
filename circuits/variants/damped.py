"""Damped Lloyd (a variant of our own): partial erasure in the residual stream.

Lloyd's update MLP *replaces* the centroid: ``C += relu(s - C) - relu(C - s)`` with ``s`` the members' mean in
``C_stage``. Scaling those two units' output weights by ``eta`` erases only a fraction ``eta`` of the old centroid
and writes the same fraction of the new one:

    c_j <- c_j + eta (mean_j - c_j)        (an empty cluster keeps its centroid: its mean is itself)

which is Lloyd's algorithm with step size ``eta`` (``eta = 1``: Lloyd's; ``eta < 1``: a relaxed, over-damped
iteration that moves each centroid part of the way, like a learning rate on the k-means fixed-point map;
``1 < eta < 2``: over-relaxation, which can speed up the slow final phase of Lloyd's). The ``N`` slot must hold
``|c_new|^2``: the MLP's squaring units read ``(1 - eta) C + eta C_stage`` instead of ``C_stage``. The first
update, which commits the initial centroids, stays Lloyd's (undamped): damping it would shrink them towards 0.

Algorithm (reference :class:`DampedKMeans`): from ``C0``, for ``t = 1 .. T``:
assign every point to its nearest centroid (ties to the lower index), compute each cluster's mean (an empty
cluster's mean is its centroid), move each centroid a fraction ``eta`` of the way there.

What is exact: everything, as in Lloyd's circuit (hard attention in float64); the damped step rounds like
``c + eta (m - c)`` evaluated in float64, which is how the reference evaluates it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, TYPE_CHECKING

from circuits.blocks import UPDATE, assign_block, update_block, update_head
from circuits.layout import ResidualLayout
from circuits.reference import Reference
from circuits.sharpness import Sharpness
from circuits.spec import ObligationSet, Param, VariantSpec
from circuits.variants.base import assemble, unit_sharpness
from circuits.weights import BlockWeights, MLPBuilder

if TYPE_CHECKING:
    import torch

    from circuits.build import KMeansCircuit


@dataclass
class DampedKMeans(Reference):
    """Damped Lloyd: hard assignment, then each centroid moves a fraction ``eta`` of the way to its members' mean,
    ``c_j <- c_j + eta (mean_j - c_j)`` (an empty cluster keeps its centroid). ``eta = 1`` is Lloyd's algorithm."""

    eta: float = 0.5
    name: str = "damped"
    mean_update: ClassVar[bool] = False

    def update(self, X, R, C, u):
        mean_weights = Reference.update_weights(self, X, R, C, u)
        mean = mean_weights[:, :-1] @ X + mean_weights[:, -1:] * C
        return C + self.eta * (mean - C)

    def update_weights(self, X, R, C, u):
        W = self.eta * Reference.update_weights(self, X, R, C, u)
        W[:, -1] += 1.0 - self.eta
        return W


def damped_update_mlp(layout: ResidualLayout, eta: float) -> MLPBuilder:
    mlp = MLPBuilder(layout)
    for m in range(layout.d):
        s, c = ("C_stage", m), ("C", m)
        mlp.unit(gate={s: 1.0, c: -1.0}, linear={("IS_CENTROID", 0): eta}, output={c: 1.0})
        mlp.unit(gate={c: 1.0, s: -1.0}, linear={("IS_CENTROID", 0): eta}, output={c: -1.0})
        mlp.unit(gate={s: 1.0}, linear={("ONE", 0): 1.0}, output={s: -1.0})
        mlp.unit(gate={s: -1.0}, linear={("ONE", 0): 1.0}, output={s: 1.0})
        new = {c: 1.0 - eta, s: eta}
        neg = {c: eta - 1.0, s: -eta}
        mlp.unit(gate=new, linear=new, output={("N", 0): 1.0})
        mlp.unit(gate=neg, linear=neg, output={("N", 0): 1.0})
    mlp.unit(gate={("N", 0): 1.0}, linear={("ONE", 0): 1.0}, output={("N", 0): -1.0})
    return mlp


def build_damped_circuit(d: int, k: int, iterations: int = 10, *, eta: float, sharpness: Sharpness | None = None,
                         dtype: torch.dtype | None = None, device: str = "cpu") -> KMeansCircuit:
    """Lloyd's iteration with step size ``eta`` in (0, 2)."""
    if not 0 < eta < 2:
        raise ValueError(f"eta must lie in (0, 2), got {eta}")
    sharp = unit_sharpness(sharpness)
    layout = ResidualLayout(d, k)
    commit = update_block(layout, sharp)
    damped = BlockWeights(UPDATE, update_head(layout, sharp).build(), damped_update_mlp(layout, eta).build(),
                          notes={"beta_update": sharp.beta_update, "eta": eta})
    assign = assign_block(layout, sharp)
    blocks: list[BlockWeights] = []
    for t in range(iterations + 1):
        blocks.extend([commit if t == 0 else damped, assign])

    def reference(scale: float, tie_break_abs: float, problem: int = 0) -> DampedKMeans:
        return DampedKMeans(tie_break=tie_break_abs, eta=eta)

    spec = DAMPED.built({"eta": eta}, reference)
    return assemble(spec, layout, blocks, iterations, sharp, dtype=dtype, device=device)


DAMPED = VariantSpec(
    name="damped",
    algorithm="damped Lloyd: c_j <- c_j + eta (mean_j - c_j) after each nearest-centroid assignment",
    alteration="partial erasure: the update MLP's commit units scaled by eta (a residual weight)",
    exactness="exact (hard attention, float64), as Lloyd's circuit",
    builder=build_damped_circuit,
    reference_class=DampedKMeans,
    parameters=(Param("eta", 0.5, 0.0, 2.0, low_inclusive=False, high_inclusive=False),),
    proof=ObligationSet.DAMPED,
    bounded=True,
    distance_head=True,
)
