"""The circuit's weights as plain torch modules, for running them without TransformerLens.

TransformerLens takes seconds to import, and the structured execution path (:mod:`circuits.structured`) needs none
of it: it reads the weight tensors, the attention levers of the configuration and the permanent score hooks, and
computes everything else itself. A :class:`PlainTransformer` holds exactly that, read from the same state dict that
the ``HookedTransformer`` is loaded from (:class:`circuits.build.CircuitWeights`); its parameters *are* the state
dict's tensors. So ``kmeans-circuits cluster`` runs the circuit without importing TransformerLens, and
``KMeansCircuit.model`` builds the ``HookedTransformer`` only when something asks for it.

The modules mirror the TransformerLens attributes the structured path reads, with the same meaning:

* ``model.cfg``: a :class:`CircuitConfig`, the circuit's ``HookedTransformerConfig`` settings (the same names and
  values; :meth:`CircuitConfig.transformer_lens` makes the real one);
* ``model.blocks[i].attn``: ``W_Q``, ``W_K``, ``W_V`` ``(1, d_model, d_head)``, ``W_O`` ``(1, d_head, d_model)``,
  ``b_Q``, ``b_K``, ``b_V`` ``(1, d_head)``, ``b_O`` ``(d_model,)``, ``sinks`` ``(1,)`` with attention sinks,
  ``q_norm``/``k_norm`` (:class:`PlainRMSNorm`, or ``None`` without qk-norm), ``attn_scale`` and ``cfg``;
* ``model.blocks[i].mlp``: ``W_gate``, ``W_in`` ``(d_model, d_mlp)``, ``b_in`` ``(d_mlp,)``, ``W_out``
  ``(d_mlp, d_model)``, ``b_out`` ``(d_model,)``; ``ln1``/``ln2`` are the identity (no normalisation);
* ``model.unembed(x)``: ``x @ W_U + b_U``, computed as TransformerLens' ``Unembed`` computes it.

There are no hook points: a plain model runs no hooks but the circuit's score hooks, which the structured path
applies itself. Configurations the plain modules do not reproduce (any TransformerLens setting beyond those of
:class:`CircuitConfig`) have no plain model (:meth:`CircuitConfig.plain_supported`); they run on the
``HookedTransformer``.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field, fields

import torch
import torch.nn.functional as F
from jaxtyping import Float
from torch import Tensor, nn

from circuits import hook_names


@dataclass
class CircuitConfig:
    """The settings of a circuit's ``HookedTransformerConfig``, under the same names, without TransformerLens.

    The defaults are the construction's (:func:`circuits.build.circuit_config`) and, for the levers variants turn
    (``use_qk_norm``, ``eps``, ``use_attention_sinks``, ``use_attn_scale``) and the settings the structured path
    checks, TransformerLens' own defaults (``tests/unit/test_plain.py`` compares every field with the real config).
    ``other`` holds any further ``HookedTransformerConfig`` setting a caller passes; the plain modules do not
    reproduce those, so such a circuit has no plain model.
    """

    n_layers: int
    d_model: int
    d_head: int
    d_mlp: int
    d_vocab_out: int
    dtype: torch.dtype = torch.float64
    device: str = "cpu"
    n_heads: int = 1
    d_vocab: int = 0  # no vocabulary: the input is the residual stream
    n_ctx: int = 1  # CircuitTransformer records its real context, unlimited, once built
    act_fn: str = "relu"
    gated_mlp: bool = True
    attention_dir: str = "bidirectional"
    normalization_type: str | None = None
    use_attn_scale: bool = False
    positional_embedding_type: str = "standard"
    init_weights: bool = False
    default_prepend_bos: bool = False
    use_qk_norm: bool = False
    eps: float = 1e-5
    use_attention_sinks: bool = False
    n_key_value_heads: int | None = None
    parallel_attn_mlp: bool = False
    attn_only: bool = False
    other: dict = field(default_factory=dict)

    @classmethod
    def of(cls, **settings) -> CircuitConfig:
        """A config from ``HookedTransformerConfig`` keyword arguments: the ones not named here go to ``other``."""
        names = {f.name for f in fields(cls)} - {"other"}
        return cls(**{k: v for k, v in settings.items() if k in names},
                   other={k: v for k, v in settings.items() if k not in names})

    def settings(self) -> dict:
        """Every setting as ``HookedTransformerConfig`` keyword arguments."""
        own = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "other"}
        return {**own, **self.other}

    def transformer_lens(self):
        """The config :class:`circuits.model.CircuitTransformer` takes (imports TransformerLens): a
        ``HookedTransformerConfig`` on TransformerLens 3.x; on 4.x, which has none, a copy of this config (the
        model, :class:`circuits.hooked.model.HookedCircuit`, makes its ``HookedCircuitConfig`` from it)."""
        from circuits import tl

        if tl.TL_MAJOR >= 4:
            return CircuitConfig.of(**self.settings())
        return tl.HookedTransformerConfig(**self.settings())

    @property
    def plain_supported(self) -> bool:
        """The plain modules reproduce this configuration: no normalisation, gated ReLU MLP, one head per block, the
        levers of this class and nothing in ``other``."""
        return (not self.other and self.normalization_type is None and self.gated_mlp and self.act_fn == "relu"
                and self.n_heads == 1 and self.n_key_value_heads is None and not self.parallel_attn_mlp
                and not self.attn_only and self.positional_embedding_type == "standard")


def _fixed(value: Tensor) -> nn.Parameter:
    # The parameter is the state dict's tensor itself (no copy), so the plain model runs exactly what was checked.
    return nn.Parameter(value, requires_grad=False)


class PlainRMSNorm(nn.Module):
    """TransformerLens' ``RMSNorm`` (qk-norm), the same arithmetic: ``x / sqrt(mean(x^2) + eps) * w``."""

    def __init__(self, w: Tensor, eps: float, dtype: torch.dtype):
        super().__init__()
        self.w, self.eps, self.dtype = _fixed(w), eps, dtype

    def forward(self, x: Float[Tensor, "*lead length"]) -> Float[Tensor, "*lead length"]:
        if self.dtype not in (torch.float32, torch.float64):
            x = x.to(torch.float32)
        scale = (x.pow(2).mean(-1, keepdim=True) + self.eps).sqrt()
        return (x / scale).to(self.dtype) * self.w


class PlainAttention(nn.Module):
    """One head's weights and levers (see the module docstring)."""

    def __init__(self, cfg: CircuitConfig, take):
        super().__init__()
        self.cfg = cfg
        for name in ("W_Q", "W_K", "W_V", "W_O", "b_Q", "b_K", "b_V", "b_O"):
            setattr(self, name, _fixed(take(name)))
        # As TransformerLens: the scores are divided by sqrt(d_head) only with use_attn_scale.
        self.attn_scale = math.sqrt(cfg.d_head) if cfg.use_attn_scale else 1.0
        if cfg.use_attention_sinks:
            self.sinks = _fixed(take("sinks"))
        self.q_norm = PlainRMSNorm(take("q_norm.w"), cfg.eps, cfg.dtype) if cfg.use_qk_norm else None
        self.k_norm = PlainRMSNorm(take("k_norm.w"), cfg.eps, cfg.dtype) if cfg.use_qk_norm else None


class PlainMLP(nn.Module):
    """A gated MLP's weights."""

    def __init__(self, take):
        super().__init__()
        for name in ("W_gate", "W_in", "b_in", "W_out", "b_out"):
            setattr(self, name, _fixed(take(name)))


class PlainBlock(nn.Module):
    """A block: its attention and MLP modules (made by :func:`_blocks`, which shares them between tied layers)."""

    def __init__(self, attn: PlainAttention, mlp: PlainMLP):
        super().__init__()
        self.ln1, self.ln2 = nn.Identity(), nn.Identity()
        self.attn, self.mlp = attn, mlp


class PlainUnembed(nn.Module):
    def __init__(self, W_U: Tensor, b_U: Tensor):
        super().__init__()
        self.W_U, self.b_U = _fixed(W_U), _fixed(b_U)

    def forward(self, residual: Float[Tensor, "batch pos d_model"]) -> Float[Tensor, "batch pos d_vocab_out"]:
        # As TransformerLens' Unembed computes it, so that both models give the same logits bit for bit.
        return F.linear(residual, self.W_U.T.contiguous(), self.b_U)


class PlainTransformer(nn.Module):
    """The circuit's weights in plain torch modules (see the module docstring); run by
    :func:`circuits.structured.structured_forward`, never called directly."""

    def __init__(self, cfg: CircuitConfig, state: dict[str, Tensor], reuse: PlainTransformer | None = None):
        super().__init__()
        if not cfg.plain_supported:
            raise ValueError(f"no plain model reproduces this configuration ({sorted(cfg.other) or cfg})")
        self.cfg = cfg
        unused = dict(state)

        def take(key: str) -> Tensor:
            if key not in unused:
                raise KeyError(f"the state dict lacks {key!r}")
            return unused.pop(key)

        # reuse's components serve here only if they were made with the same levers (n_layers aside, which no
        # component reads).
        shared = reuse._components if reuse is not None and _same_levers(reuse.cfg, cfg) else {}
        blocks, self._components = _blocks(cfg, state, take, shared)
        self.blocks = nn.ModuleList(blocks)
        self.unembed = PlainUnembed(take(hook_names.UNEMBED_W), take(hook_names.UNEMBED_B))
        # As load_state_dict(strict=True): every entry is used.
        if unused:
            raise KeyError(f"the plain model has no parameter {next(iter(unused))!r}")


#: Every parameter a block's attention and MLP may hold, by component (which ones it holds depends on the config).
_COMPONENT_PARAMETERS = {
    "attn": ("W_Q", "W_K", "W_V", "W_O", "b_Q", "b_K", "b_V", "b_O", "sinks", "q_norm.w", "k_norm.w"),
    "mlp": ("W_gate", "W_in", "b_in", "W_out", "b_out"),
}


def _same_levers(a: CircuitConfig, b: CircuitConfig) -> bool:
    """Whether configs ``a`` and ``b`` agree on everything but ``n_layers``."""
    return a is b or all(getattr(a, f.name) == getattr(b, f.name) for f in fields(a) if f.name != "n_layers")


@functools.lru_cache(maxsize=4096)
def _component_names(layer: int, component: str) -> tuple[str, ...]:
    """The state-dict names of every parameter ``component`` (``"attn"``/``"mlp"``) of ``layer`` may hold."""
    return tuple(hook_names.param(layer, component, name) for name in _COMPONENT_PARAMETERS[component])


def _blocks(cfg: CircuitConfig, state: dict[str, Tensor], take, shared: dict) -> tuple[list[PlainBlock], dict]:
    """One :class:`PlainBlock` per layer. Layers whose attention (MLP) parameters are the very same tensors share
    one attention (MLP) module, and so do blocks of the same two modules: a deep tied circuit (such as
    :func:`analysis.estimator.with_assign_knobs` derives) costs two blocks to make, and the structured path finds
    its plans on the modules themselves. ``shared`` holds components of another plain model that serve wherever
    their tensors are this state dict's own. Returns the blocks by layer and the components they use,
    ``(component, tensor ids) -> (tensors, module)`` (what a later model passes as ``shared``)."""
    made, used = dict(shared), {}
    blocks: dict[tuple, PlainBlock] = {}
    out = []
    for layer in range(cfg.n_layers):
        parts = []
        for component in ("attn", "mlp"):
            names = _component_names(layer, component)
            tensors = tuple(map(state.get, names))
            # Tensors by identity: equal values in different tensors are not shared. The entry keeps the tensors
            # alive, so their ids cannot be reused by other tensors while it exists.
            key = (component, tuple(map(id, tensors)))
            if key not in made:
                own = lambda name, layer=layer, component=component: take(hook_names.param(layer, component, name))
                module = PlainAttention(cfg, own) if component == "attn" else PlainMLP(own)
                made[key] = (tensors, module)
            else:
                for name, tensor in zip(names, tensors):
                    if tensor is not None:
                        take(name)
            used[key] = made[key]
            parts.append(made[key][1])
        pair = tuple(map(id, parts))
        if pair not in blocks:
            blocks[pair] = PlainBlock(*parts)
        out.append(blocks[pair])
    return out, used
