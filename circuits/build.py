"""Turn weight blocks into a real TransformerLens ``HookedTransformer``.

Stages: layout -> per-block :class:`~circuits.weights.BlockWeights` (numpy, see :mod:`circuits.blocks`) ->
state dict -> ``HookedTransformer``. The model is created with ``init_weights=False`` and every parameter is then
loaded with ``load_state_dict(strict=True)`` (never ``load_and_process_state_dict``, which would fold and centre
the weights); afterwards every parameter is compared with what we meant to write and checked finite, so no
uninitialised memory can survive.

Configuration: bidirectional attention, no normalisation, gated ReLU MLP, one head per block, no attention
scale (the sharpness lives in ``W_Q``). The model is a :class:`circuits.model.CircuitTransformer`: inputs enter
as residual vectors (``model(resid)``, the same as ``start_at_layer=0``), there is no token or positional
embedding (``d_vocab = 0``) and positions carry no information, so one model serves any number of points.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import torch
from jaxtyping import Float

from circuits import hook_names
from circuits.blocks import ASSIGN, UPDATE, assign_block, lloyd_schedule, unembed_matrix, update_block
from circuits.layout import ResidualLayout
from circuits.sharpness import Sharpness
from circuits.spec import LLOYD, VariantSpec
from circuits.weights import BlockWeights

if TYPE_CHECKING:
    from circuits.model import CircuitTransformer


def _transformer_lens():
    # TransformerLens takes seconds to import; keep it out of module import so the CLI stays fast.
    from transformer_lens import HookedTransformerConfig

    from circuits.model import CircuitTransformer

    return CircuitTransformer, HookedTransformerConfig


def circuit_config(layout: ResidualLayout, n_layers: int, d_head: int, d_mlp: int, d_vocab_out: int,
                   dtype: torch.dtype, device: str = "cpu", **overrides):
    """The ``HookedTransformerConfig`` of a constructed circuit; ``overrides`` let variants change one lever."""
    _, HookedTransformerConfig = _transformer_lens()
    settings = dict(
        n_layers=n_layers,
        d_model=layout.d_model,
        d_head=d_head,
        n_heads=1,
        d_mlp=d_mlp,
        d_vocab=0,  # no vocabulary: the input is the residual stream
        d_vocab_out=d_vocab_out,
        n_ctx=1,  # CircuitTransformer records its real context, unlimited, once built
        act_fn="relu",
        gated_mlp=True,
        attention_dir="bidirectional",
        normalization_type=None,
        use_attn_scale=False,
        positional_embedding_type="standard",
        init_weights=False,
        dtype=dtype,
        device=device,
        default_prepend_bos=False,
    )
    settings.update(overrides)
    return HookedTransformerConfig(**settings)


class WeightRangeError(ValueError):
    """A weight that float64 holds overflows the circuit's dtype: the knobs or a variant's parameters are too
    large for it (e.g. ``beta = 1e38`` in float32)."""


def _cast(a, dtype: torch.dtype) -> torch.Tensor:
    a = np.asarray(a)
    out = torch.as_tensor(a, dtype=dtype)
    if dtype.is_floating_point and not torch.isfinite(out).all() and np.isfinite(a).all():
        peak = float(np.abs(a).max())
        raise WeightRangeError(f"a weight of magnitude {peak:.3g} overflows {str(dtype).replace('torch.', '')} (largest"
                               f" {torch.finfo(dtype).max:.3g}): lower beta, beta_update or the variant's parameters,"
                               " or use float64")
    return out


def state_dict_from_blocks(
    blocks: list[BlockWeights], W_U: Float[np.ndarray, "d_model d_vocab_out"], model, dtype: torch.dtype,
) -> dict[str, torch.Tensor]:
    """Every entry of ``model``'s state dict, from our blocks.

    Buffers (the attention-mask placeholder, ``IGNORE``) are deterministic and copied from the model (the model has
    no token or positional embedding). Any other parameter we do not define is an error, so a TransformerLens
    upgrade that adds one cannot slip through with uninitialised values.
    """
    d_head = max(b.head.d_head for b in blocks)
    d_mlp = max(b.mlp.d_mlp for b in blocks)
    d_model = W_U.shape[0]
    t = lambda a: _cast(a, dtype)  # noqa: E731
    state: dict[str, torch.Tensor] = {}
    for layer, block in enumerate(blocks):
        head, mlp = block.head.padded(d_head), block.mlp.padded(d_mlp)
        p = lambda comp, name: hook_names.param(layer, comp, name)  # noqa: E731
        for name in ("W_Q", "W_K", "W_V", "W_O"):
            state[p("attn", name)] = t(getattr(head, name)[None])
        for bias in ("b_Q", "b_K", "b_V"):
            state[p("attn", bias)] = torch.zeros(1, d_head, dtype=dtype)
        state[p("attn", "b_O")] = torch.zeros(d_model, dtype=dtype)
        for name in ("W_gate", "W_in", "W_out"):
            state[p("mlp", name)] = t(getattr(mlp, name))
        state[p("mlp", "b_in")] = torch.zeros(d_mlp, dtype=dtype)
        state[p("mlp", "b_out")] = torch.zeros(d_model, dtype=dtype)
        for key, value in block.params.items():
            component, name = key.split(".", 1)
            value = np.asarray(value, dtype=np.float64)
            if component == "attn" and name.endswith("norm.w"):
                value = np.pad(value, (0, d_head - value.shape[0]))
            state[p(component, name)] = t(value)
    state[hook_names.UNEMBED_W] = t(W_U)
    state[hook_names.UNEMBED_B] = torch.zeros(W_U.shape[1], dtype=dtype)
    buffers = dict(model.named_buffers())
    for key, value in model.state_dict().items():
        if key in state:
            continue
        if key in buffers:
            state[key] = value.clone()
        else:
            raise KeyError(f"the circuit does not define parameter {key!r}")
    return state


def build_model(blocks: list[BlockWeights], W_U: Float[np.ndarray, "d_model d_vocab_out"], layout: ResidualLayout,
                dtype: torch.dtype = torch.float64, device: str = "cpu", **cfg_overrides):
    """A :class:`~circuits.model.CircuitTransformer` (a ``HookedTransformer`` on residual input) whose every weight
    is the one given (checked after loading)."""
    CircuitTransformer, _ = _transformer_lens()
    if not blocks:
        raise ValueError("a circuit needs at least one block")
    cfg = circuit_config(
        layout, n_layers=len(blocks), d_head=max(b.head.d_head for b in blocks), d_mlp=max(b.mlp.d_mlp for b in blocks),
        d_vocab_out=W_U.shape[1], dtype=dtype, device=device, **cfg_overrides,
    )
    model = CircuitTransformer(cfg)
    state = state_dict_from_blocks(blocks, W_U, model, dtype)
    model.load_state_dict(state, strict=True)
    check_loaded(model, state)
    model.eval()
    return model


def check_loaded(model, state: dict[str, torch.Tensor]) -> None:
    """Every parameter is finite and equal to what we wrote: nothing of ``torch.empty`` survives."""
    loaded = model.state_dict()
    for name, param in model.named_parameters():
        if not torch.isfinite(param).all():
            raise RuntimeError(f"parameter {name} holds non-finite values after loading")
    for name, value in loaded.items():
        if not torch.equal(value, state[name].to(value.device)):
            raise RuntimeError(f"{name} differs from the constructed weight after loading")


@dataclass
class KMeansCircuit:
    """A built circuit: the model (a ``HookedTransformer`` on residual input) plus what is needed to read it.

    ``schedule[layer]`` is the block kind at each layer. For the Lloyd schedule, layer ``2t`` (an update) leaves
    the centroids after ``t`` iterations in ``C`` and layer ``2t + 1`` (an assignment) leaves the points'
    assignment to those centroids in ``Y``.
    """

    model: CircuitTransformer
    layout: ResidualLayout
    schedule: list[str]
    sharpness: Sharpness
    iterations: int
    variant: str = "lloyd"
    blocks: list[BlockWeights] = field(default_factory=list, repr=False)
    #: What the circuit computes (:class:`circuits.spec.VariantSpec`): parameters, reference algorithm, input map
    #: and readout; :data:`circuits.spec.LLOYD` for the exact construction.
    spec: VariantSpec = field(default_factory=lambda: LLOYD, repr=False)
    #: Permanent TransformerLens hooks that are part of the architecture: ``(hook name, what it does)``.
    hooks: list[tuple[str, str]] = field(default_factory=list)
    #: The functions of the permanent ``hook_attn_scores`` hooks by layer, for execution paths that do not run
    #: TransformerLens hooks (:mod:`circuits.structured` uses their ``structured`` counterpart).
    score_hooks: dict[int, object] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        # The model knows the circuit it belongs to, so that what TransformerLens hands back (an ActivationCache
        # holds only the model) leads to the layout and schedule that read it.
        self.model.kmeans_circuit = self

    @property
    def params(self) -> dict[str, float]:
        """The variant's parameters (empty for Lloyd)."""
        return dict(self.spec.params)

    @property
    def dtype(self) -> torch.dtype:
        return self.model.cfg.dtype

    @property
    def n_layers(self) -> int:
        return len(self.schedule)

    def layers_of(self, kind: str) -> list[int]:
        return [layer for layer, k in enumerate(self.schedule) if k == kind]

    @property
    def centroid_layers(self) -> list[int]:
        """``centroid_layers[t]``: the layer after which ``C`` holds the centroids of iteration ``t``."""
        return self.layers_of(UPDATE)

    @property
    def assignment_layers(self) -> list[int]:
        """``assignment_layers[t]``: the layer after which ``Y`` holds the assignment to centroids ``t``."""
        return self.layers_of(ASSIGN)


def build_lloyd_circuit(d: int, k: int, iterations: int = 10, sharpness: Sharpness | None = None,
                        dtype: torch.dtype = torch.float64, device: str = "cpu") -> KMeansCircuit:
    """The exact Lloyd circuit for ``d``-dimensional points, ``k`` centroids and ``iterations`` steps."""
    sharp = sharpness if sharpness is not None else Sharpness()
    layout = ResidualLayout(d, k)
    schedule = lloyd_schedule(iterations)
    # Weights are tied across layers: one A and one U block, repeated.
    kinds = {ASSIGN: assign_block(layout, sharp), UPDATE: update_block(layout, sharp)}
    blocks = [kinds[kind] for kind in schedule]
    model = build_model(blocks, unembed_matrix(layout), layout, dtype=dtype, device=device)
    return KMeansCircuit(model, layout, schedule, sharp, iterations, "lloyd", blocks)
