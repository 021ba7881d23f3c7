"""The circuit's gated ReLU MLP, as a ``HookedTransformer``'s ``GatedMLP`` computes it:

    pre = x W_gate                          (hook_pre)
    pre_linear = x W_in                     (hook_pre_linear)
    post = ReLU(pre) * pre_linear + b_in    (hook_post)
    out = post W_out + b_out

each product with ``F.linear`` on the transposed, contiguous weight, as TransformerLens 3.x does (same bits).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from jaxtyping import Float
from torch import Tensor, nn

from circuits.hooked.config import HookedCircuitConfig
from circuits.tl import HookPoint


class GatedMLP(nn.Module):
    """``W_gate``, ``W_in`` ``(d_model, d_mlp)``, ``b_in`` ``(d_mlp,)``, ``W_out`` ``(d_mlp, d_model)``, ``b_out``."""

    def __init__(self, cfg: HookedCircuitConfig):
        super().__init__()
        self.cfg = cfg
        M, N, dtype = cfg.d_model, cfg.d_mlp, cfg.dtype
        self.W_in = nn.Parameter(torch.empty(M, N, dtype=dtype))
        self.W_out = nn.Parameter(torch.empty(N, M, dtype=dtype))
        self.W_gate = nn.Parameter(torch.empty(M, N, dtype=dtype))
        self.b_in = nn.Parameter(torch.zeros(N, dtype=dtype))
        self.b_out = nn.Parameter(torch.zeros(M, dtype=dtype))
        self.hook_pre = HookPoint()  # [batch, pos, d_mlp]
        self.hook_pre_linear = HookPoint()  # [batch, pos, d_mlp]
        self.hook_post = HookPoint()  # [batch, pos, d_mlp]

    def forward(self, x: Float[Tensor, "batch pos d_model"]) -> Float[Tensor, "batch pos d_model"]:
        pre = self.hook_pre(F.linear(x, self.W_gate.T.contiguous()))
        pre_linear = self.hook_pre_linear(F.linear(x, self.W_in.T.contiguous()))
        post = self.hook_post(F.relu(pre) * pre_linear + self.b_in)
        return F.linear(post, self.W_out.T.contiguous(), self.b_out)
