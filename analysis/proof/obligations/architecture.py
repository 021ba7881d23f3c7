"""The model is the one the block equations describe: its configuration, and TransformerLens' forward pass.

``model.architecture`` is exact (configuration fields); ``model.semantics`` is numeric evidence that the library
computes the equations the proof reasons about, stage by stage on a random residual.
"""

from __future__ import annotations

import numpy as np

from analysis.proof.exact import LayerParams, ModelParams
from circuits import hook_names


#: Configuration the block equations assume (field -> required value); fields a TransformerLens version lacks are skipped.
REQUIRED_CONFIG: dict[str, object] = {
    "n_heads": 1,
    "attention_dir": "bidirectional",
    "normalization_type": None,
    "act_fn": "relu",
    "gated_mlp": True,
    "attn_only": False,
    "parallel_attn_mlp": False,
    "positional_embedding_type": "standard",
    "use_normalization_before_and_after": False,
    "use_qk_norm": False,
    "use_local_attn": False,
    "scale_attn_by_inverse_layer_idx": False,
    "use_attention_sinks": False,
    "clip_qkv": None,
    "use_logn_attn": False,
    "n_key_value_heads": None,
    "original_architecture": None,
    "post_embedding_ln": False,
    "final_rms": False,
    "num_experts": None,
}

ARCHITECTURE_STATEMENT = (
    "The configuration is the one the block equations assume: one head per block, bidirectional attention with no"
    " score scaling or soft-capping, no normalisation, a gated ReLU MLP after the attention (not in parallel), no"
    " positional terms in the scores (inputs enter the residual stream with start_at_layer=0)."
)

SEMANTICS_STATEMENT = (
    "TransformerLens computes the block equations the proof reasons about (scores = (xW_Q+b_Q)(xW_K+b_K)^T,"
    " softmax, out = pattern (xW_V+b_V) W_O + b_O, resid_mid = x + out, gated MLP on resid_mid, W_U): compared"
    " stage by stage on a random residual. Numeric evidence, not part of the proof."
)


def check_architecture(cfg, overrides: dict[str, object] | None = None) -> list[str]:
    """Configuration fields that differ from :data:`REQUIRED_CONFIG` (with a variant's ``overrides``)."""
    problems = []
    missing = object()
    for name, required in {**REQUIRED_CONFIG, **(overrides or {})}.items():
        value = getattr(cfg, name, missing)
        if value is missing:
            continue
        if value != required:
            problems.append(f"cfg.{name} = {value!r}, required {required!r}")
    if getattr(cfg, "use_attn_scale", False) and getattr(cfg, "attn_scale", 1.0) != 1.0:
        problems.append(f"cfg.use_attn_scale is on (scores divided by {cfg.attn_scale})")
    for cap in ("attn_scores_soft_cap", "output_logits_soft_cap"):
        value = getattr(cfg, cap, -1.0)
        if value is not None and value > 0:
            problems.append(f"cfg.{cap} = {value} (scores soft-capped)")
    return problems


def _stage_hooks(n_layers: int) -> set[str]:
    names = set()
    for layer in range(n_layers):
        names |= {hook_names.resid_pre(layer), hook_names.attn_scores(layer), hook_names.pattern(layer),
                  hook_names.attn_out(layer), hook_names.resid_mid(layer), hook_names.mlp_out(layer),
                  hook_names.resid_post(layer)}
    return names


def _block_equations(lp: LayerParams, get, n_tokens: int):
    """``(hook name, what TransformerLens cached, what the equation gives from the cached input)`` per stage."""
    h, m, layer = lp.head, lp.mlp, lp.layer
    r = get(hook_names.resid_pre(layer))
    yield hook_names.attn_scores(layer), get(hook_names.attn_scores(layer))[0], (r @ h.W_Q + h.b_Q) @ (r @ h.W_K + h.b_K).T
    s = get(hook_names.attn_scores(layer))[0]
    if h.sinks is not None:
        # A sink is one more key with logit `sinks` and value 0: it joins the softmax and is dropped after.
        s = np.concatenate([s, np.full((s.shape[0], 1), h.sinks)], axis=1)
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    p = p / p.sum(axis=-1, keepdims=True)
    yield hook_names.pattern(layer), get(hook_names.pattern(layer))[0], p[:, :n_tokens]
    pattern = get(hook_names.pattern(layer))[0]
    yield hook_names.attn_out(layer), get(hook_names.attn_out(layer)), pattern @ (r @ h.W_V + h.b_V) @ h.W_O + h.b_O
    mid = get(hook_names.resid_mid(layer))
    yield hook_names.resid_mid(layer), mid, r + get(hook_names.attn_out(layer))
    mlp = (np.maximum(mid @ m.W_gate, 0) * (mid @ m.W_in) + m.b_in) @ m.W_out + m.b_out
    yield hook_names.mlp_out(layer), get(hook_names.mlp_out(layer)), mlp
    yield hook_names.resid_post(layer), get(hook_names.resid_post(layer)), mid + get(hook_names.mlp_out(layer))


def check_semantics(model, params: ModelParams, seed: int = 0, n_tokens: int = 7) -> list[str]:
    """Stage-by-stage comparison of TransformerLens' forward pass with the equations, on a random residual."""
    import torch  # heavy: loaded only when a model is proven

    rng = np.random.default_rng(seed)
    d_model = params.W_U.shape[0]
    x = rng.normal(size=(1, n_tokens, d_model)) * 0.3
    with torch.no_grad():
        logits, cache = model.run_with_cache(torch.as_tensor(x, dtype=model.cfg.dtype), start_at_layer=0,
                                             names_filter=hook_names.names_filter(_stage_hooks(len(params.layers))))
    eps = float(torch.finfo(model.cfg.dtype).eps)
    get = lambda name: cache[name][0].double().cpu().numpy()  # noqa: E731
    stages = [stage for lp in params.layers for stage in _block_equations(lp, get, n_tokens)]
    final = get(hook_names.resid_post(len(params.layers) - 1))
    stages.append(("logits", logits[0].double().cpu().numpy(), final @ params.W_U + params.b_U))
    problems = []
    for name, got, want in stages:
        scale = max(1.0, float(np.abs(want).max()))
        err = float(np.abs(got - want).max())
        if err > 1e3 * eps * scale * d_model:
            problems.append(f"{name}: differs from the equation by {err:.3g}")
    return problems
