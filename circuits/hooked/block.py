"""One block of the circuit, as a ``HookedTransformer``'s ``TransformerBlock`` runs it without normalisation:

    resid_mid = resid_pre + attn(resid_pre)      (hook_resid_pre, hook_attn_out, hook_resid_mid)
    resid_post = resid_mid + mlp(resid_mid)      (hook_mlp_out, hook_resid_post)

``ln1``/``ln2`` are the identity (``normalization_type=None``). The hook points a ``TransformerBlock`` has for
switches the circuit does not use (``hook_attn_in``, ``hook_q_input``, ``hook_k_input``, ``hook_v_input``) exist, so
hook names are the same, and stay silent; ``hook_mlp_in`` runs with ``use_hook_mlp_in``, as there.
"""

from __future__ import annotations

from jaxtyping import Float
from torch import Tensor, nn

from circuits.hooked.attention import Attention
from circuits.hooked.config import HookedCircuitConfig
from circuits.hooked.mlp import GatedMLP
from circuits.tl import HookPoint


class Block(nn.Module):
    def __init__(self, cfg: HookedCircuitConfig, layer: int):
        super().__init__()
        self.cfg = cfg
        self.ln1, self.ln2 = nn.Identity(), nn.Identity()
        self.attn = Attention(cfg, layer)
        self.mlp = GatedMLP(cfg)
        self.hook_attn_in = HookPoint()  # silent: no use_attn_in
        self.hook_q_input = HookPoint()  # silent: no use_split_qkv_input
        self.hook_k_input = HookPoint()
        self.hook_v_input = HookPoint()
        self.hook_mlp_in = HookPoint()  # [batch, pos, d_model], with use_hook_mlp_in
        self.hook_attn_out = HookPoint()  # [batch, pos, d_model]
        self.hook_mlp_out = HookPoint()
        self.hook_resid_pre = HookPoint()
        self.hook_resid_mid = HookPoint()
        self.hook_resid_post = HookPoint()

    def forward(self, resid_pre: Float[Tensor, "batch pos d_model"]) -> Float[Tensor, "batch pos d_model"]:
        resid_pre = self.hook_resid_pre(resid_pre)
        x = self.ln1(resid_pre)
        # Queries and keys read x + 0.0, as in TransformerLens (where a positional term would be added): the same
        # bits, down to the sign of a zero.
        attn_out = self.hook_attn_out(self.attn(x + 0.0, x + 0.0, x))
        resid_mid = self.hook_resid_mid(resid_pre + attn_out)
        mlp_in = self.hook_mlp_in(resid_mid.clone()) if self.cfg.use_hook_mlp_in else resid_mid
        mlp_out = self.hook_mlp_out(self.mlp(self.ln2(mlp_in)))
        return self.hook_resid_post(resid_mid + mlp_out)
