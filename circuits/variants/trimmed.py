"""Trimmed k-means through an attention sink: points with no centroid within a radius are left out.

Alteration: ``use_attention_sinks=True``, the per-head sink logit of gpt-oss in TransformerLens: a virtual key
that every query also attends to, with value 0. Here the assign head's sink logit is ``-beta theta`` and the head's
scores are made *exactly* ``-beta |x - c_j|^2`` (the query also reads ``|x|^2``, a feature the update MLP keeps in
a new subspace ``NX``). So a point whose nearest centroid is farther than ``sqrt(theta)`` puts all its attention
on the sink, writes nothing to ``Y_stage``, and is left unassigned: no update head counts it (its ``Y`` is 0),
and its label reads -1, an outlier. Update heads get a sink logit of -1e300 (never attended; float32: a quarter
of its most negative number).

Why a threshold and not a fraction ``alpha``: leaving out the ``alpha n`` farthest points needs each point's
*rank* among all the points' distances, a global order statistic that one attention layer cannot compute (a
softmax selects a maximum; it does not count), whereas a threshold is a per-point comparison that the sink
performs in the same head that assigns. The threshold is ``radius`` times the data radius ``s`` (the encoder's
unit), ``theta = radius^2`` in unit-scaled squared distance. Ties: a point exactly at the threshold stays in
(the sink carries a tie-break ``tau k`` above every centroid's ``tau j``).

What is exact: hard attention (float64) for every point whose nearest-centroid gap and whose distance from the
threshold both exceed ``745 / beta``; points inside that window are reported as ties.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from circuits.blocks import ASSIGN, UPDATE, assign_head, assign_mlp, update_head, update_mlp
from circuits.layout import ResidualLayout
from circuits.reference import Costs, Reference, sq_distances
from circuits.sharpness import Sharpness
from circuits.spec import ObligationSet, Param, VariantSpec
from circuits.variants.base import NX, assemble, finfo, nx_units, unit_sharpness
from circuits.weights import BlockWeights, HeadBuilder

if TYPE_CHECKING:
    import torch

    from circuits.build import KMeansCircuit


@dataclass
class TrimmedKMeans(Reference):
    """Trimmed k-means with a distance threshold: a point whose nearest centroid is farther than ``sqrt(theta)``
    (squared distance above ``theta``) is an outlier at that iteration: it belongs to no cluster and is left out of
    the update. ``sink_tie_break`` is added to the threshold's cost, so a point exactly at ``theta`` stays in."""

    theta: float = 1.0
    sink_tie_break: float = 0.0
    name: str = "trimmed"

    def costs(self, X, C, t):
        k = C.shape[0]
        D = sq_distances(X, C)
        values = np.concatenate([D, np.full((len(X), 1), self.theta)], axis=1)
        bias = np.concatenate([self.tie_break * np.arange(k, dtype=np.float64), [self.sink_tie_break]])
        return Costs(values, np.concatenate([np.arange(k), [-1]]), bias)


def no_sink(dtype: torch.dtype | None) -> float:
    """Sink logit of the heads that must never use the sink: -1e300, far below any score (float64), or a quarter
    of the most negative number where -1e300 does not fit (float32)."""
    return max(-1e300, -0.25 * float(finfo(dtype).max))


def trimmed_assign_head(layout: ResidualLayout, sharp: Sharpness) -> HeadBuilder:
    """Lloyd's assign head plus one channel reading ``|x|^2``: scores become ``-beta (|x - c_j|^2 + tau j)``
    exactly, so they can be compared with a fixed sink logit."""
    head = assign_head(layout, sharp)
    head.qk({("NX", 0): -sharp.beta}, {("ONE", 0): 1.0})
    return head


def build_trimmed_circuit(d: int, k: int, iterations: int = 10, *, radius: float, sharpness: Sharpness | None = None,
                          dtype: torch.dtype | None = None, device: str = "cpu") -> KMeansCircuit:
    """Trimmed k-means: points farther than ``radius`` (in data radii) from every centroid are outliers."""
    if not 0 < radius <= 4:
        raise ValueError(f"radius must lie in (0, 4] (data radii; 2 already keeps every point), got {radius}")
    sharp = unit_sharpness(sharpness)
    layout = ResidualLayout(d, k, extra=(NX,))
    theta = radius**2
    sink_tie = sharp.tie_break * k
    sink_logit = -sharp.beta * (theta + sink_tie)
    mlp = update_mlp(layout)
    nx_units(mlp)
    update = BlockWeights(UPDATE, update_head(layout, sharp).build(), mlp.build(),
                          notes={"beta_update": sharp.beta_update}, params={"attn.sinks": np.array([no_sink(dtype)])})
    assign = BlockWeights(ASSIGN, trimmed_assign_head(layout, sharp).build(), assign_mlp(layout).build(),
                          notes={"beta": sharp.beta, "theta": theta},
                          params={"attn.sinks": np.array([sink_logit])})
    blocks = [update, assign] * (iterations + 1)

    def reference(scale: float, tie_break_abs: float, problem: int = 0) -> TrimmedKMeans:
        return TrimmedKMeans(tie_break=tie_break_abs, theta=theta * scale**2,
                             sink_tie_break=sink_tie * scale**2)

    spec = TRIMMED.built({"radius": radius, "theta": theta}, reference, sink_logit=sink_logit)
    return assemble(spec, layout, blocks, iterations, sharp, dtype=dtype, device=device, use_attention_sinks=True)


TRIMMED = VariantSpec(
    name="trimmed",
    algorithm="trimmed k-means by threshold: points with squared distance above theta to every centroid are"
              " outliers, left out of the update",
    alteration="use_attention_sinks=True with sink logit -beta*theta in the assign head (scores exactly"
               " -beta|x-c|^2 via a |x|^2 feature)",
    exactness="exact (hard attention, float64) outside a 745/beta window around each gap and the threshold",
    builder=build_trimmed_circuit,
    reference_class=TrimmedKMeans,
    parameters=(Param("radius", 0.5, 0.0, 4.0, low_inclusive=False),),
    proof=ObligationSet.TRIMMED,
    bounded=True,
    distance_head=True,
)
