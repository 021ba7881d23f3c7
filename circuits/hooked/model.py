""":class:`HookedCircuit`: the circuit as a ``HookedRootModule`` with a ``HookedTransformer``'s surface.

It is what ``circuits.model.CircuitTransformer`` is on TransformerLens 4.x (no ``HookedTransformer`` there), and it
behaves as the 3.x ``CircuitTransformer`` does: residual input (``model(resid)`` runs every block, as
``start_at_layer=0``; :class:`~circuits.hooked.inputs.ResidualInput` for ``transformer_lens.patching``'s helpers),
the input copied first, token input refused, no embedding (``embed``/``pos_embed`` refuse to run; ``hook_embed`` and
``hook_pos_embed`` exist and stay silent), ``d_vocab = 0`` and ``n_ctx = sys.maxsize``.

What a ``HookedTransformer`` offers and the circuit's analyses use is here under the same names: the hook points and
cache keys of every block, ``run_with_cache`` (an ``ActivationCache``: ``decompose_resid``, ``stack_head_results``,
``accumulated_resid``), ``run_with_hooks``, ``hooks(...)``, ``add_hook(..., is_permanent=True)``, the stacked weights
``W_Q``/``W_K``/``W_V``/``W_O``/``W_in``/``W_gate``/``W_out`` and biases, ``QK``/``OV`` as ``FactoredMatrix``,
``accumulated_bias``, ``set_use_attn_result``/``set_use_hook_mlp_in``, ``to``, and the state dict (same keys, same
shapes, the same buffers), so ``load_state_dict(strict=True)`` takes a ``HookedTransformer``'s.
"""

from __future__ import annotations

import sys

import torch
from jaxtyping import Float
from torch import Tensor, nn

from circuits.hooked.block import Block
from circuits.hooked.config import HookedCircuitConfig
from circuits.hooked.inputs import WHAT_TO_PASS, NoTokens, residual_of
from circuits.hooked.unembed import Unembed
from circuits.plain import CircuitConfig
from circuits.tl import ActivationCache, FactoredMatrix, HookedRootModule, HookPoint


class HookedCircuit(HookedRootModule):
    """The circuit's blocks and unembedding, fed residual vectors (see the module docstring)."""

    def __init__(self, cfg: HookedCircuitConfig | CircuitConfig | dict):
        super().__init__()
        if isinstance(cfg, dict):
            cfg = HookedCircuitConfig.of(**cfg)
        elif not isinstance(cfg, HookedCircuitConfig):
            cfg = HookedCircuitConfig.of(**cfg.settings())
        if cfg.d_vocab != 0:
            raise ValueError(f"a CircuitTransformer has no vocabulary (d_vocab=0), got d_vocab={cfg.d_vocab}")
        # No positional table: positions carry no information, and the residual path takes any number of tokens.
        cfg.n_ctx = sys.maxsize
        self.cfg = cfg
        self.tokenizer = None
        self.embed, self.pos_embed = NoTokens(), NoTokens()
        self.hook_embed, self.hook_pos_embed = HookPoint(), HookPoint()
        self.blocks = nn.ModuleList([Block(cfg, layer) for layer in range(cfg.n_layers)])
        self.unembed = Unembed(cfg)
        nn.Module.to(self, cfg.device)
        # Names every hook point after its path (blocks.0.attn.hook_pattern, ...): HookedRootModule needs it.
        self.setup()

    @staticmethod
    def residual_of(input, d_model: int) -> Float[Tensor, "batch pos d_model"]:
        """``input`` as a residual tensor, or a ``TypeError`` / ``ValueError`` saying what is wrong with it."""
        return residual_of(input, d_model)

    def forward(self, input, return_type: str | None = "logits", start_at_layer: int | None = None,
                stop_at_layer: int | None = None, tokens=None):
        """Blocks ``start_at_layer`` (default 0; negative counts from the end) up to ``stop_at_layer`` (exclusive;
        then the residual stream is returned), then the unembedding: logits, or ``None`` with
        ``return_type=None``. There is no next-token loss (``tokens``, ``return_type="loss"`` are refused)."""
        if tokens is not None:
            raise TypeError("tokens=: " + WHAT_TO_PASS)
        if return_type not in ("logits", None):
            raise ValueError(f"return_type {return_type!r}: the k-means circuit has no next-token loss; use"
                             " 'logits' or None")
        # A copy, as an embedding would make: hooks on the first resid_pre may write in place (transformer_lens'
        # patching helpers do), and must not change the caller's input.
        residual = residual_of(input, self.cfg.d_model).clone().to(self.cfg.device)
        for block in self.blocks[0 if start_at_layer is None else start_at_layer:stop_at_layer]:
            residual = block(residual)
        if stop_at_layer is not None:
            return residual
        return None if return_type is None else self.unembed(residual)

    def run_with_cache(self, *model_args, return_cache_object: bool = True, remove_batch_dim: bool = False,
                       **kwargs):
        """``HookedRootModule.run_with_cache``, returning an ``ActivationCache`` as a ``HookedTransformer`` does."""
        out, cache_dict = super().run_with_cache(*model_args, remove_batch_dim=remove_batch_dim, **kwargs)
        if not return_cache_object:
            return out, cache_dict
        return out, ActivationCache(cache_dict, self, has_batch_dim=not remove_batch_dim)

    # Switches a HookedTransformer offers for this architecture.
    def set_use_attn_result(self, use_attn_result: bool) -> None:
        """Compute each head's result at ``hook_result`` (for ``stack_head_results`` and patching by head)."""
        self.cfg.use_attn_result = use_attn_result

    def set_use_hook_mlp_in(self, use_hook_mlp_in: bool) -> None:
        """Run ``hook_mlp_in`` on a copy of each block's MLP input."""
        self.cfg.use_hook_mlp_in = use_hook_mlp_in

    def to(self, device_or_dtype: torch.device | str | torch.dtype, print_details: bool = False):
        """``nn.Module.to`` that also records the device or dtype in ``cfg``, as a ``HookedTransformer``'s."""
        if isinstance(device_or_dtype, torch.device):
            self.cfg.device = device_or_dtype.type
        elif isinstance(device_or_dtype, str):
            self.cfg.device = device_or_dtype
        elif isinstance(device_or_dtype, torch.dtype):
            self.cfg.dtype = device_or_dtype
        if print_details:
            print("Moving model to", device_or_dtype)
        return nn.Module.to(self, device_or_dtype)

    def cuda(self, device: int | torch.device | None = None):
        return self.to("cuda" if device is None else f"cuda:{device}" if isinstance(device, int) else device)

    def cpu(self):
        return self.to(torch.device("cpu"))

    # The weights of every layer stacked, as HookedTransformer's properties.
    def _stack(self, component: str, name: str) -> Tensor:
        return torch.stack([getattr(getattr(block, component), name) for block in self.blocks], dim=0)

    @property
    def W_Q(self) -> Float[Tensor, "n_layers head d_model d_head"]:
        return self._stack("attn", "W_Q")

    @property
    def W_K(self) -> Float[Tensor, "n_layers head d_model d_head"]:
        return self._stack("attn", "W_K")

    @property
    def W_V(self) -> Float[Tensor, "n_layers head d_model d_head"]:
        return self._stack("attn", "W_V")

    @property
    def W_O(self) -> Float[Tensor, "n_layers head d_head d_model"]:
        return self._stack("attn", "W_O")

    @property
    def b_Q(self) -> Float[Tensor, "n_layers head d_head"]:
        return self._stack("attn", "b_Q")

    @property
    def b_K(self) -> Float[Tensor, "n_layers head d_head"]:
        return self._stack("attn", "b_K")

    @property
    def b_V(self) -> Float[Tensor, "n_layers head d_head"]:
        return self._stack("attn", "b_V")

    @property
    def b_O(self) -> Float[Tensor, "n_layers d_model"]:
        return self._stack("attn", "b_O")

    @property
    def W_in(self) -> Float[Tensor, "n_layers d_model d_mlp"]:
        return self._stack("mlp", "W_in")

    @property
    def W_gate(self) -> Float[Tensor, "n_layers d_model d_mlp"]:
        return self._stack("mlp", "W_gate")

    @property
    def W_out(self) -> Float[Tensor, "n_layers d_mlp d_model"]:
        return self._stack("mlp", "W_out")

    @property
    def b_in(self) -> Float[Tensor, "n_layers d_mlp"]:
        return self._stack("mlp", "b_in")

    @property
    def b_out(self) -> Float[Tensor, "n_layers d_model"]:
        return self._stack("mlp", "b_out")

    @property
    def W_U(self) -> Float[Tensor, "d_model d_vocab_out"]:
        return self.unembed.W_U

    @property
    def b_U(self) -> Float[Tensor, "d_vocab_out"]:
        return self.unembed.b_U

    @property
    def QK(self) -> FactoredMatrix:
        """Every layer's ``W_Q W_K^T``, ``(n_layers, head)`` factored matrices."""
        return FactoredMatrix(self.W_Q, self.W_K.transpose(-2, -1))

    @property
    def OV(self) -> FactoredMatrix:
        """Every layer's ``W_V W_O``, ``(n_layers, head)`` factored matrices."""
        return FactoredMatrix(self.W_V, self.W_O)

    def accumulated_bias(self, layer: int, mlp_input: bool = False,
                         include_mlp_biases: bool = True) -> Float[Tensor, "d_model"]:
        """The sum of the output biases (``b_O``, and ``b_out`` unless ``include_mlp_biases`` is off) of the
        layers before ``layer``; with ``mlp_input``, ``layer``'s ``b_O`` too (``ActivationCache`` reads it)."""
        total = torch.zeros(self.cfg.d_model, device=self.cfg.device)
        for block in self.blocks[:layer]:
            total += block.attn.b_O
            if include_mlp_biases:
                total += block.mlp.b_out
        if mlp_input:
            if layer >= self.cfg.n_layers:
                raise ValueError("cannot include the attention bias of a layer beyond the last")
            total += self.blocks[layer].attn.b_O
        return total

    def all_head_labels(self) -> list[str]:
        return [f"L{layer}H{head}" for layer in range(self.cfg.n_layers) for head in range(self.cfg.n_heads)]
