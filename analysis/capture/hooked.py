"""A run someone made with hooks: the attention certificates read from what its patterns were, not what they would be.

A head's certificate (:mod:`analysis.capture.summaries`) is computed from its scores: the margin and the leak bound
say how far ``softmax(scores)`` is from the hard pattern. That is a statement about the pattern only while the
pattern is the block's own function of those scores. A hook on ``hook_pattern`` (zeroing it, say) breaks that: the
scores still certify a one-hot softmax while the pattern that ran is empty. So, for a capture read from a user's
``ActivationCache`` (:func:`analysis.pipeline.capture_from_cache`), each block is run again on its cached input with
its cached scores put back in place of its own, and the pattern the block then makes (its permanent hooks, such as a
variant's normalisation, included) is compared with the cached one, row by row (a pattern that is the softmax of its
cached scores, bit for bit, is what the certificate speaks of, and needs no re-run). Where a query row differs, the
certificate of that row is no longer the scores' alone: its leak bound becomes at least the row's own distance from
the hard pattern (``sum |p - hard|``, 1 or more for an emptied row), so "hard attention everywhere" and "largest leak
bound" state what ran. The margins stay the scores' (they are what the scores say); the capture records which
layers had rows replaced (:attr:`~analysis.capture.Capture.hooked_patterns`) so that pages can say so.
"""

from __future__ import annotations

import numpy as np
import torch

from analysis.capture.summaries import AssignAttention, UpdateAttention, intended_keys, to_numpy
from circuits import hook_names


def own_pattern(circuit, cache, layer: int) -> torch.Tensor:
    """``hook_pattern`` of block ``layer`` as the block computes it from the cached scores of ``layer`` (run on the
    cached ``resid_pre``; the model's permanent hooks act, the hooks of the cached run do not)."""
    given = cache[hook_names.attn_scores(layer)]
    made = {}

    def put_back(scores, hook):
        return given

    def keep(pattern, hook):
        made["pattern"] = pattern

    hooks = [(hook_names.attn_scores(layer), put_back), (hook_names.pattern(layer), keep)]
    with torch.no_grad(), circuit.model.hooks(fwd_hooks=hooks):
        circuit.model(block_input(cache, layer), start_at_layer=layer, stop_at_layer=layer + 1)
    return made["pattern"]


def block_input(cache, layer: int) -> torch.Tensor:
    """The residual entering block ``layer``: its ``resid_pre``, or the previous block's ``resid_post`` (the same
    tensor) where a ``names_filter`` kept only that one."""
    name = hook_names.resid_pre(layer)
    return cache[name] if layer == 0 or name in set(cache.keys()) else cache[hook_names.resid_post(layer - 1)]


def replaced_rows(cached: torch.Tensor, own: torch.Tensor) -> torch.Tensor:
    """``[batch, query]``: the query rows (head 0) whose cached pattern is not the block's own, bit for bit (NaN
    where both hold NaN counts as equal)."""
    same = (cached == own) | (torch.isnan(cached) & torch.isnan(own))
    return ~same[:, 0].all(dim=-1)


def certify_hooked_patterns(cap, cache) -> dict[int, int]:
    """Raise the leak bound of every query row whose cached pattern a hook replaced to that row's distance from the
    hard pattern (module docstring); return ``{layer: rows replaced}`` over the rows the certificates read (point
    queries of assign heads, centroid queries of update heads)."""
    circuit, seq = cap.circuit, cap.encoded.sequence
    found = {}
    for lc in cap.layers:
        att = lc.attention
        if not isinstance(att, (AssignAttention, UpdateAttention)):
            continue
        cached = cache[hook_names.pattern(lc.layer)]
        if torch.equal(torch.softmax(cache[hook_names.attn_scores(lc.layer)], dim=-1), cached):
            continue  # the softmax of its scores, bit for bit: what the certificate speaks of
        rows = replaced_rows(cached, own_pattern(circuit, cache, lc.layer)).cpu().numpy()
        queries = seq.points if isinstance(att, AssignAttention) else seq.centroids
        rows = rows[:, queries]
        if not rows.any() or att.leak_bound is None:
            continue
        found[lc.layer] = int(rows.sum())
        pattern = to_numpy(cached[:, 0, queries, :])
        hard = (_hard_assign(att, seq, pattern) if isinstance(att, AssignAttention)
                else _hard_update(lc.pre, seq, pattern))
        distance = np.abs(pattern - hard).sum(axis=-1)
        att.leak_bound = np.where(rows, np.maximum(att.leak_bound, distance), att.leak_bound)
    return found


def _hard_assign(att: AssignAttention, seq, pattern: np.ndarray) -> np.ndarray:
    """The one-hot rows the assign certificate speaks of: all weight on the key of the top score (a centroid; a
    query whose top key is another token, which the mask rules out, gets no hard row and so a distance of its
    whole mass)."""
    hard = np.zeros_like(pattern)
    b, i = np.nonzero(att.chosen >= 0)
    hard[b, i, seq.centroids.start + att.chosen[b, i]] = 1.0
    return hard


def _hard_update(pre, seq, pattern: np.ndarray) -> np.ndarray:
    """The rows the update certificate speaks of: uniform over a centroid's members (its points before the block),
    or all on its own key when it has none."""
    hard = np.zeros_like(pattern)
    for b in range(pattern.shape[0]):
        for j in range(seq.k):
            intended = intended_keys(pre.labels[b], j, seq)
            hard[b, j] = intended / intended.sum()
    return hard
