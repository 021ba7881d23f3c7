"""RMSNorm on query and key vectors (``use_qk_norm``, the spherical variant), as TransformerLens' ``RMSNorm``.

``norm(x) = x / sqrt(mean(x^2) + eps) * w``, with hook points ``hook_scale`` (the denominator) and
``hook_normalized`` (``x`` divided by it), computed in the same order as TransformerLens.
"""

from __future__ import annotations

import torch
from jaxtyping import Float
from torch import Tensor, nn

from circuits.hooked.config import HookedCircuitConfig
from circuits.tl import HookPoint


class RMSNorm(nn.Module):
    """``x / sqrt(mean(x^2) + eps) * w`` over the last axis (of length ``length``)."""

    def __init__(self, cfg: HookedCircuitConfig, length: int):
        super().__init__()
        self.cfg, self.eps, self.length = cfg, cfg.eps, length
        self.w = nn.Parameter(torch.ones(length, dtype=cfg.dtype))
        self.hook_scale = HookPoint()  # [..., 1]
        self.hook_normalized = HookPoint()  # [..., length]

    def forward(self, x: Float[Tensor, "*lead length"]) -> Float[Tensor, "*lead length"]:
        if self.cfg.dtype not in (torch.float32, torch.float64):
            x = x.to(torch.float32)  # as TransformerLens: half precision is normalised in float32
        scale = self.hook_scale((x.pow(2).mean(-1, keepdim=True) + self.eps).sqrt())
        return self.hook_normalized(x / scale).to(self.cfg.dtype) * self.w
