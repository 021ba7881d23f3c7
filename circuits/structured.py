"""A structured execution path: the same HookedTransformer weights, attention in O(n k d) instead of O(n^2).

Dense attention scores every query against every key: ``(n + k + 1)^2`` per layer. In the constructed circuits
most of those scores are repeats. In an assign head every point *key* is the same vector (a point has no ``C``,
``N`` or ``ID``, so its key is just the mask term); in an update head every point *query* is the same vector (it
only asks for the sink), and points with the same assignment have the same key. Identical queries give identical
attention rows; identical keys give identical scores, so a group of ``c`` equal keys enters the softmax as one
score with multiplicity ``c`` and contributes ``p * (sum of the group's values)``.

This module computes attention on those groups — an exact rewriting, nothing is dropped: each score that the
dense path would compute is computed once per (query group, key group) pair and used with its multiplicity. The
groups are found on the actual projected ``q`` and ``k`` vectors of the run (hash by a random projection, then
*verified* row by row for exact equality), so the rewriting holds for the weights and token flags at hand and no
assumption about the construction is trusted. The only difference from the dense forward is the order of
floating-point summation (relative 1e-16).

When the groups are not few on at least one side — a trained model whose queries and keys all differ, say — the
cost would be quadratic again: :func:`structured_forward` refuses with :class:`StructuredPathUnavailable` and says
why, and the caller falls back to the dense forward. It also refuses configurations whose attention it does not
reproduce (causal masks, rotary or ALiBi positions, grouped-query attention, attention hooks without a grouped
counterpart). Attention sinks, qk-norm and the variants' score hooks (linear attention, sparsemax, Gumbel-max; see
:mod:`circuits.variants.attention`) are reproduced.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch
from jaxtyping import Float, Int
from torch import Tensor

#: A head is structured when one side (keys, else queries) has at most this many distinct vectors.
PAIR_BUDGET = 256


class StructuredPathUnavailable(RuntimeError):
    """The structured path cannot run this model/input exactly; the message says why."""


@dataclass
class Groups:
    """A partition of token positions into groups of identical rows."""

    representative: Int[Tensor, " m"]  # one position per group
    inverse: Int[Tensor, " pos"]  # group of each position
    counts: Int[Tensor, " m"]
    #: Every position its own group, groups in position order (so group tensors are position tensors).
    is_identity: bool = False

    @property
    def size(self) -> int:
        return int(self.representative.shape[0])


def identity_groups(pos: int) -> Groups:
    """Every position its own group (the side of a head that does not compress)."""
    every = torch.arange(pos)
    return Groups(every, every, torch.ones(pos, dtype=torch.long), is_identity=True)


def group_identical_rows(rows: Float[Tensor, "pos h"], direction: Float[Tensor, " h"] | None = None) -> Groups:
    """Exact grouping of identical rows: hash by a projection (random unless given), then verify every row
    against its group's representative and fall back to an exact row-wise ``unique`` on any collision."""
    pos = rows.shape[0]
    if direction is None:
        direction = torch.randn(rows.shape[1], generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    direction = direction.to(rows.dtype)
    _, inverse = torch.unique(rows @ direction, return_inverse=True)
    m = int(inverse.max()) + 1 if pos else 0
    positions = torch.arange(pos)
    representative = torch.full((m,), pos, dtype=torch.long).scatter_reduce(0, inverse, positions, reduce="amin")
    if not bool((rows == rows[representative][inverse]).all()):
        # Hash collision between different rows (or NaN): fall back to exact row-wise unique.
        _, inverse = torch.unique(rows, dim=0, return_inverse=True)
        m = int(inverse.max()) + 1
        representative = torch.full((m,), pos, dtype=torch.long).scatter_reduce(0, inverse, positions, reduce="amin")
    if m == pos:
        # All rows distinct: every position its own group, in position order (the callers' shortcuts rely on it).
        return identity_groups(pos)
    counts = torch.bincount(inverse, minlength=m)
    return Groups(representative, inverse, counts)


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
    pattern: Float[Tensor, "mq mk"]

    def block(self, q_positions: Tensor | slice, k_positions: Tensor | slice) -> tuple[Tensor, Tensor]:
        """Dense scores and pattern of the block (query positions x key positions)."""
        qg = self.queries.inverse[q_positions]
        kg = self.keys.inverse[k_positions]
        return self.scores[qg][:, kg], self.pattern[qg][:, kg]

    def rows(self, q_positions: Tensor | slice) -> tuple[Tensor, Tensor]:
        """Dense score and pattern rows of the query ``positions`` over every key position."""
        return self.block(q_positions, slice(None))


@dataclass
class SparseMap:
    """``x @ W + b`` restricted to the rows and columns of ``W`` (and ``b``) that are not exactly zero.

    Dropping terms that are exactly ``0 * x`` leaves every sum bit for bit the same (up to the sign of a zero), so
    this is the dense map evaluated on the blocks that carry weight.
    """

    rows: Int[Tensor, " r"]
    cols: Int[Tensor, " c"]
    W: Float[Tensor, "r c"]
    b: Float[Tensor, " c"]

    @classmethod
    def of(cls, W: Float[Tensor, "d_in d_out"], b: Float[Tensor, " d_out"] | None = None) -> "SparseMap":
        b = torch.zeros(W.shape[1], dtype=W.dtype) if b is None else b
        rows = torch.nonzero((W != 0).any(dim=1)).flatten()
        cols = torch.nonzero((W != 0).any(dim=0) | (b != 0)).flatten()
        return cls(rows, cols, W[rows][:, cols], b[cols])

    def apply(self, x: Float[Tensor, "pos d_in"]) -> Float[Tensor, "pos c"]:
        return x[:, self.rows] @ self.W + self.b


def _rows_map(W: Float[Tensor, "d_in d_out"], b: Float[Tensor, " d_out"]) -> SparseMap:
    """Like :meth:`SparseMap.of` but keeping every output column (the caller splits them)."""
    used = (W != 0).any(dim=1)
    return SparseMap(torch.nonzero(used).flatten(), torch.arange(W.shape[1]), W[used], b)


@dataclass
class AttentionPlan:
    """The nonzero blocks of a head's projections."""

    qkv: SparseMap
    d_head: int
    out: SparseMap

    @classmethod
    def of(cls, attn) -> "AttentionPlan":
        W_qkv = torch.cat([attn.W_Q[0], attn.W_K[0], attn.W_V[0]], dim=1).detach()
        b_qkv = torch.cat([attn.b_Q[0], attn.b_K[0], attn.b_V[0]]).detach()
        return cls(_rows_map(W_qkv, b_qkv), attn.W_Q.shape[-1], SparseMap.of(attn.W_O[0].detach(), attn.b_O.detach()))


@dataclass
class MLPPlan:
    """The nonzero blocks of a gated MLP: ``out = (relu(x W_gate) * (x W_in) + b_in) W_out + b_out``.

    The gate and linear maps are evaluated as one map (their weights side by side): one pass over the residual.
    """

    gate_linear: SparseMap
    d_mlp: int
    bias: Float[Tensor, " d_mlp"]
    out: SparseMap

    @classmethod
    def of(cls, mlp) -> "MLPPlan":
        W = torch.cat([mlp.W_gate, mlp.W_in], dim=1).detach()
        return cls(_rows_map(W, torch.zeros(W.shape[1], dtype=W.dtype)), mlp.W_gate.shape[1], mlp.b_in.detach(),
                   SparseMap.of(mlp.W_out.detach(), mlp.b_out.detach()))

    def apply(self, x: Float[Tensor, "pos d_model"]) -> Float[Tensor, "pos c"]:
        gate, linear = self.gate_linear.apply(x).split(self.d_mlp, dim=1)
        return self.out.apply(torch.relu(gate) * linear + self.bias)


def plain_mlp(block) -> bool:
    """A gated ReLU MLP without normalisation around it: the one :class:`BlockPlan` evaluates itself."""
    from transformer_lens.components.mlps.gated_mlp import GatedMLP

    cfg = block.mlp.cfg
    return type(block.mlp) is GatedMLP and cfg.act_fn == "relu" and cfg.normalization_type is None


@dataclass
class LayerRecord:
    resid_pre: Float[Tensor, "batch pos d_model"]
    resid_post: Float[Tensor, "batch pos d_model"]
    attention: list[GroupedAttention] = field(default_factory=list)  # one per problem of the batch
    #: The residual after the attention, before the MLP (``hook_resid_mid``); only with ``keep_mid=True``.
    resid_mid: Float[Tensor, "batch pos d_model"] | None = None


def check_supported(model, score_hooks: dict[int, object] | None = None) -> None:
    """Refuse configurations whose attention this module does not reproduce exactly.

    ``score_hooks[layer]`` is the permanent ``hook_attn_scores`` hook of each layer that has one; each must carry a
    ``structured`` counterpart. Any other attention hook refuses the path.
    """
    cfg = model.cfg
    score_hooks = score_hooks or {}
    problems = []
    if cfg.attention_dir != "bidirectional":
        problems.append(f"attention_dir={cfg.attention_dir!r} (needs bidirectional)")
    if cfg.positional_embedding_type not in ("standard",):
        problems.append(f"positional_embedding_type={cfg.positional_embedding_type!r}")
    if cfg.n_key_value_heads is not None:
        problems.append("grouped-query attention")
    if cfg.n_heads != 1:
        problems.append(f"n_heads={cfg.n_heads} (the constructed circuits use one head)")
    if getattr(cfg, "clip_qkv", None) is not None:
        problems.append("qkv clipping")
    if cfg.parallel_attn_mlp or cfg.attn_only or getattr(cfg, "use_normalization_before_and_after", False):
        problems.append("a block layout other than attention then MLP")
    if getattr(cfg, "use_logn_attn", False) or (getattr(cfg, "attn_scores_soft_cap", -1.0) or -1.0) > 0:
        problems.append("logn scaling or soft-capped scores")
    if getattr(cfg, "original_architecture", None) in ("OlmoeForCausalLM", "Olmo2ForCausalLM", "Olmo3ForCausalLM"):
        problems.append("OLMo-style attention")
    for layer, block in enumerate(model.blocks):
        attn = block.attn
        for name in ("hook_q", "hook_k", "hook_v", "hook_attn_scores", "hook_pattern", "hook_z", "hook_result"):
            hook = getattr(attn, name, None)
            registered = 0 if hook is None else len(hook._forward_hooks) + len(hook._forward_pre_hooks)
            expected = 1 if name == "hook_attn_scores" and layer in score_hooks else 0
            if registered != expected:
                problems.append(f"{registered} hook(s) on blocks.{layer}.attn.{name}, which grouped attention would not run")
        if layer in score_hooks and not hasattr(score_hooks[layer], "structured"):
            problems.append(f"the score hook of layer {layer} has no structured counterpart")
    if problems:
        raise StructuredPathUnavailable("structured path does not support " + "; ".join(problems))


@dataclass
class ScoreGroups:
    """What a score hook's ``structured`` counterpart needs to know about the grouped scores it transforms."""

    query_positions: Int[Tensor, " mq"]  # representative position of each query group
    key_positions: Int[Tensor, " mk"]  # representative position of each key group
    key_counts: Int[Tensor, " mk"]
    n_tokens: int
    problem: int


def grouped_attention(attn, x: Float[Tensor, "pos d_model"], score_hook=None, problem: int = 0,
                      pair_budget: int = PAIR_BUDGET, plan: AttentionPlan | None = None
                      ) -> tuple[Float[Tensor, "pos c"], GroupedAttention]:
    """One head's output for one problem, computed on groups of identical keys (or identical queries).

    Keys are grouped first: in an assign head all point keys coincide. If that does not compress, queries are
    grouped instead: in an update head all point queries coincide. If neither side compresses to at most
    ``pair_budget`` groups, the attention is not structured: refuse. ``score_hook`` is a permanent
    ``hook_attn_scores`` hook of the model; its ``structured`` counterpart is applied to the grouped scores (and
    keys stay ungrouped if it says ``single_keys``). Attention sinks and qk-norm are reproduced as
    TransformerLens computes them. The projections read only the residual dimensions they use, and the output is
    returned for the columns ``plan.out.cols`` only: the head writes exactly 0 everywhere else.
    """
    pos = x.shape[0]
    plan = plan if plan is not None else AttentionPlan.of(attn)
    # One pass over the residual for all three projections.
    q, k, v = plan.qkv.apply(x).split(plan.d_head, dim=1)
    if attn.cfg.use_qk_norm:
        q, k = attn.q_norm(q), attn.k_norm(k)
    single_keys = bool(getattr(score_hook, "single_keys", False))
    kg = identity_groups(pos) if single_keys else group_identical_rows(k)
    if kg.size <= pair_budget:
        qg = identity_groups(pos)
    else:
        qg = group_identical_rows(q)
        if qg.size > pair_budget:
            raise StructuredPathUnavailable(
                f"{qg.size} distinct queries and {kg.size} distinct keys over {pos} tokens: the attention is not"
                " structured (e.g. a trained model); use the dense path"
            )
        kg = identity_groups(pos)
    q_rows = q if qg.is_identity else q[qg.representative]
    k_rows = k if kg.is_identity else k[kg.representative]
    scores = (q_rows @ k_rows.T) / attn.attn_scale
    if score_hook is not None:
        scores = score_hook.structured(scores, ScoreGroups(qg.representative, kg.representative, kg.counts, pos, problem))
    top = scores.max(dim=-1, keepdim=True).values
    sink = None
    if attn.cfg.use_attention_sinks:
        sink = attn.sinks[0].to(scores.dtype)
        top = torch.maximum(top, sink)
    weights = torch.exp(scores - top)
    total = weights @ kg.counts.to(weights.dtype)
    if sink is not None:
        total = total + torch.exp(sink - top[:, 0])
    pattern = weights / total[:, None]
    # As TransformerLens: a row with no finite score has no pattern.
    pattern = torch.where(torch.isnan(pattern), torch.zeros_like(pattern), pattern)
    value_sums = v if kg.is_identity else torch.zeros(kg.size, v.shape[-1], dtype=v.dtype).index_add_(0, kg.inverse, v)
    # Project to d_model per query group, then spread to positions: one gather instead of a (pos x d_head) matmul.
    out_groups = plan.out.apply(pattern @ value_sums)
    out = out_groups if qg.is_identity else out_groups[qg.inverse]
    return out, GroupedAttention(qg, kg, scores, pattern)


@torch.no_grad()
def structured_forward(model, resid: Float[Tensor, "batch pos d_model"], score_hooks: dict[int, object] | None = None,
                       keep: bool = True, on_layer: Callable[[int], None] | None = None,
                       on_record: Callable[[int, LayerRecord], None] | None = None,
                       pair_budget: int = PAIR_BUDGET, keep_mid: bool = False
                       ) -> tuple[Float[Tensor, "batch pos d_vocab_out"], list[LayerRecord]]:
    """Run ``model`` like ``model(resid, start_at_layer=0)``, with grouped attention.

    ``score_hooks`` are the model's permanent score hooks by layer (``KMeansCircuit.score_hooks``). Returns the
    logits and, per layer, the residual stream before and after the block and the grouped attention of each
    problem. ``on_record(layer, record)`` sees each record as the block finishes; with ``keep=False`` records are
    not kept (at a million points each residual is hundreds of MB); ``keep_mid`` also records the residual between
    attention and MLP. Raises :class:`StructuredPathUnavailable` when
    the model or the run is not structured; nothing is computed approximately.
    """
    score_hooks = score_hooks or {}
    check_supported(model, score_hooks)
    records: list[LayerRecord] = []
    x = resid
    for layer, block in enumerate(model.blocks):
        attn_plan = AttentionPlan.of(block.attn)
        normed = block.ln1(x)
        # resid_mid is built in place in a copy of the input, and becomes resid_post in place too.
        post = x.clone()
        groups = []
        for b in range(x.shape[0]):
            out, grouped = grouped_attention(block.attn, normed[b], score_hooks.get(layer), b, pair_budget, attn_plan)
            post[b][:, attn_plan.out.cols] += out
            groups.append(grouped)
        mid = post.clone() if keep_mid else None
        if plain_mlp(block):
            mlp_plan = MLPPlan.of(block.mlp)
            for b in range(x.shape[0]):
                mlp_out = mlp_plan.apply(post[b])
                post[b][:, mlp_plan.out.cols] += mlp_out
        else:
            post = post + block.mlp(block.ln2(post))
        record = LayerRecord(x, post, groups, mid)
        if on_record is not None:
            on_record(layer, record)
        if keep:
            records.append(record)
        del record
        x = post
        if on_layer is not None:
            on_layer(layer)
    if getattr(model, "ln_final", None) is not None:
        x = model.ln_final(x)
    return model.unembed(x), records
