"""Other attention normalisations, installed as permanent hooks on ``hook_attn_scores``.

TransformerLens always applies ``softmax`` to the attention scores. A hook on ``hook_attn_scores`` that replaces
the scores ``s`` by ``log phi(s)`` makes the pattern ``softmax(log phi(s)) = phi(s) / sum phi(s)``: any
non-negative normalisation ``phi`` becomes the head's attention, and ``hook_pattern`` shows the pattern actually
used (keys with ``phi = 0`` get score ``-inf`` and weight exactly 0). The cost of the detour is the rounding of
``exp(log(.))``: a relative error of a few ulp times ``|log phi|`` on each weight, below 1e-13 for any weight
that is not itself negligible.

* :func:`linear`: ``phi(s) = relu(s)``: normalised *linear* attention, the weighting of the paper's soft update.
* :func:`sparsemax`: ``phi = sparsemax(s)`` (Martins & Astudillo, 2016), a projection onto the simplex that gives
  exactly zero weight to keys scoring more than 1 below the top ones.
* :func:`gumbel_max`: ``phi = one-hot(argmax(s + g))`` with seeded Gumbel noise ``g`` on the centroid queries: hard
  attention that *samples* a key with probability ``softmax(s)``.

Each hook also carries ``hook.structured(scores, groups)``: the same transformation on the grouped scores of
:mod:`circuits.structured` (rows = groups of identical queries, columns = groups of identical keys, with their
multiplicities), so the structured execution path can run these variants exactly. ``hook.single_keys`` says that
the hook treats keys with equal scores differently (per-key noise), so keys must not be grouped.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from jaxtyping import Float

from circuits.layout import SequenceLayout
from circuits.variants.references import gumbel_noise


def _structured(fn, single_keys: bool = False):
    def attach(hook):
        hook.structured = fn
        hook.single_keys = single_keys
        return hook
    return attach

Scores = Float[torch.Tensor, "batch head query key"]


def _as_log_pattern(phi: Scores) -> Scores:
    return torch.log(phi)


def _linear_grouped(scores, groups):
    # Element-wise, so grouping commutes with it.
    return _as_log_pattern(torch.clamp(scores, min=0.0))


@_structured(_linear_grouped)
def linear(scores: Scores, hook=None) -> Scores:
    """Normalised linear attention: weights proportional to ``relu(s)``."""
    return _as_log_pattern(torch.clamp(scores, min=0.0))


def sparsemax_rows(z: Scores) -> Scores:
    """Sparsemax over the last axis (every entry finite)."""
    zs, _ = torch.sort(z, dim=-1, descending=True)
    cumulative = zs.cumsum(dim=-1)
    ranks = torch.arange(1, z.shape[-1] + 1, dtype=z.dtype, device=z.device)
    # The support is a prefix of the sorted scores: its size is the number of ranks that pass the test.
    size = (1 + ranks * zs > cumulative).sum(dim=-1, keepdim=True)
    tau = (cumulative.gather(-1, size - 1) - 1.0) / size.to(z.dtype)
    return torch.clamp(z - tau, min=0.0)


def sparsemax_grouped_rows(z: Float[torch.Tensor, "rows groups"], counts: torch.Tensor) -> Float[torch.Tensor, "rows groups"]:
    """Sparsemax over rows in which column ``g`` stands for ``counts[g]`` equal entries.

    Copies of one value enter or leave the support together (the support test ``1 + r z_(r) > sum_{i<=r} z_(i)``
    does not depend on which copy of a tied value is ``r``), so the dense threshold ``tau`` is recovered from
    count-weighted cumulative sums over the distinct values.
    """
    zs, order = torch.sort(z, dim=-1, descending=True)
    c = counts.to(z.dtype)[order]
    ranks = c.cumsum(dim=-1)
    cumulative = (c * zs).cumsum(dim=-1)
    passes = 1 + ranks * zs > cumulative
    last = passes.sum(dim=-1, keepdim=True) - 1
    tau = (cumulative.gather(-1, last) - 1.0) / ranks.gather(-1, last)
    return torch.clamp(z - tau, min=0.0)


def _sparsemax_grouped(scores, groups):
    return _as_log_pattern(sparsemax_grouped_rows(scores, groups.key_counts))


@_structured(_sparsemax_grouped)
def sparsemax(scores: Scores, hook=None) -> Scores:
    """Sparsemax attention."""
    return _as_log_pattern(sparsemax_rows(scores))


def gumbel_max(seed: int, update: int, k: int) -> Callable[[Scores, object], Scores]:
    """Hard attention on ``argmax(s + g)``; ``g`` is :func:`~circuits.variants.references.gumbel_noise` of
    ``(seed, update, problem)`` on the centroid queries of each problem of the batch, 0 on the other queries."""

    def noise_rows(problem: int, n_key: int, dtype, device) -> torch.Tensor:
        return torch.as_tensor(gumbel_noise(seed, update, problem, k, n_key), dtype=dtype, device=device)

    def hook(scores: Scores, hook=None) -> Scores:
        batch, _, n_query, n_key = scores.shape
        rows = SequenceLayout(n_query - 1 - k, k).centroids
        noise = torch.zeros_like(scores)
        for b in range(batch):
            noise[b, :, rows, :] = noise_rows(b, n_key, scores.dtype, scores.device)
        choice = (scores + noise).argmax(dim=-1, keepdim=True)
        pattern = torch.zeros_like(scores).scatter_(-1, choice, 1.0)
        return _as_log_pattern(pattern)

    def grouped(scores, groups):
        # Keys are single positions here (``single_keys``): each draws its own noise.
        seq = SequenceLayout(groups.n_tokens - 1 - k, k)
        g = noise_rows(groups.problem, groups.n_tokens, scores.dtype, scores.device)[:, groups.key_positions]
        noise = torch.zeros_like(scores)
        query = groups.query_positions
        is_centroid = (query >= seq.centroids.start) & (query < seq.centroids.stop)
        noise[is_centroid] = g[query[is_centroid] - seq.centroids.start]
        choice = (scores + noise).argmax(dim=-1, keepdim=True)
        return _as_log_pattern(torch.zeros_like(scores).scatter_(-1, choice, 1.0))

    return _structured(grouped, single_keys=True)(hook)
