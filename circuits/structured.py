"""A structured execution path: the same HookedTransformer weights, attention in O(n k d) instead of O(n^2).

Dense attention scores every query against every key: ``(n + k + 1)^2`` per layer. In the constructed circuits
most of those scores are repeats. In an assign head every point *key* is the same vector (a point has no ``C``,
``N`` or ``ID``, so its key is just the mask term); in an update head every point *query* is the same vector (it
only asks for the sink), and points with the same assignment have the same key. Identical queries give identical
attention rows; identical keys give identical scores, so a group of ``c`` equal keys enters the softmax as one
score with multiplicity ``c`` and contributes ``p * (sum of the group's values)``.

This module computes attention on those groups — an exact rewriting, nothing is dropped: each score that the
dense path would compute is computed once per (query group, key group) pair and used with its multiplicity. The
groups are found on the actual projected ``q`` and ``k`` vectors of the run (hash by a projection, then *verified*
vector by vector for exact equality), so the rewriting holds for the weights and token flags at hand and no
assumption about the construction is trusted. A head run again (a later iteration) starts from its last grouping,
taken only where ``unique`` of this run's hashes would give exactly it, and verified the same way.

The weight matrices of the constructed circuits are almost all zeros; every linear map is applied to a
feature-major copy of the residual stream (``d_model x pos``) and only the residual rows it writes are computed
and updated. Exactly-zero terms change no sum, so the only difference from the dense forward is the order of
floating-point summation (relative 1e-16); the tests hold it to 1e-12 of the data scale.

When the groups are not few on at least one side — a trained model whose queries and keys all differ, say — the
cost would be quadratic again: :func:`structured_forward` refuses with :class:`StructuredPathUnavailable` and says
why, and the caller falls back to the dense forward. It also refuses configurations whose attention it does not
reproduce (causal masks, rotary or ALiBi positions, grouped-query attention, attention hooks without a grouped
counterpart). Attention sinks, qk-norm and the variants' score hooks (linear attention, sparsemax, Gumbel-max; see
:mod:`circuits.variants.attention`) are reproduced.
"""

from __future__ import annotations

import collections

from dataclasses import dataclass, field
from collections.abc import Callable

import numpy as np
import torch
from jaxtyping import Float, Int
from torch import Tensor

from circuits import hook_names
from circuits.devices import torch_threads
from circuits.structured_groups import (  # noqa: F401 (re-exported)
    Groups, _hash_direction, _identity_groups, group_identical_columns, group_identical_rows, identity_groups,
)
from circuits.structured_plans import CHUNK, AttentionPlan, MLPPlan, RestrictedMap, cached_plan  # noqa: F401 (re-exported)

#: The old name of :func:`circuits.structured_plans.cached_plan`, kept for one release.
_cached_plan = cached_plan

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
class LayerRecord:
    resid_pre: Float[Tensor, "batch pos d_model"] | None  # None when the forward ran in place
    resid_post: Float[Tensor, "batch pos d_model"]
    attention: list[GroupedAttention] = field(default_factory=list)  # one per problem of the batch
    #: The residual after the attention, before the MLP (``hook_resid_mid``); only with ``Recording(mid=True)``.
    resid_mid: Float[Tensor, "batch pos d_model"] | None = None


@dataclass(frozen=True)
class Recording:
    """What :func:`structured_forward` hands back of each block.

    By default every :class:`LayerRecord` is returned in a list. With ``on_record`` they are streamed instead: each
    goes to ``on_record(layer, record)`` as its block finishes and none is kept (at a million points each residual
    is hundreds of MB). ``pre``: keep the residual entering each block; when streaming without it, a block updates
    the stream in place (``record.resid_pre`` is ``None``), saving a copy per layer. ``mid``: also record the
    residual between attention and MLP.
    """

    on_record: Callable[[int, LayerRecord], None] | None = None
    pre: bool = True
    mid: bool = False


#: Every record, returned.
KEEP_ALL = Recording()


def check_supported(model, score_hooks: dict[int, object] | None = None) -> None:
    """Refuse configurations whose attention this module does not reproduce exactly.

    ``model`` is a ``HookedTransformer`` or the plain modules of :mod:`circuits.plain` (same attributes, no hook
    points). ``score_hooks[layer]`` is the permanent ``hook_attn_scores`` hook of each layer that has one; each must carry a
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
    if not (cfg.gated_mlp and cfg.act_fn == "relu"):
        problems.append("an MLP other than a gated ReLU")
    for layer, block in enumerate(model.blocks):
        attn = block.attn
        submodules = attn._modules  # a hook point is a submodule (looked up here: no failing getattr per name)
        for name in hook_names.ATTENTION_HOOK_ATTRIBUTES:
            hook = submodules.get(name)
            if hook is None:
                # No hook point (circuits.plain): nothing is registered, the given score hooks are all that runs.
                continue
            registered = len(hook._forward_hooks) + len(hook._forward_pre_hooks)
            expected = 1 if name == hook_names.SCORES_ATTRIBUTE and layer in score_hooks else 0
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


def _feature_major(module, xT: Float[Tensor, "d_model pos"]) -> Float[Tensor, "d_model pos"]:
    """A per-token module (LayerNorm, RMSNorm) applied to a feature-major tensor; identity is free."""
    if isinstance(module, torch.nn.Identity):
        return xT
    return module(xT.T[None])[0].T


def _add_rows(xT: Float[Tensor, "d_model pos"], rows: Int[Tensor, " c"] | slice, update: Float[Tensor, "c pos"]) -> None:
    """``xT[rows] += update`` in place; a slice of rows is a view, added to directly (no write-back copy)."""
    if isinstance(rows, slice):
        xT[rows].add_(update)
    else:
        xT[rows] += update


def _add_mlp(xT: Float[Tensor, "d_model pos"], ln2, plan: MLPPlan) -> None:
    """The block's MLP added to the residual rows it writes, in place, a chunk of positions at a time
    (:data:`circuits.structured_plans.CHUNK`): a per-token map, so each chunk is its own; the hidden units of
    one chunk exist at once, not of every position."""
    pos = xT.shape[1]
    for start in range(0, pos, CHUNK):
        part = xT if pos <= CHUNK else xT[:, start : start + CHUNK]  # a view: written through
        _add_rows(part, plan.out.rows, plan.apply(_feature_major(ln2, part)))


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
    # softmax over the groups weighs each group once; dividing by the count-weighted total gives each *key* its
    # dense weight exp(s - max) / sum_keys exp(s' - max) (in real arithmetic exactly; in floats to a few ulp).
    pattern_T = per_group.div_(total)
    if _any_nan(total):
        # As TransformerLens: a row with no finite score has no pattern.
        pattern_T = torch.where(torch.isnan(pattern_T), torch.zeros_like(pattern_T), pattern_T)
    # Project per query group, then spread to positions: one gather instead of a (rows x pos) product.
    out_groups = plan.out.apply(value_sums @ pattern_T)
    out = out_groups if qg.is_identity else out_groups[:, qg.inverse]
    return out, GroupedAttention(qg, kg, scores_T.T, pattern_T.T)


@torch.no_grad()
def structured_forward(model, resid: Float[Tensor, "batch pos d_model"], score_hooks: dict[int, object] | None = None,
                       recording: Recording = KEEP_ALL, pair_budget: int = PAIR_BUDGET
                       ) -> tuple[Float[Tensor, "batch pos d_vocab_out"], list[LayerRecord]]:
    """Run ``model`` like ``model(resid, start_at_layer=0)``, with grouped attention and restricted linear maps.

    ``model``: a ``HookedTransformer`` or a :class:`circuits.plain.PlainTransformer` (``KMeansCircuit.runnable``).
    ``score_hooks`` are the model's permanent score hooks by layer (``KMeansCircuit.score_hooks``). Returns the
    logits and, per layer (as ``recording`` says: returned or streamed), the residual stream before and after the
    block and the grouped attention of each problem. Residuals in the records are ``(batch, pos, d_model)`` views
    of feature-major storage.
    Raises :class:`StructuredPathUnavailable` when the model or the run is not structured; nothing is computed
    approximately.
    """
    score_hooks = score_hooks or {}
    check_supported(model, score_hooks)
    with torch_threads(CPU_THREADS if resid.is_cpu else None):
        return _structured_forward(model, resid, score_hooks, recording, pair_budget)


#: torch's intra-op threads while the structured path runs on the CPU. Its operations are many and short (a chunk
#: of positions, a few groups): on a loaded 2-core machine two threads waited on each other (n = 10,000, d = 8,
#: k = 10, T = 10: a forward of 7.3 s with two threads against 0.65 s with one; benchmarks/bench_device.py).
CPU_THREADS = 1


def _structured_forward(model, resid, score_hooks: dict, recording: Recording, pair_budget: int):
    records: list[LayerRecord] = []
    # Feature-major (d_model, pos), one per problem: always a copy (``contiguous()`` would return a feature-major
    # input itself, which the in-place recording then overwrites).
    states = [r.T.clone(memory_format=torch.contiguous_format) for r in resid]
    keep, keep_mid = recording.on_record is None, recording.mid
    in_place = not keep and not recording.pre

    def token_major(tensors: list[Tensor]) -> Tensor:
        return tensors[0].T[None] if len(tensors) == 1 else torch.stack([t.T for t in tensors])

    # Key groups by (head, problem): a head shared by several layers (tied layers, a derived circuit's repeated
    # iterations) tries its last grouping first, which group_identical_columns takes only where it is exact.
    hints: dict[tuple[int, int], Groups] = {}
    # Only a head that runs again keeps its grouping (position-sized index arrays: kept for each of 22 heads, they
    # added a few hundred MB to a million-point run for nothing).
    runs = collections.Counter(id(block.attn) for block in model.blocks)
    # A block's submodules and plans, looked up once per run: a block shared by several layers (tied layers, a
    # derived circuit's iterations) is read once (each read goes through nn.Module.__getattr__; no parameter
    # changes during a forward).
    parts: dict[int, tuple] = {}
    for layer, block in enumerate(model.blocks):
        found = parts.get(id(block))
        if found is None:
            attn, ln1, ln2, mlp = block.attn, block.ln1, block.ln2, block.mlp
            found = parts[id(block)] = (attn, ln1, ln2, cached_plan(attn, AttentionPlan), cached_plan(mlp, MLPPlan))
        attn, ln1, ln2, attn_plan, mlp_plan = found
        posts, mids, groups = [], [], []
        for b, xT in enumerate(states):
            out, grouped = grouped_attention(attn, _feature_major(ln1, xT), score_hooks.get(layer), b,
                                             pair_budget, attn_plan, hints.get((id(attn), b)))
            if not grouped.keys.is_identity and runs[id(attn)] > 1:
                hints[(id(attn), b)] = grouped.keys
            post = xT if in_place else xT.clone()
            _add_rows(post, attn_plan.out.rows, out)
            if keep_mid:
                mids.append(post.clone())
            _add_mlp(post, ln2, mlp_plan)
            posts.append(post)
            groups.append(grouped)
        record = LayerRecord(None if in_place else token_major(states), token_major(posts), groups,
                             token_major(mids) if keep_mid else None)
        if keep:
            records.append(record)
        else:
            recording.on_record(layer, record)
        states = posts
    x = token_major(states)
    if getattr(model, "ln_final", None) is not None:
        x = model.ln_final(x)
    return model.unembed(x), records
