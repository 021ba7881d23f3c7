"""What a run's attention did, layer by layer: the summaries a :class:`~analysis.capture.Capture` keeps.

Split out of :mod:`analysis.capture`, which runs the circuit and re-exports these names. An assign head keeps, per
point query, its point x centroid scores and pattern and a certificate (chosen key, margin, ``leak_bound``); an
update head keeps its centroid query rows and a certificate against the intended support (:func:`update_certificate`).
Both are computed from the dense attention (:func:`summarise_head`) or from the grouped attention of
:mod:`circuits.structured` (:func:`summarise_assign_grouped`, :func:`update_rows_grouped`), with the same values.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
from jaxtyping import Float, Int

from circuits.blocks import ASSIGN, UPDATE
from circuits.encoding import EncodedBatch


@dataclass
class AssignAttention:
    """Point queries of an assign head (batch-first numpy)."""

    scores: Float[np.ndarray, "batch n k"]
    pattern: Float[np.ndarray, "batch n k"]
    chosen: Int[np.ndarray, "batch n"]
    margin: Float[np.ndarray, "batch n"]
    leak_bound: Float[np.ndarray, "batch n"]
    leak_observed: Float[np.ndarray, "batch n"]
    #: Attention mass on the attention sink (``use_attention_sinks``): ``1 - sum(pattern)``; ``None`` without sinks.
    sink_mass: Float[np.ndarray, "batch n"] | None = None


@dataclass
class UpdateAttention:
    """Centroid queries of an update head over all keys, with the certificate against the intended support."""

    scores: Float[np.ndarray, "batch k pos"]
    pattern: Float[np.ndarray, "batch k pos"]
    margin: Float[np.ndarray, "batch k"] = field(default=None)
    leak_bound: Float[np.ndarray, "batch k"] = field(default=None)
    leak_observed: Float[np.ndarray, "batch k"] = field(default=None)
    member_spread: Float[np.ndarray, "batch k"] = field(default=None)


def to_numpy(t: torch.Tensor) -> np.ndarray:
    """A float64 numpy *copy*: a view would keep the whole ``(n + k + 1)^2`` attention storage alive."""
    return np.array(t.detach().cpu().to(torch.float64).numpy(), copy=True)


def _summarise_assign(scores: torch.Tensor, pattern: torch.Tensor, encoded: EncodedBatch,
                      with_sink: bool = False) -> AssignAttention:
    seq = encoded.sequence
    s = scores[:, 0, seq.points, :]  # [batch, n, pos]
    p = pattern[:, 0, seq.points, :]
    best = s.topk(min(2, s.shape[-1]), dim=-1)
    top_score, top = best.values[..., 0], best.indices[..., 0]
    runner_up = best.values[..., 1] if s.shape[-1] > 1 else torch.full_like(top_score, -torch.inf)
    # Summed term by term rather than as 1 - p_top, which rounds to 0 or eps near a one-hot pattern.
    others = torch.exp(s - top_score[..., None]).scatter_(-1, top[..., None], 0.0)
    leak_bound = others.sum(dim=-1)
    del others
    leak_observed = p.clone().scatter_(-1, top[..., None], 0.0).sum(dim=-1)
    first_centroid = seq.centroids.start
    chosen = torch.where((top >= first_centroid) & (top < seq.centroids.stop), top - first_centroid, -1)
    return AssignAttention(
        scores=to_numpy(s[..., seq.centroids]),
        pattern=to_numpy(p[..., seq.centroids]),
        chosen=chosen.cpu().numpy(),
        margin=to_numpy(top_score - runner_up),
        leak_bound=to_numpy(leak_bound),
        leak_observed=to_numpy(leak_observed),
        sink_mass=to_numpy(1.0 - p.sum(dim=-1)) if with_sink else None,
    )


def _batch(arrays: list[np.ndarray]) -> np.ndarray:
    """Stack per-problem arrays; a batch of one is a view, not a copy (at a million points copies add up)."""
    return arrays[0][None] if len(arrays) == 1 else np.stack(arrays)


def _own_numpy(t: torch.Tensor) -> np.ndarray:
    """float64 numpy of a tensor that owns its storage (fresh results of indexing or arithmetic): no copy needed."""
    t = t.detach().cpu().to(torch.float64)
    owns = t.is_contiguous() and t.untyped_storage().nbytes() == t.numel() * t.element_size()
    return t.numpy() if owns else to_numpy(t)


def summarise_assign_grouped(groups, encoded: EncodedBatch, with_sink: bool = False) -> AssignAttention:
    """The assign summary of :func:`_summarise_assign`, from grouped attention (one per problem).

    Per query group: the best key group (lowest position among equal scores, as a dense argmax would pick), the
    runner-up (the best group again when it holds several equal keys), and the leak sums with multiplicities.
    """
    seq = encoded.sequence
    fields = {name: [] for name in ("scores", "pattern", "chosen", "margin", "leak_bound", "leak_observed", "sink_mass")}
    for g in groups:
        S, P = g.scores, g.pattern
        counts = g.keys.counts.to(S.dtype)
        rep = g.keys.representative
        top_score, top = S.max(dim=-1)
        tied = (S == top_score[:, None]).sum(dim=-1) > 1
        if bool(tied.any()):
            # Equal best scores in several key groups: the dense argmax takes the lowest position.
            at_top = S[tied] == top_score[tied, None]
            top[tied] = torch.where(at_top, rep[None, :], torch.iinfo(torch.long).max).argmin(dim=-1)
        top_col = top[:, None]
        others = counts.expand_as(S).scatter(-1, top_col, counts[top_col] - 1)
        runner_up = S.masked_fill(others == 0, -torch.inf).max(dim=-1).values
        leak_bound = (torch.exp(S - top_score[:, None]) * others).sum(dim=-1)
        leak_observed = (P * others).sum(dim=-1)
        top_position = rep[top]
        chosen = torch.where((top_position >= seq.centroids.start) & (top_position < seq.centroids.stop),
                             top_position - seq.centroids.start, -1)
        rows = seq.points if g.queries.is_identity else g.queries.inverse[seq.points]
        centroid_cols = seq.centroids if g.keys.is_identity else g.keys.inverse[seq.centroids]
        fields["scores"].append(_own_numpy(S[rows][:, centroid_cols]))
        fields["pattern"].append(_own_numpy(P[rows][:, centroid_cols]))
        fields["chosen"].append(chosen[rows].numpy().copy())
        fields["margin"].append(_own_numpy((top_score - runner_up)[rows]))
        fields["leak_bound"].append(_own_numpy(leak_bound[rows]))
        fields["leak_observed"].append(_own_numpy(leak_observed[rows]))
        if with_sink:
            fields["sink_mass"].append(_own_numpy((1.0 - P @ counts)[rows]))
    out = {name: _batch(values) if values else None for name, values in fields.items()}
    return AssignAttention(**out)


def update_rows_grouped(groups, encoded: EncodedBatch) -> UpdateAttention:
    rows = [g.block(encoded.sequence.centroids, slice(None)) for g in groups]
    return UpdateAttention(scores=_batch([_own_numpy(s) for s, _ in rows]),
                           pattern=_batch([_own_numpy(p) for _, p in rows]))


def update_certificate(att: UpdateAttention, labels_pre: Int[np.ndarray, "batch n"], encoded: EncodedBatch) -> None:
    """Fill the certificate of an update head against its intended support (members, or itself if none)."""
    seq = encoded.sequence
    batch, k, _ = att.scores.shape
    intended = np.zeros(att.scores.shape, dtype=bool)
    # Query j's members (all j at once), then its own key where it has none (only row j reads that flag).
    intended[:, :, seq.points] = labels_pre[:, None, :] == np.arange(k)[None, :, None]
    empty = ~intended.any(axis=-1)
    for j in range(k):
        intended[empty[:, j], j, seq.centroid(j)] = True
    s = att.scores
    inside_min = np.where(intended, s, np.inf).min(axis=-1)
    inside_max = np.where(intended, s, -np.inf).max(axis=-1)
    outside_max = np.where(intended, -np.inf, s).max(axis=-1)
    size = intended.sum(axis=-1)
    with np.errstate(under="ignore"):
        outside = np.where(intended, 0.0, np.exp(np.where(intended, -np.inf, s) - inside_min[..., None]))
    att.margin = inside_min - outside_max
    att.leak_bound = outside.sum(axis=-1) / size
    att.leak_observed = np.where(intended, 0.0, att.pattern).sum(axis=-1)
    att.member_spread = inside_max - inside_min


def summarise_head(kind: str, scores, pattern, encoded: EncodedBatch, with_sink: bool):
    """What a block's attention did (its scores and pattern), for the block's ``kind``; ``None`` for other kinds."""
    if kind == ASSIGN:
        return _summarise_assign(scores, pattern, encoded, with_sink)
    if kind == UPDATE:
        rows = encoded.sequence.centroids
        return UpdateAttention(scores=to_numpy(scores[:, 0, rows, :]), pattern=to_numpy(pattern[:, 0, rows, :]))
    return None
