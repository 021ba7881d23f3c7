"""One attention head computed on groups of identical queries or keys: the exact rewriting that the structured
forward (:mod:`circuits.structured.forward`) runs with (the package docstring, :mod:`circuits.structured`, gives
the argument).

:func:`grouped_attention` computes a head over the whole residual stream at once; :func:`chunked_block` computes a
whole block (the head, then the MLP) chunk by chunk of positions, so that no temporary of the stream's length
exists beside it, where the keys compress; :func:`pattern_of` makes the pattern of a head whose block kept only
its scores.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from jaxtyping import Float, Int
from torch import Tensor

from circuits.structured.groups import Groups, group_identical_columns, hash_direction, hash_groups, identity_groups
from circuits.structured.plans import AttentionPlan, MLPPlan, RestrictedMap, add_rows, per_token


#: A head is structured when one side (keys, else queries) has at most this many distinct vectors.
PAIR_BUDGET = 256


class StructuredPathUnavailable(RuntimeError):
    """The structured path cannot run this model/input exactly; the message says why."""


@dataclass
class GroupedAttention:
    """One head's attention on one problem, in grouped form.

    ``scores[a, b]`` is the score of every query of group ``a`` against every key of group ``b``;
    ``pattern[a, b]`` the softmax weight of *each* key of group ``b`` (so a row sums to 1 with multiplicities).
    One side is usually left ungrouped (every position its own group): the side that does not compress.
    """

    queries: Groups
    keys: Groups
    scores: Float[Tensor, "mq mk"]
    pattern: Float[Tensor, "mq mk"] | None  # None: not kept (chunked_block's keep_pattern; see pattern_of)
    #: The positions per pass of the chunked block that made these scores without keeping the pattern (0 otherwise).
    chunk: int = 0

    def block(self, q_positions: Tensor | slice, k_positions: Tensor | slice) -> tuple[Tensor, Tensor]:
        """Dense scores and pattern of the block (query positions x key positions)."""
        qg = self.queries.inverse[q_positions]
        kg = self.keys.inverse[k_positions]
        return self.scores[qg][:, kg], self.pattern[qg][:, kg]

    def rows(self, q_positions: Tensor | slice) -> tuple[Tensor, Tensor]:
        """Dense score and pattern rows of the query ``positions`` over every key position."""
        return self.block(q_positions, slice(None))


def pattern_of(g: GroupedAttention) -> Float[Tensor, "mq mk"]:
    """``g.pattern``; where :func:`chunked_block` kept only the scores, the pattern made again from them as the block
    made it: a pass of ``g.chunk`` positions at a time, each pass's scores a contiguous (key groups x positions)
    tensor as the block's were, softmax over the key groups and :func:`_key_weights`. The same operations on the
    same values, so the same numbers bit for bit (a reader that needs the pattern after all: a near tie in the
    lean assign certificate)."""
    if g.pattern is not None:
        return g.pattern
    scores_T = g.scores.T
    counts = g.keys.weights(scores_T.dtype)
    pattern_T = torch.empty_like(scores_T)
    for start in range(0, scores_T.shape[1], g.chunk):
        per_group = torch.softmax(scores_T[:, start : start + g.chunk].contiguous(), dim=0)
        pattern_T[:, start : start + g.chunk] = _key_weights(per_group, counts @ per_group)
    return pattern_T.T


@dataclass
class ScoreGroups:
    """What a score hook's ``structured`` counterpart needs to know about the grouped scores it transforms."""

    query_positions: Int[Tensor, " mq"]  # representative position of each query group
    key_positions: Int[Tensor, " mk"]  # representative position of each key group
    key_counts: Int[Tensor, " mk"]
    n_tokens: int
    problem: int


def _any_nan(t: Tensor) -> bool:
    """``bool(torch.isnan(t).any())``, in numpy for a CPU tensor (one reduction instead of two torch operations: the
    maximum is NaN exactly when an element is, as numpy's maximum propagates NaN)."""
    if t.is_cpu and not t.requires_grad and t.numel():
        return bool(np.isnan(t.numpy().max()))
    return bool(torch.isnan(t).any())


def grouped_attention(attn, xT: Float[Tensor, "d_model pos"], score_hook=None, problem: int = 0,
                      pair_budget: int = PAIR_BUDGET, plan: AttentionPlan | None = None, hint: Groups | None = None
                      ) -> tuple[Float[Tensor, "c pos"], GroupedAttention]:
    """One head's output on one problem (feature-major), computed on groups of identical keys (or queries).

    Keys are grouped first: in an assign head all point keys coincide. If that does not compress, queries are
    grouped instead: in an update head all point queries coincide. If neither side compresses to at most
    ``pair_budget`` groups, the attention is not structured: refuse. ``score_hook`` is a permanent
    ``hook_attn_scores`` hook of the model; its ``structured`` counterpart is applied to the grouped scores (and
    keys stay ungrouped if it says ``single_keys``). Attention sinks and qk-norm are reproduced as TransformerLens
    computes them. The output is returned for the residual rows ``plan.out.rows`` only: the head writes exactly 0
    to every other one. ``hint``: the key groups of an earlier layer on the same head (see
    :func:`group_identical_columns`).
    """
    pos = xT.shape[1]
    plan = plan if plan is not None else AttentionPlan.of(attn)
    qkv, d_head = plan.qkv.apply(xT), plan.d_head
    qT, kT, vT = qkv[:d_head], qkv[d_head : 2 * d_head], qkv[2 * d_head :]  # views (slicing: Tensor.split is Python)
    if attn.cfg.use_qk_norm:
        qT, kT = attn.q_norm(qT.T).T, attn.k_norm(kT.T).T
    single_keys = bool(getattr(score_hook, "single_keys", False))
    device = xT.device
    kg = identity_groups(pos, device) if single_keys else group_identical_columns(kT, hint=hint)
    if kg.size <= pair_budget:
        qg = identity_groups(pos, device)
    else:
        qg = group_identical_columns(qT)
        if qg.size > pair_budget:
            raise StructuredPathUnavailable(
                f"{qg.size} distinct queries and {kg.size} distinct keys over {pos} tokens: the attention is not"
                " structured (e.g. a trained model); use the dense path"
            )
        kg = identity_groups(pos, device)
    q_cols = qT if qg.is_identity else qT[:, qg.representative]
    k_rows = kT.T if kg.is_identity else kT.index_select(1, kg.representative).T
    value_sums = vT if kg.is_identity else vT.new_zeros(vT.shape[0], kg.size).index_add_(1, kg.inverse, vT)
    # Key-major (keys x queries): the softmax runs along the contiguous leading axis, which torch does fastest.
    scores_T = k_rows @ q_cols
    # The projections (3 d_head rows per position: 0.26 GB at a million points, d = 8, k = 10) are read no further
    # where keys are grouped (value_sums, k_rows are then fresh): freed before the softmax's and the output's
    # position-sized tensors exist, which lowers the forward's peak by about as much.
    del qkv, qT, kT, vT, q_cols, k_rows
    if attn.attn_scale != 1.0:  # x / 1.0 is x, bit for bit
        scores_T = scores_T / attn.attn_scale
    if score_hook is not None:
        groups = ScoreGroups(qg.representative, kg.representative, kg.counts, pos, problem)
        scores_T = score_hook.structured(scores_T.T, groups).T.contiguous()
    counts = kg.weights(scores_T.dtype)
    if attn.cfg.use_attention_sinks:
        sink = attn.sinks[0].detach().to(scores_T.dtype).expand(1, scores_T.shape[1])
        per_group = torch.softmax(torch.cat([scores_T, sink]), dim=0)
        total = counts @ per_group[:-1] + per_group[-1]
        per_group = per_group[:-1]
    else:
        per_group = torch.softmax(scores_T, dim=0)
        total = counts @ per_group
    pattern_T = _key_weights(per_group, total)
    # Project per query group, then spread to positions: one gather instead of a (rows x pos) product.
    out_groups = plan.out.apply(value_sums @ pattern_T)
    out = out_groups if qg.is_identity else out_groups[:, qg.inverse]
    return out, GroupedAttention(qg, kg, scores_T.T, pattern_T.T)


def _key_weights(per_group: Float[Tensor, "mk mq"], total: Float[Tensor, " mq"]) -> Float[Tensor, "mk mq"]:
    """Each key's softmax weight from the softmax over key groups (``per_group``, divided in place) and each query's
    count-weighted total. The softmax over the groups weighs each group once; dividing by the count-weighted total
    gives each *key* its dense weight exp(s - max) / sum_keys exp(s' - max) (in real arithmetic exactly; in floats
    to a few ulp). As TransformerLens: a query with no finite score has no pattern (0, not NaN)."""
    pattern = per_group.div_(total)
    if _any_nan(total):
        pattern = torch.where(torch.isnan(pattern), torch.zeros_like(pattern), pattern)
    return pattern


#: Positions one pass of :func:`chunked_block` works on: a chunk's residual rows and every temporary made from them
#: (a few hundred KB to a few MB) stay in the processor's cache between the operations of a pass.
STREAM_CHUNK = 4096


def chunked_block(attn, ln1, ln2, plan: AttentionPlan, mlp_plan: MLPPlan, xT: Float[Tensor, "d_model pos"],
                  hint: Groups | None = None, pair_budget: int = PAIR_BUDGET, query_hint: Groups | None = None,
                  group_queries: bool = True, keep_pattern: bool = True) -> GroupedAttention | None:
    """A whole block (attention, then MLP) applied to ``xT`` in place, chunk by chunk of positions; ``None`` (and
    ``xT`` untouched) where it does not apply, and the caller runs :func:`grouped_attention` instead.

    The grouped attention of :func:`grouped_attention` with the keys grouped, computed in three passes of
    :data:`STREAM_CHUNK` positions so that no ``rows x positions`` temporary exists beside the stream: (1) the keys
    (and, with ``group_queries``, the queries) hashed, and the hashes grouped
    (:func:`~circuits.structured.groups.hash_groups`; ``hint``, ``query_hint``: earlier groupings to try); (2) the
    keys (queries) again, each checked bit for bit against its group's representative (any difference: ``None``),
    and the values summed per key group; (3) the head's output added to each chunk's residual rows and the MLP
    applied to them. Where the queries compress too (an update head's point queries are one vector) the scores,
    softmax and output are computed once per pair of groups and gathered per position, as
    :func:`grouped_attention` does for grouped queries; otherwise every query's scores against the key groups are
    computed in pass 3. Pass 3 writes a chunk only after every check has passed, and a position's query reads its
    own chunk before the chunk is written, as in the unchunked block. The value sums add the positions in the same
    order as :func:`grouped_attention`.

    Applies without a score hook, attention sinks or qk-norm (those run unchunked); ``None`` where the keys do not
    compress to at most ``pair_budget`` groups. ``keep_pattern=False``: where the queries do not compress, the
    returned pattern is ``None`` (the position-sized copy is not made; the scores are kept).
    """
    if attn.cfg.use_qk_norm or attn.cfg.use_attention_sinks:
        return None
    pos, device = xT.shape[1], xT.device
    spans = [slice(start, min(pos, start + STREAM_CHUNK)) for start in range(0, pos, STREAM_CHUNK)]
    direction = hash_direction(plan.d_head, xT.dtype, device)
    key_hashes = xT.new_empty(pos)
    query_hashes = xT.new_empty(pos) if group_queries else None
    for cols in spans:
        x = per_token(ln1, xT[:, cols])
        key_hashes[cols] = direction @ plan.k.apply(x)
        if group_queries:
            query_hashes[cols] = direction @ plan.q.apply(x)
    keys = hash_groups(key_hashes, hint)
    if keys.is_identity or keys.size > pair_budget:
        return None
    queries = identity_groups(pos, device)
    if group_queries:
        found = hash_groups(query_hashes, query_hint)
        if found.size <= pair_budget:
            queries = found
    del key_hashes, query_hashes

    def at(groups: Groups, rows: RestrictedMap) -> Tensor:  # the map at each group's representative position
        return rows.apply(per_token(ln1, xT.index_select(1, groups.representative)))

    key_rows = at(keys, plan.k)  # d_head x key groups
    query_rows = None if queries.is_identity else at(queries, plan.q)
    value_sums = None
    for cols in spans:
        x = per_token(ln1, xT[:, cols])
        if not torch.equal(plan.k.apply(x), key_rows.index_select(1, keys.inverse[cols])) or (
                query_rows is not None
                and not torch.equal(plan.q.apply(x), query_rows.index_select(1, queries.inverse[cols]))):
            return None  # a hash collision (or NaN): the exact grouping is the unchunked block's
        values = plan.v.apply(x)
        if value_sums is None:
            value_sums = values.new_zeros(values.shape[0], keys.size)
        value_sums.index_add_(1, keys.inverse[cols], values)
    key_rows_T = key_rows.T.contiguous()
    counts = keys.weights(xT.dtype)

    def attend(query_cols: Tensor) -> tuple[Tensor, Tensor]:  # (key groups x queries) scores and pattern
        scores = key_rows_T @ query_cols
        if attn.attn_scale != 1.0:  # x / 1.0 is x, bit for bit
            scores.div_(attn.attn_scale)
        per_group = torch.softmax(scores, dim=0)
        return scores, _key_weights(per_group, counts @ per_group)

    if query_rows is not None:
        scores_T, pattern_T = attend(query_rows)
        out_groups = plan.out.apply(value_sums @ pattern_T)
    else:
        scores_T = xT.new_empty(keys.size, pos)
        pattern_T = xT.new_empty(keys.size, pos) if keep_pattern else None
    for cols in spans:
        part = xT[:, cols]  # a view: written through
        if query_rows is not None:
            out = out_groups.index_select(1, queries.inverse[cols])
        else:
            scores, pattern = attend(plan.q.apply(per_token(ln1, part)))
            scores_T[:, cols] = scores
            if pattern_T is not None:
                pattern_T[:, cols] = pattern
            out = plan.out.apply(value_sums @ pattern)
        add_rows(part, plan.out.rows, out)
        add_rows(part, mlp_plan.out.rows, mlp_plan.apply(per_token(ln2, part)))
    if pattern_T is None:
        return GroupedAttention(queries, keys, scores_T.T, None, chunk=STREAM_CHUNK)
    return GroupedAttention(queries, keys, scores_T.T, pattern_T.T)


