"""A trained model's exported ``HookedTransformer``, run in ``O(n k)`` per layer: the dense forward without its
point x point block, after proving on the run's own vectors that the block weighs exactly 0.

A trained model's queries and keys all differ, so :mod:`circuits.structured` (groups of identical vectors)
refuses it. But its structural channel (:func:`circuits.training.construction.structural_channel`) pushes every
point key far below the ``k + 1`` non-point keys (BOS, centroids) for every point query. When, for a point
query, an upper bound on every point key's score lies more than float's underflow (``-log`` of the dtype's
smallest subnormal, plus 1) below the row's largest non-point score, the dense softmax's ``exp(s - max)`` of
every point key is exactly 0, its denominator is the sum over the non-point keys, and its output is the
non-point keys' values weighed by that pattern: computing only the ``n x (k + 1)`` block *is* the dense
forward, summation order aside. The bound, per point query ``q``: ``q . c + sum_m |q_m| max_j |k_jm - c_m|`` (``c`` the
mean point key), less than the margin by a rounding allowance of both sides' products. Where it does
not hold the path refuses (:class:`~circuits.structured.StructuredPathUnavailable`, with the query and the gap);
nothing is approximated. BOS and centroid queries attend every key, densely. The MLPs are the model's own gated
MLPs (:class:`circuits.structured.MLPPlan`, restricted to the rows they write).

:func:`masked_blocks` takes the ``HookedTransformer`` itself (its parameters, as loaded), so the export-parity
check of ``cluster --checkpoint`` still checks the exported model's weights.
"""

from __future__ import annotations

import math

import torch
from jaxtyping import Float
from torch import Tensor

from circuits.structured import AttentionPlan, MLPPlan, StructuredPathUnavailable, check_supported


def underflow_gap(dtype: torch.dtype) -> float:
    """A gap below the row's maximum beyond which ``exp`` is exactly 0 in ``dtype``: ``-log`` of its smallest
    subnormal, plus 1."""
    info = torch.finfo(dtype)
    return -math.log(info.smallest_normal * info.eps) + 1.0


def masked_attention(attn, plan: AttentionPlan, xT: Float[Tensor, "d_model pos"], n: int
                     ) -> Float[Tensor, "c pos"]:
    """One head on one problem (feature-major; tokens ``[BOS, n points, centroids]``): the rows ``plan.out.rows``
    of its output, the point x point block skipped once it is proved to weigh exactly 0 (module docstring)."""
    qT, kT, vT = plan.qkv.apply(xT).split(plan.d_head, dim=0)
    scale = attn.attn_scale
    points = slice(1, n + 1)
    small = torch.cat([torch.zeros(1, dtype=torch.long), torch.arange(n + 1, xT.shape[1])])
    q_points, k_points, k_small = qT[:, points], kT[:, points], kT[:, small]
    point_scores = (q_points.T @ k_small) / scale  # [n, k+1]
    q_norm = q_points.norm(dim=0)
    centre = k_points.mean(dim=1, keepdim=True)
    spread = (k_points - centre).abs().max(dim=1).values  # per feature: the structural one does not vary
    bound = (centre[:, 0] @ q_points + spread @ q_points.abs()) / scale  # every point key's score, from above
    # Rounding allowance: a dot product of d_head terms is within d_head * eps * |q| |k| of its exact value, for the
    # dense forward's scores, the bound's products and the margin alike.
    largest_key = torch.maximum(k_points.norm(dim=0).max(), k_small.norm(dim=0).max())
    eps = torch.finfo(xT.dtype).eps
    allowance = 4 * (plan.d_head + 2) * eps * q_norm * largest_key / scale
    gap = point_scores.max(dim=1).values - bound - allowance
    if not bool(torch.isfinite(gap).all()) or bool((gap <= underflow_gap(xT.dtype)).any()):
        worst = int(torch.nan_to_num(gap, nan=-math.inf).argmin())
        raise StructuredPathUnavailable(
            f"point query {worst}'s point keys are not provably masked (score gap {float(gap[worst]):.3g}, needs"
            f" > {underflow_gap(xT.dtype):.3g}): run the dense HookedTransformer")
    point_pattern = torch.softmax(point_scores, dim=1)
    small_pattern = torch.softmax((qT[:, small].T @ kT) / scale, dim=1)  # [k+1, pos]
    small_pattern = torch.where(torch.isnan(small_pattern), torch.zeros_like(small_pattern), small_pattern)
    zT = torch.empty_like(qT)
    zT[:, points] = vT[:, small] @ point_pattern.T
    zT[:, small] = vT @ small_pattern.T
    return plan.out.apply(zT)


@torch.no_grad()
def masked_blocks(model, resid: Float[Tensor, "batch pos d_model"], n: int, start: int = 0
                  ) -> Float[Tensor, "batch pos d_model"]:
    """``model(resid, start_at_layer=start, stop_at_layer=n_layers)`` for a trained model's exported
    ``HookedTransformer`` (no normalisation, one head, gated ReLU MLP), in ``O(n k)`` per layer; raises
    :class:`~circuits.structured.StructuredPathUnavailable` where the point x point block is not provably 0."""
    check_supported(model)
    states = [r.T.clone(memory_format=torch.contiguous_format) for r in resid]
    for block in list(model.blocks)[start:]:
        if not (isinstance(block.ln1, torch.nn.Identity) and isinstance(block.ln2, torch.nn.Identity)):
            raise StructuredPathUnavailable("the masked path runs models without normalisation")
        attn_plan, mlp_plan = AttentionPlan.of(block.attn), MLPPlan.of(block.mlp)
        for xT in states:
            xT[attn_plan.out.rows] += masked_attention(block.attn, attn_plan, xT, n)
            xT[mlp_plan.out.rows] += mlp_plan.apply(xT)
    return torch.stack([s.T for s in states])
