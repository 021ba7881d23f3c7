"""The unembedding, as a ``HookedTransformer``'s ``Unembed``: ``logits = x W_U + b_U`` (``F.linear`` on the
transposed, contiguous ``W_U``), between ``hook_in`` and ``hook_out``."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from jaxtyping import Float
from torch import Tensor, nn

from circuits.hooked.config import HookedCircuitConfig
from circuits.tl import HookPoint


class Unembed(nn.Module):
    def __init__(self, cfg: HookedCircuitConfig):
        super().__init__()
        self.W_U = nn.Parameter(torch.empty(cfg.d_model, cfg.d_vocab_out, dtype=cfg.dtype))
        self.b_U = nn.Parameter(torch.zeros(cfg.d_vocab_out, dtype=cfg.dtype))
        self.hook_in = HookPoint()  # [batch, pos, d_model]
        self.hook_out = HookPoint()  # [batch, pos, d_vocab_out]

    def forward(self, x: Float[Tensor, "batch pos d_model"]) -> Float[Tensor, "batch pos d_vocab_out"]:
        return self.hook_out(F.linear(self.hook_in(x), self.W_U.T.contiguous(), self.b_U))
