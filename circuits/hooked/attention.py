"""The circuit's attention layer, as a ``HookedTransformer``'s ``Attention`` computes it for this architecture.

For heads ``h`` (one in every circuit) and residual rows ``x_i``:

    q_i = x_i W_Q + b_Q,  k_j = x_j W_K + b_K,  v_j = x_j W_V + b_V       (hook_q, hook_k, hook_v)
    (use_qk_norm: q_i, k_j <- RMSNorm(q_i), RMSNorm(k_j))
    s_ij = q_i . k_j / attn_scale      (hook_attn_scores; bidirectional, no mask; attn_scale is 1 without
                                        use_attn_scale, times layer + 1 with scale_attn_by_inverse_layer_idx)
    A_ij = softmax_j(s_ij)   (use_attention_sinks: one more key of logit ``sinks``, dropped after the softmax)
                                                                            (hook_pattern; NaN rows become 0)
    z_i = sum_j A_ij v_j                                                    (hook_z)
    out_i = z_i W_O + b_O        (use_attn_result: per head, r_i = z_i W_O, hook_result, then summed, + b_O)

Every step is the same torch operation on the same layout as TransformerLens 3.x (``F.linear`` with the weights
rearranged as it does, ``@`` for scores and ``z``), because float arithmetic depends on it: the circuit's numbers
are compared bit for bit with a ``HookedTransformer``'s.
"""

from __future__ import annotations

import einops
import torch
import torch.nn.functional as F
from jaxtyping import Float
from torch import Tensor, nn

from circuits.hooked.config import HookedCircuitConfig
from circuits.hooked.norm import RMSNorm
from circuits.tl import FactoredMatrix, HookPoint


class Attention(nn.Module):
    """One attention layer: parameters ``W_Q``, ``W_K``, ``W_V`` ``(head, d_model, d_head)``, ``W_O``
    ``(head, d_head, d_model)``, biases, optional ``sinks`` and ``q_norm``/``k_norm``; the buffers ``mask`` and
    ``IGNORE`` a ``HookedTransformer`` keeps in its state dict (unused: the attention is bidirectional)."""

    def __init__(self, cfg: HookedCircuitConfig, layer: int):
        super().__init__()
        self.cfg, self.layer_id = cfg, layer
        H, M, D, dtype = cfg.n_heads, cfg.d_model, cfg.d_head, cfg.dtype
        # Registered in TransformerLens' order, so state dicts list the same keys in the same order.
        self.W_Q = nn.Parameter(torch.empty(H, M, D, dtype=dtype))
        self.W_O = nn.Parameter(torch.empty(H, D, M, dtype=dtype))
        self.b_Q = nn.Parameter(torch.zeros(H, D, dtype=dtype))
        self.b_O = nn.Parameter(torch.zeros(M, dtype=dtype))
        self.q_norm = RMSNorm(cfg, D) if cfg.use_qk_norm else None
        self.k_norm = RMSNorm(cfg, D) if cfg.use_qk_norm else None
        self.register_buffer("mask", torch.empty((0, 0), dtype=torch.bool))
        self.register_buffer("IGNORE", torch.tensor(-torch.inf))
        self.attn_scale = cfg.attn_scale if cfg.use_attn_scale else 1.0
        if cfg.scale_attn_by_inverse_layer_idx:
            self.attn_scale *= layer + 1
        if cfg.use_attention_sinks:
            self.sinks = nn.Parameter(torch.zeros(H, dtype=dtype))
        self.hook_k = HookPoint()  # [batch, pos, head, d_head]
        self.hook_q = HookPoint()  # [batch, pos, head, d_head]
        self.hook_v = HookPoint()  # [batch, pos, head, d_head]
        self.hook_z = HookPoint()  # [batch, pos, head, d_head]
        self.hook_attn_scores = HookPoint()  # [batch, head, query_pos, key_pos]
        self.hook_pattern = HookPoint()  # [batch, head, query_pos, key_pos]
        self.hook_result = HookPoint()  # [batch, pos, head, d_model]
        self.W_K = nn.Parameter(torch.empty(H, M, D, dtype=dtype))
        self.W_V = nn.Parameter(torch.empty(H, M, D, dtype=dtype))
        self.b_K = nn.Parameter(torch.zeros(H, D, dtype=dtype))
        self.b_V = nn.Parameter(torch.zeros(H, D, dtype=dtype))

    @property
    def QK(self) -> FactoredMatrix:
        """``W_Q W_K^T`` per head, as a low-rank ``FactoredMatrix`` (``attn.QK[h]`` for head ``h``)."""
        return FactoredMatrix(self.W_Q, einops.rearrange(self.W_K, "head d_model d_head -> head d_head d_model"))

    @property
    def OV(self) -> FactoredMatrix:
        """``W_V W_O`` per head, as a low-rank ``FactoredMatrix``."""
        return FactoredMatrix(self.W_V, self.W_O)

    @staticmethod
    def _project(x: Float[Tensor, "batch pos d_model"], W: Float[Tensor, "head d_model d_head"],
                 b: Float[Tensor, "head d_head"]) -> Float[Tensor, "batch pos head d_head"]:
        """``x W + b`` for every head (TransformerLens' ``simple_attn_linear``)."""
        w = einops.rearrange(W, "head d_model d_head -> (head d_head) d_model")
        flat = F.linear(x, w, einops.rearrange(b, "head d_head -> (head d_head)"))
        return flat.reshape(x.shape[0], x.shape[1], b.shape[0], b.shape[1])

    @staticmethod
    def _normed(x: Float[Tensor, "batch pos head d_head"], norm: RMSNorm) -> Float[Tensor, "batch pos head d_head"]:
        return norm(x.reshape(-1, x.shape[-1])).reshape(x.shape)

    def forward(self, query_input: Float[Tensor, "batch pos d_model"], key_input: Float[Tensor, "batch pos d_model"],
                value_input: Float[Tensor, "batch pos d_model"]) -> Float[Tensor, "batch pos d_model"]:
        q = self.hook_q(self._project(query_input, self.W_Q, self.b_Q))
        k = self.hook_k(self._project(key_input, self.W_K, self.b_K))
        v = self.hook_v(self._project(value_input, self.W_V, self.b_V))
        if self.q_norm is not None:
            q, k = self._normed(q, self.q_norm), self._normed(k, self.k_norm)
        scores = self.hook_attn_scores(self.scores(q, k))
        if self.cfg.use_attention_sinks:
            # The sink joins the softmax as one more key after hook_attn_scores (hooks keep the square shape) and
            # is dropped after it: every row then sums to less than 1.
            sink = self.sinks.reshape(1, -1, 1, 1).expand(scores.shape[0], -1, scores.shape[-2], -1).to(scores.dtype)
            with_sink = torch.cat([scores, sink], dim=-1)
            with_sink = with_sink - with_sink.max(dim=-1, keepdim=True).values
            pattern = F.softmax(with_sink, dim=-1)[..., :-1]
        else:
            pattern = F.softmax(scores, dim=-1)
        pattern = torch.where(torch.isnan(pattern), torch.zeros_like(pattern), pattern)
        pattern = self.hook_pattern(pattern).to(device=v.device, dtype=v.dtype)
        v_ = einops.rearrange(v, "batch key head d_head -> batch head key d_head")
        z = self.hook_z(einops.rearrange(pattern @ v_, "batch head query d_head -> batch query head d_head"))
        return self.output(z)

    def scores(self, q: Float[Tensor, "batch query head d_head"],
               k: Float[Tensor, "batch key head d_head"]) -> Float[Tensor, "batch head query key"]:
        """``s_ij = q_i . k_j / attn_scale``."""
        q_ = einops.rearrange(q, "batch query head d_head -> batch head query d_head")
        k_ = einops.rearrange(k, "batch key head d_head -> batch head d_head key")
        return q_ @ k_ / self.attn_scale

    def output(self, z: Float[Tensor, "batch pos head d_head"]) -> Float[Tensor, "batch pos d_model"]:
        """``z W_O + b_O``; with ``use_attn_result``, through each head's result ``z_h W_O[h]`` (hook_result)."""
        if not self.cfg.use_attn_result:
            w = einops.rearrange(self.W_O, "head d_head d_model -> d_model (head d_head)").contiguous()
            return F.linear(z.reshape(z.shape[0], z.shape[1], -1), w, self.b_O)
        w = einops.rearrange(self.W_O, "head d_head d_model -> 1 1 head d_head d_model")
        result = self.hook_result((einops.rearrange(z, "batch pos head d_head -> batch pos head d_head 1") * w)
                                  .sum(-2))
        return einops.reduce(result, "batch pos head d_model -> batch pos d_model", "sum") + self.b_O
