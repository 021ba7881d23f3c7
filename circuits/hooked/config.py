"""The configuration of a :class:`~circuits.hooked.model.HookedCircuit`: ``HookedTransformerConfig``'s names, for
the settings the circuit uses.

TransformerLens 4 has no ``HookedTransformerConfig``. :class:`HookedCircuitConfig` is the plain
:class:`~circuits.plain.CircuitConfig` plus the switches and derived values a ``HookedTransformer``'s config carries
and that TransformerLens' helpers or the project read (``use_attn_result``, ``use_hook_mlp_in``, ``attn_scale``),
plus the architecture fields the prover checks (:mod:`analysis.proof.obligations.architecture`), fixed at the only
values the hooked components implement. A setting they do not implement is refused when the config is made, not
silently ignored.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

from circuits.plain import CircuitConfig


@dataclass
class HookedCircuitConfig(CircuitConfig):
    """:class:`~circuits.plain.CircuitConfig` with ``HookedTransformerConfig``'s run-time switches (see the module
    docstring). ``attn_scale`` is ``sqrt(d_head)`` with ``use_attn_scale`` unless given, as in TransformerLens."""

    use_attn_result: bool = False
    use_hook_mlp_in: bool = False
    use_split_qkv_input: bool = False
    use_attn_in: bool = False
    attn_scale: float = -1.0
    #: Scores also divided by ``layer + 1`` (a HookedTransformer lever; no circuit uses it, tests do).
    scale_attn_by_inverse_layer_idx: bool = False

    # Architecture a HookedTransformer could have and the hooked components do not: fixed, so that code reading
    # them (the prover's architecture obligation) sees the truth.
    use_local_attn: ClassVar[bool] = False
    use_normalization_before_and_after: ClassVar[bool] = False
    clip_qkv: ClassVar[None] = None
    use_logn_attn: ClassVar[bool] = False
    original_architecture: ClassVar[None] = None
    post_embedding_ln: ClassVar[bool] = False
    final_rms: ClassVar[bool] = False
    num_experts: ClassVar[None] = None
    attn_scores_soft_cap: ClassVar[float] = -1.0
    output_logits_soft_cap: ClassVar[float] = -1.0
    ungroup_grouped_query_attention: ClassVar[bool] = False

    def __post_init__(self) -> None:
        if not self.plain_supported:
            raise ValueError("the hooked circuit implements bidirectional one-head attention, no normalisation and a"
                             " gated ReLU MLP, with use_qk_norm, use_attention_sinks and use_attn_scale;"
                             f" not {sorted(self.other) or self}")
        if self.attention_dir != "bidirectional":
            raise ValueError(f"the hooked circuit's attention is bidirectional, not {self.attention_dir!r}")
        if self.use_split_qkv_input or self.use_attn_in:
            raise ValueError("the hooked circuit has no split query/key/value inputs (use_split_qkv_input,"
                             " use_attn_in)")
        if self.use_attn_scale and self.attn_scale == -1.0:
            self.attn_scale = math.sqrt(self.d_head)
