"""Spherical k-means through ``use_qk_norm``: attention scores become cosines.

Alteration: the configuration lever ``use_qk_norm=True`` (RMSNorm on every query and key vector of every head,
as in OLMo-2 / Gemma-3), with the RMSNorm gains set so that the scores keep their scale, and inputs on the sphere.

* **Input.** Spherical k-means (Dhillon & Modha) clusters directions: the points and the initial centroids are
  projected onto the unit sphere about the origin, ``x / |x|``, and encoded with no centring or scaling
  (:meth:`~circuits.spec.VariantSpec.prepare`). A zero point has no direction and is rejected.
* **Assignment by cosine.** The point query is ``[x ; -a ; -1]`` and centroid key ``j`` is ``[c_j ; 0 ; tau j]``.
  RMSNorm divides each by its norm, so the score is ``beta (x.c_j - tau j) / (|q| |k_j|)`` with the query norm the
  same for every key: the softmax picks ``argmax_j cos(x, c_j)`` (ties within ``tau j / |c_j|`` to the lower index)
  whatever the length of ``c_j``. Point and BOS keys are ``[0 ; 1 ; 0]``: they score ``-a beta / |q|``, below every
  centroid because ``a = 4`` exceeds ``|(x, -1)|``. Centroid and BOS queries ``[0 ; a ; 0]`` look at point and BOS
  keys, whose value (``ID``) is 0.
* **Update, unchanged in effect.** The Lloyd update head is rewritten so that RMSNorm is a no-op on it: every query
  and key has norm 1 (the centroid's own key is ``ID/2`` plus ``sqrt(3)/2`` in a padding channel), so the scores
  are ``beta_u`` on members, ``beta_u / 2`` on the own key and 0 elsewhere, exactly as in Lloyd's circuit. ``C``
  becomes the mean of the members' unit vectors: the spherical centroid *up to a positive scale*, which is all the
  next cosine assignment reads (the key normalisation does the rest). The readout normalises ``C``.

What is exact: assignments are exactly one-hot wherever the cosine gap times ``beta`` exceeds ~745 (float64),
as in Lloyd's circuit; the centroid direction is the mean of the members, to float64 rounding. Not exact: the
tie-break is ``tau j / |c_j|`` in cosine (it depends on the stored length of the centroid) rather than
``tau j``; the verifier's tie window covers the difference.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, TYPE_CHECKING

import numpy as np

from circuits.blocks import ASSIGN, UPDATE, assign_mlp, update_mlp, write_label, write_mean
from circuits.layout import ResidualLayout
from circuits.reference import Costs, Reference, labels_of, objective, unit_rows
from circuits.sharpness import Sharpness
from circuits.spec import NoObligations, VariantSpec
from circuits.variants.base import assemble, finfo, unit_sharpness
from circuits.variants.references import DEGENERATE, DegenerateUpdate
from circuits.weights import BlockWeights, HeadBuilder

if TYPE_CHECKING:
    import torch

    from circuits.build import KMeansCircuit


@dataclass
class SphericalKMeans(Reference):
    """Spherical k-means (Dhillon & Modha): unit-norm points, assignment by cosine similarity, centroid = normalised
    sum of the members. The cost is ``-cos(x_i, c_j)`` (centroids may be given at any positive scale)."""

    name: str = "spherical"
    mean_update: ClassVar[bool] = False

    def costs(self, X, C, t):
        k = C.shape[0]
        cos = unit_rows(X, "points") @ unit_rows(C, "centroids").T
        return Costs(-cos, np.arange(k), self.tie_break * np.arange(k, dtype=np.float64))

    def update(self, X, R, C, u):
        members = labels_of(R)
        new = unit_rows(C, "centroids").copy()
        Xu = unit_rows(X, "points")
        for j in range(C.shape[0]):
            inside = members == j
            if inside.any():
                s = Xu[inside].sum(axis=0)
                norm = np.linalg.norm(s)
                # Members whose directions cancel (e.g. two opposite points) leave no direction to move to.
                if norm <= DEGENERATE * inside.sum():
                    raise DegenerateUpdate(
                        f"spherical k-means is undefined at update {u}: the {int(inside.sum())} unit vectors of cluster"
                        f" {j} sum to {norm:.2g} (no mean direction)")
                new[j] = s / norm
        return new

    def objective(self, X, C, R):
        # 2 * sum(1 - cos): the k-means objective of the unit points about the unit centroids.
        return objective(unit_rows(X, "points"), unit_rows(C, "centroids"), labels_of(R))

#: Mask channel magnitude: must exceed the norm of ``(x, -1)`` for unit ``x`` (sqrt 2).
MASK = 4.0


def spherical_assign_head(layout: ResidualLayout, tie_break: float) -> HeadBuilder:
    head = HeadBuilder(layout)
    for m in range(layout.d):
        head.qk({("X", m): 1.0}, {("C", m): 1.0})
    head.qk({("IS_POINT", 0): -MASK, ("IS_CENTROID", 0): MASK, ("IS_BOS", 0): MASK},
            {("IS_POINT", 0): 1.0, ("IS_BOS", 0): 1.0})
    head.qk({("IS_POINT", 0): -1.0}, {("ID", j): tie_break * j for j in range(layout.k)})
    return write_label(head)


def spherical_update_head(layout: ResidualLayout) -> HeadBuilder:
    head = HeadBuilder(layout)
    for j in range(layout.k):
        head.qk({("ID", j): 1.0}, {("Y", j): 1.0, ("ID", j): 0.5})
    # Padding channel: gives the centroid's own key norm 1, so RMSNorm keeps its score at half a member's.
    head.qk({}, {("IS_CENTROID", 0): math.sqrt(3) / 2})
    head.qk({("IS_POINT", 0): 1.0, ("IS_BOS", 0): 1.0}, {("IS_BOS", 0): 1.0})
    return write_mean(head)


def _norm_gains(block: BlockWeights, d_head: int, query_gain: float) -> BlockWeights:
    block.params = {"attn.q_norm.w": np.full(block.head.d_head, query_gain),
                    "attn.k_norm.w": np.ones(block.head.d_head)}
    return block


def build_spherical_circuit(d: int, k: int, iterations: int = 10, sharpness: Sharpness | None = None,
                            dtype: torch.dtype | None = None, device: str = "cpu") -> KMeansCircuit:
    """Spherical k-means: cosine assignment through ``use_qk_norm``, mean of unit vectors as the update."""
    sharp = unit_sharpness(sharpness)
    layout = ResidualLayout(d, k)
    assign_head = spherical_assign_head(layout, sharp.tie_break).build()
    update_head = spherical_update_head(layout).build()
    d_head = max(assign_head.d_head, update_head.d_head)
    # RMSNorm maps v to sqrt(d_head) v / |v| (times its gain), so q.k becomes d_head * gain * cos.
    # Assign: every point query has the same norm sqrt(|x|^2 + MASK^2 + 1) = sqrt(2 + MASK^2).
    q_norm = math.sqrt(2 + MASK**2)
    assign = _norm_gains(BlockWeights(ASSIGN, assign_head, assign_mlp(layout).build(), notes={"beta": sharp.beta}),
                         d_head, sharp.beta * q_norm / d_head)
    update = _norm_gains(BlockWeights(UPDATE, update_head, update_mlp(layout).build(),
                                      notes={"beta_update": sharp.beta_update}),
                         d_head, sharp.beta_update / d_head)
    blocks = [update, assign] * (iterations + 1)
    tie_break = sharp.tie_break

    def reference(scale: float, tie_break_abs: float, problem: int = 0) -> SphericalKMeans:
        # Points are on the unit sphere: the tie-break is in cosine units, independent of the data's scale.
        return SphericalKMeans(tie_break=tie_break)

    spec = SPHERICAL.built({"tie_break": tie_break}, reference)
    # RMSNorm's eps would bias the norms: the smallest positive normal number only guards 0/0 on empty keys.
    eps = float(finfo(dtype).tiny)
    return assemble(spec, layout, blocks, iterations, sharp, dtype=dtype, device=device, use_qk_norm=True, eps=eps)


SPHERICAL = VariantSpec(
    name="spherical",
    algorithm="spherical k-means: unit points, assignment by cosine, centroid = normalised mean of the members",
    alteration="use_qk_norm=True (RMSNorm on queries and keys: scores are cosines); points projected onto the unit sphere",
    exactness="exact (hard attention, float64) for cosine gaps above 745/beta; ties within tau*j/|c_j| go to the lower index",
    builder=build_spherical_circuit,
    reference_class=SphericalKMeans,
    input_map="sphere",
    normalise_centroids=True,
    proof=NoObligations(
        "spherical k-means runs its scores through RMSNorm (use_qk_norm: q / sqrt(mean(q^2) + eps)), which is neither"
        " polynomial nor exactly a normalisation (eps); no obligation set covers it yet, so it is not proven here"
        " (the verifier checks it numerically)", exact=True),
)
