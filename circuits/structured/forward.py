"""The structured forward: a whole model run block by block on the feature-major residual stream, each head
on groups (:mod:`circuits.structured.attention`) and each linear map restricted (:mod:`circuits.structured.plans`).

:func:`structured_forward` runs like ``model(resid, start_at_layer=0)`` and hands back each block's record
(:class:`LayerRecord`) as :class:`Recording` says (kept, or streamed and dropped); :func:`check_supported` refuses
the configurations whose attention the structured path does not reproduce; :class:`OwnedStreams` hands the
forward a residual stream it may run on in place.
"""

from __future__ import annotations

import collections

from dataclasses import dataclass, field
from collections.abc import Callable

import torch
from jaxtyping import Float
from torch import Tensor

from circuits import hook_names
from circuits.devices import torch_threads
from circuits.structured.attention import (
    PAIR_BUDGET, GroupedAttention, StructuredPathUnavailable, chunked_block, grouped_attention,
)
from circuits.structured.groups import Groups
from circuits.structured.plans import CHUNK, AttentionPlan, MLPPlan, add_rows, cached_plan, per_token


@dataclass
class LayerRecord:
    """One block of a structured run: the residual stream entering and leaving it (and between attention and MLP,
    when recorded), and the grouped attention of its head on each problem of the batch."""

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
    #: False: a chunked head whose queries do not compress (an assign head's points) keeps its scores but not its
    #: position-sized pattern (``GroupedAttention.pattern`` is ``None``), for a caller that reads only the scores.
    patterns: bool = True


#: Every record, returned.
KEEP_ALL = Recording()


def feature_major_copies(resid: Float[Tensor, "batch pos d_model"]) -> list[Float[Tensor, "d_model pos"]]:
    """The forward's own residual streams: a feature-major ``(d_model, pos)`` copy of each problem's. Always a copy
    (``contiguous()`` would return a feature-major input itself, which the in-place recording then overwrites)."""
    return [r.T.clone(memory_format=torch.contiguous_format) for r in resid]


class OwnedStreams:
    """Residual streams made by :func:`feature_major_copies` and handed over to :func:`structured_forward`, which
    runs on them (in place when recording without ``pre``) instead of copying its input: a caller that holds no
    input stream of its own (an encoding without one, :meth:`circuits.encoding.EncodedBatch.stream`) holds the
    residual stream once, not twice, during the forward (0.47 GB less at a million points, d = 8, k = 10)."""

    def __init__(self, streams: list[Float[Tensor, "d_model pos"]]):
        self._streams = streams
        self.is_cpu = all(s.is_cpu for s in streams)

    def take(self) -> list[Float[Tensor, "d_model pos"]]:
        """The streams, once: the holder keeps no reference after (the forward's in-place updates free as they go)."""
        streams, self._streams = self._streams, []
        return streams


def forward_hook_counts(model) -> dict[str, int]:
    """How many forward hooks (pre-hooks included) each module of ``model`` carries, by module name (``""``: the
    model itself); a TransformerLens hook point's hooks, permanent or in a ``hooks()`` context, are torch's."""
    return {name: len(module._forward_hooks) + len(module._forward_pre_hooks) for name, module in model.named_modules()}


def check_supported(model, score_hooks: dict[int, object] | None = None) -> None:
    """Refuse configurations whose attention this module does not reproduce exactly.

    ``model`` is a ``HookedTransformer`` or the plain modules of :mod:`circuits.plain` (same attributes, no hook
    points). ``score_hooks[layer]`` is the permanent ``hook_attn_scores`` hook of each layer that has one; each must carry a
    ``structured`` counterpart. Any other forward hook, on any module of ``model``, refuses the path.
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
    # The structured path computes each block from its weights and runs none of the blocks' hooks: a forward hook (a
    # TransformerLens hook point's, permanent or in a hooks() context, or torch's register_forward_hook on a module)
    # changes the dense run and not this one. The only hooks it runs are the score hooks it is given; a hook on a
    # module it does call (the unembedding) is refused too, which keeps the rule one line: then the dense run runs.
    allowed = {hook_names.attn_scores(layer) for layer in score_hooks}
    for name, registered in forward_hook_counts(model).items():
        if registered != (1 if name in allowed else 0):
            problems.append(f"{registered} hook(s) on {name or 'the model'}, which the structured path would not run")
    for layer in score_hooks:
        if not hasattr(score_hooks[layer], "structured"):
            problems.append(f"the score hook of layer {layer} has no structured counterpart")
    if problems:
        raise StructuredPathUnavailable("structured path does not support " + "; ".join(problems))


def _add_mlp(xT: Float[Tensor, "d_model pos"], ln2, plan: MLPPlan) -> None:
    """The block's MLP added to the residual rows it writes, in place, a chunk of positions at a time
    (:data:`circuits.structured.plans.CHUNK`): a per-token map, so each chunk is its own; the hidden units of
    one chunk exist at once, not of every position."""
    pos = xT.shape[1]
    for start in range(0, pos, CHUNK):
        part = xT if pos <= CHUNK else xT[:, start : start + CHUNK]  # a view: written through
        add_rows(part, plan.out.rows, plan.apply(per_token(ln2, part)))


@torch.no_grad()
def structured_forward(model, resid: Float[Tensor, "batch pos d_model"] | OwnedStreams, score_hooks: dict[int, object] | None = None,
                       recording: Recording = KEEP_ALL, pair_budget: int = PAIR_BUDGET, threads: int = 1
                       ) -> tuple[Float[Tensor, "batch pos d_vocab_out"], list[LayerRecord]]:
    """Run ``model`` like ``model(resid, start_at_layer=0)``, with grouped attention and restricted linear maps.

    ``model``: a ``HookedTransformer`` or a :class:`circuits.plain.PlainTransformer` (``KMeansCircuit.runnable``).
    ``score_hooks`` are the model's permanent score hooks by layer (``KMeansCircuit.score_hooks``). Returns the
    logits and, per layer (as ``recording`` says: returned or streamed), the residual stream before and after the
    block and the grouped attention of each problem. Residuals in the records are ``(batch, pos, d_model)`` views
    of feature-major storage. ``resid`` may instead be an :class:`OwnedStreams`, which the forward runs on without
    a copy of its own. ``threads``: torch's intra-op threads while it runs on the CPU (the caller's scheduler decides:
    its operations are many and short, and one thread is faster on a loaded machine).
    Raises :class:`StructuredPathUnavailable` when the model or the run is not structured; nothing is computed
    approximately.
    """
    score_hooks = score_hooks or {}
    check_supported(model, score_hooks)
    with torch_threads(threads if resid.is_cpu else None):
        return _structured_forward(model, resid, score_hooks, recording, pair_budget)


def _key_map_signature(attn, ln1, plan: AttentionPlan) -> tuple:
    """What a head's keys are a function of: its key map's restricted weights and bias (by value), its input norm and
    its qk-norm; equal signatures give equal keys for equal residuals. Only a hint rests on it (every grouping is
    checked), so two heads whose keys differ merely share a candidate that fails its check."""
    if not isinstance(ln1, torch.nn.Identity) or attn.cfg.use_qk_norm:
        return ("module", id(attn))
    k = plan.k
    inputs = (k.inputs.start, k.inputs.stop) if isinstance(k.inputs, slice) else tuple(k.inputs.tolist())
    return (inputs, k.W_T.dtype, tuple(k.W_T.shape), k.W_T.cpu().numpy().tobytes(),
            None if k.b is None else k.b.cpu().numpy().tobytes())


def _structured_forward(model, resid, score_hooks: dict, recording: Recording, pair_budget: int):
    records: list[LayerRecord] = []
    states = resid.take() if isinstance(resid, OwnedStreams) else feature_major_copies(resid)
    keep, keep_mid = recording.on_record is None, recording.mid
    in_place = not keep and not recording.pre

    def token_major(tensors: list[Tensor]) -> Tensor:
        return tensors[0].T[None] if len(tensors) == 1 else torch.stack([t.T for t in tensors])

    # A block's submodules and plans, looked up once per run: a block shared by several layers (tied layers, a
    # derived circuit's iterations) is read once (each read goes through nn.Module.__getattr__; no parameter
    # changes during a forward).
    parts: dict[int, tuple] = {}
    for block in model.blocks:
        if id(block) not in parts:
            attn_plan = cached_plan(block.attn, AttentionPlan)
            parts[id(block)] = (block.attn, block.ln1, block.ln2, attn_plan, cached_plan(block.mlp, MLPPlan),
                                _key_map_signature(block.attn, block.ln1, attn_plan))
    # Key groups by (key map, problem): heads whose keys are the same function of the residual (tied layers, the
    # iterations of a built circuit, whose layers hold equal weights in separate tensors) try their last grouping
    # first, which is taken only where it is exact (group_identical_columns, chunked_block). Only a key map that
    # runs again keeps its grouping (position-sized index arrays: kept for each of 22 heads, they added a few hundred
    # MB to a million-point run for nothing).
    hints: dict[tuple, Groups] = {}
    runs = collections.Counter(parts[id(block)][-1] for block in model.blocks)
    for layer, block in enumerate(model.blocks):
        attn, ln1, ln2, attn_plan, mlp_plan, key_map = parts[id(block)]
        posts, mids, groups = [], [], []
        for b, xT in enumerate(states):
            grouped = None
            if in_place and not keep_mid and layer not in score_hooks:
                # False: this head's queries did not compress last time (an assign head's point queries differ).
                query_hint = hints.get((key_map, b, "queries"))
                grouped = chunked_block(attn, ln1, ln2, attn_plan, mlp_plan, xT, hints.get((key_map, b)),
                                        pair_budget, query_hint or None, query_hint is not False,
                                        keep_pattern=recording.patterns)
            if grouped is not None:
                post = xT
            else:
                out, grouped = grouped_attention(attn, per_token(ln1, xT), score_hooks.get(layer), b,
                                                 pair_budget, attn_plan, hints.get((key_map, b)))
                post = xT if in_place else xT.clone()
                add_rows(post, attn_plan.out.rows, out)
                if keep_mid:
                    mids.append(post.clone())
                _add_mlp(post, ln2, mlp_plan)
            if not grouped.keys.is_identity and runs[key_map] > 1:
                hints[(key_map, b)] = grouped.keys
                hints[(key_map, b, "queries")] = False if grouped.queries.is_identity else grouped.queries
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
