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
"""

from __future__ import annotations

from typing import Callable

import torch
from jaxtyping import Float

from circuits.layout import SequenceLayout
from circuits.variants.references import gumbel_noise

Scores = Float[torch.Tensor, "batch head query key"]


def _as_log_pattern(phi: Scores) -> Scores:
    return torch.log(phi)


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


def sparsemax(scores: Scores, hook=None) -> Scores:
    """Sparsemax attention."""
    return _as_log_pattern(sparsemax_rows(scores))


def gumbel_max(seed: int, update: int, k: int) -> Callable[[Scores, object], Scores]:
    """Hard attention on ``argmax(s + g)``; ``g`` is :func:`~circuits.variants.references.gumbel_noise` of
    ``(seed, update, problem)`` on the centroid queries of each problem of the batch, 0 on the other queries."""

    def hook(scores: Scores, hook=None) -> Scores:
        batch, _, n_query, n_key = scores.shape
        rows = SequenceLayout(n_query - 1 - k, k).centroids
        noise = torch.zeros_like(scores)
        for b in range(batch):
            g = torch.as_tensor(gumbel_noise(seed, update, b, k, n_key), dtype=scores.dtype, device=scores.device)
            noise[b, :, rows, :] = g
        choice = (scores + noise).argmax(dim=-1, keepdim=True)
        pattern = torch.zeros_like(scores).scatter_(-1, choice, 1.0)
        return _as_log_pattern(pattern)

    return hook
