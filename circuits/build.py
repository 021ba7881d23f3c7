"""Turn weight blocks into a circuit: a state dict, run as plain torch modules or as a TransformerLens
``HookedTransformer``.

Stages: layout -> per-block :class:`~circuits.weights.BlockWeights` (numpy, see :mod:`circuits.blocks`) ->
state dict (:class:`CircuitWeights`: every parameter, checked finite) -> ``HookedTransformer``. The last stage is
lazy: :attr:`KMeansCircuit.model` builds the ``HookedTransformer`` when something first asks for it (the dense
path, the report views that run it, patching, the prover, a Python user), because TransformerLens takes seconds to
import; the structured path runs the same state dict as plain torch modules (:mod:`circuits.plain`). The model is
created with ``init_weights=False`` and every parameter is then loaded with ``load_state_dict(strict=True)``
(never ``load_and_process_state_dict``, which would fold and centre the weights); afterwards every parameter is
compared with what we meant to write and checked finite, so no uninitialised memory can survive.

Configuration: bidirectional attention, no normalisation, gated ReLU MLP, one head per block, no attention
scale (the sharpness lives in ``W_Q``). The model is a :class:`circuits.model.CircuitTransformer`: inputs enter
as residual vectors (``model(resid)``, the same as ``start_at_layer=0``), there is no token or positional
embedding (``d_vocab = 0``) and positions carry no information, so one model serves any number of points.
"""

from __future__ import annotations

import collections
import functools
from dataclasses import InitVar, dataclass, field
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
import torch
from jaxtyping import Float

from circuits import hook_names
from circuits.fingerprint import digest
from circuits.blocks import ASSIGN, UPDATE, assign_block, lloyd_schedule, unembed_matrix, update_block
from circuits.layout import ResidualLayout
from circuits.plain import CircuitConfig, PlainTransformer
from circuits.sharpness import Sharpness
from circuits.spec import LLOYD, VariantSpec
from circuits.structured import forward_hook_counts
from circuits.weights import BlockWeights

if TYPE_CHECKING:
    from circuits.model import CircuitTransformer


def circuit_config(layout: ResidualLayout, n_layers: int, d_head: int, d_mlp: int, d_vocab_out: int,
                   dtype: torch.dtype, device: str = "cpu", **overrides) -> CircuitConfig:
    """The settings of a constructed circuit's ``HookedTransformerConfig`` (:class:`~circuits.plain.CircuitConfig`;
    ``.transformer_lens()`` makes the real one); ``overrides`` let variants change one lever."""
    return CircuitConfig.of(**{**dict(n_layers=n_layers, d_model=layout.d_model, d_head=d_head, d_mlp=d_mlp,
                                      d_vocab_out=d_vocab_out, dtype=dtype, device=device), **overrides})


class WeightRangeError(ValueError):
    """A weight that float64 holds overflows the circuit's dtype: the knobs or a variant's parameters are too
    large for it (e.g. ``beta = 1e38`` in float32)."""


def _cast(a, dtype: torch.dtype, device: str | torch.device = "cpu") -> torch.Tensor:
    a = np.asarray(a)
    out = torch.as_tensor(a, dtype=dtype, device=device)
    if dtype.is_floating_point and not torch.isfinite(out).all() and np.isfinite(a).all():
        peak = float(np.abs(a).max())
        raise WeightRangeError(f"a weight of magnitude {peak:.3g} overflows {str(dtype).replace('torch.', '')} (largest"
                               f" {torch.finfo(dtype).max:.3g}): lower beta, beta_update or the variant's parameters,"
                               " or use float64")
    return out


def parameters_from_blocks(blocks: list[BlockWeights], W_U: Float[np.ndarray, "d_model d_vocab_out"],
                           dtype: torch.dtype, device: str | torch.device = "cpu") -> dict[str, torch.Tensor]:
    """Every parameter of the circuit's state dict, from our blocks (the model's buffers are added when it is
    built, :func:`state_dict_for`), made on ``device``."""
    d_head = max(b.head.d_head for b in blocks)
    d_mlp = max(b.mlp.d_mlp for b in blocks)
    d_model = W_U.shape[0]
    t = lambda a: _cast(a, dtype, device)  # noqa: E731
    zeros = functools.partial(torch.zeros, dtype=dtype, device=device)
    state: dict[str, torch.Tensor] = {}
    for layer, block in enumerate(blocks):
        head, mlp = block.head.padded(d_head), block.mlp.padded(d_mlp)
        p = lambda comp, name: hook_names.param(layer, comp, name)  # noqa: E731
        for name in ("W_Q", "W_K", "W_V", "W_O"):
            state[p("attn", name)] = t(getattr(head, name)[None])
        for bias in ("b_Q", "b_K", "b_V"):
            state[p("attn", bias)] = zeros(1, d_head)
        state[p("attn", "b_O")] = zeros(d_model)
        for name in ("W_gate", "W_in", "W_out"):
            state[p("mlp", name)] = t(getattr(mlp, name))
        state[p("mlp", "b_in")] = zeros(d_mlp)
        state[p("mlp", "b_out")] = zeros(d_model)
        for key, value in block.params.items():
            component, name = key.split(".", 1)
            value = np.asarray(value, dtype=np.float64)
            if component == "attn" and name.endswith("norm.w"):
                value = np.pad(value, (0, d_head - value.shape[0]))
            state[p(component, name)] = t(value)
    state[hook_names.UNEMBED_W] = t(W_U)
    state[hook_names.UNEMBED_B] = zeros(W_U.shape[1])
    check_finite(state)
    return state


def check_finite(state: dict[str, torch.Tensor]) -> None:
    """Every parameter is finite (a NaN or inf in a block would otherwise run)."""
    for name, value in state.items():
        if value.is_floating_point() and not torch.isfinite(value).all():
            raise RuntimeError(f"parameter {name} holds non-finite values")


def state_dict_for(parameters: dict[str, torch.Tensor], model) -> dict[str, torch.Tensor]:
    """``model``'s whole state dict: our ``parameters``, and its buffers.

    Buffers (the attention-mask placeholder, ``IGNORE``) are deterministic and copied from the model (the model has
    no token or positional embedding). Any other parameter we do not define is an error, so a TransformerLens
    upgrade that adds one cannot slip through with uninitialised values.
    """
    state = dict(parameters)
    buffers = dict(model.named_buffers())
    for key, value in model.state_dict().items():
        if key in state:
            continue
        if key in buffers:
            state[key] = value.clone()
        else:
            raise KeyError(f"the circuit does not define parameter {key!r}")
    return state


@dataclass(eq=False)
class CircuitWeights:
    """A circuit's weights before any model holds them: its config, its parameters (a state dict without the
    model's buffers, checked finite) and the permanent hooks that are part of its architecture.

    :meth:`plain` runs them as plain torch modules (no TransformerLens), :meth:`transformer` builds the
    ``HookedTransformer`` (strict load, every weight compared after loading, permanent hooks installed).
    """

    config: CircuitConfig
    parameters: dict[str, torch.Tensor] = field(repr=False)
    #: ``(hook name, function)``, installed with ``is_permanent=True`` on the ``HookedTransformer``.
    hooks: list[tuple[str, Callable]] = field(default_factory=list, repr=False)

    @classmethod
    def from_blocks(cls, blocks: list[BlockWeights], W_U: Float[np.ndarray, "d_model d_vocab_out"],
                    layout: ResidualLayout, dtype: torch.dtype = torch.float64, device: str = "cpu",
                    hooks: list[tuple[str, Callable]] | None = None, **cfg_overrides) -> CircuitWeights:
        if not blocks:
            raise ValueError("a circuit needs at least one block")
        cfg = circuit_config(
            layout, n_layers=len(blocks), d_head=max(b.head.d_head for b in blocks),
            d_mlp=max(b.mlp.d_mlp for b in blocks), d_vocab_out=W_U.shape[1], dtype=dtype, device=device,
            **cfg_overrides,
        )
        parameters = parameters_from_blocks(blocks, W_U, dtype, device)
        return cls(cfg, parameters, list(hooks or []))

    def plain(self, reuse: PlainTransformer | None = None) -> PlainTransformer | None:
        """The plain torch modules holding these parameters, or ``None`` when the config needs TransformerLens.
        ``reuse``'s modules serve where their parameters are these very tensors (:class:`PlainTransformer`)."""
        return PlainTransformer(self.config, self.parameters, reuse) if self.config.plain_supported else None

    def transformer(self, model_class: type | None = None) -> CircuitTransformer:
        """The :class:`~circuits.model.CircuitTransformer` (a ``HookedTransformer`` on residual input) whose every
        weight is one of ours (checked after loading), with the permanent hooks installed. ``model_class``
        :class:`circuits.hooked.model.HookedCircuit` builds that one instead (on TransformerLens 4.x it is the
        default; on 3.x the tests compare both)."""
        from circuits.model import CircuitTransformer  # imports TransformerLens: only here

        if model_class is None or model_class is CircuitTransformer:
            model = CircuitTransformer(self.config.transformer_lens())
        else:
            model = model_class(self.config)
        state = state_dict_for(self.parameters, model)
        model.load_state_dict(state, strict=True)
        check_loaded(model, state)
        model.eval()
        for name, fn in self.hooks:
            model.add_hook(name, fn, is_permanent=True)
        return model


def build_model(blocks: list[BlockWeights], W_U: Float[np.ndarray, "d_model d_vocab_out"], layout: ResidualLayout,
                dtype: torch.dtype = torch.float64, device: str = "cpu", **cfg_overrides) -> CircuitTransformer:
    """A :class:`~circuits.model.CircuitTransformer` (a ``HookedTransformer`` on residual input) whose every weight
    is the one given (checked after loading)."""
    return CircuitWeights.from_blocks(blocks, W_U, layout, dtype, device, **cfg_overrides).transformer()


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
    """A built circuit: its weights (run as a ``HookedTransformer`` on residual input, :attr:`model`, or as plain
    torch modules, :attr:`runnable`) plus what is needed to read it.

    ``schedule[layer]`` is the block kind at each layer. For the Lloyd schedule, layer ``2t`` (an update) leaves
    the centroids after ``t`` iterations in ``C`` and layer ``2t + 1`` (an assignment) leaves the points'
    assignment to those centroids in ``Y``.
    """

    #: The state dict, config and permanent hooks (``None`` for a circuit made around a given model,
    #: :meth:`from_model`).
    weights: CircuitWeights | None
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
    #: A circuit whose plain modules serve this one's wherever their parameters are the very same tensors
    #: (a circuit derived from another, ``dataclasses.replace(other, ..., plain_from=other)``); not a field.
    plain_from: InitVar[KMeansCircuit | None] = None

    def __post_init__(self, plain_from: KMeansCircuit | None) -> None:
        self._model: CircuitTransformer | None = None
        reuse = plain_from._plain if plain_from is not None else None
        self._plain: PlainTransformer | None = self.weights.plain(reuse) if self.weights is not None else None
        # The weights as built, by name, so that what later changed in them can be named (weight_edits).
        self._built: dict[str, bytes] = parameter_digests(self.weights.parameters) if self.weights is not None else {}

    @classmethod
    def from_model(cls, model: CircuitTransformer, *args, **kwargs) -> KMeansCircuit:
        """A circuit around a ``HookedTransformer`` built elsewhere (e.g. with a configuration of one's own)."""
        circuit = cls(None, *args, **kwargs)
        circuit._adopt(model)
        return circuit

    def _adopt(self, model: CircuitTransformer) -> None:
        # The model knows the circuit it belongs to, so that what TransformerLens hands back (an ActivationCache
        # holds only the model) leads to the layout and schedule that read it.
        model.kmeans_circuit = self
        self._model = model

    @property
    def model(self) -> CircuitTransformer:
        """The ``HookedTransformer`` (a :class:`~circuits.model.CircuitTransformer`), built from :attr:`weights`
        on first access (TransformerLens is imported then) and the same object afterwards."""
        if self._model is None:
            self._adopt(self.weights.transformer())
        return self._model

    @property
    def model_built(self) -> bool:
        """Whether :attr:`model` has been built (or given)."""
        return self._model is not None

    @property
    def runnable(self):
        """What the structured path runs: the ``HookedTransformer`` once it exists (so that its hooks and any edit
        of its weights count, as before), else the plain modules of the same state dict (no TransformerLens), else
        (a configuration the plain modules do not reproduce) the ``HookedTransformer``, built now."""
        if self._model is not None or self._plain is None:
            return self.model
        return self._plain

    def weight_edits(self) -> list[str]:
        """The parameters, by state-dict name, whose bits in what runs (:attr:`runnable`: the ``HookedTransformer``
        once it exists, else the state dict) differ from the weights as built, however they were changed (an edit
        through ``.data`` included: :mod:`circuits.fingerprint`). Empty for a circuit made around a given model,
        which has no weights as built to compare with."""
        if not self._built:
            return []
        running = self._model.state_dict() if self._model is not None else self.weights.parameters
        return list(changed_parameters(self._built, running))

    def added_hooks(self) -> list[str]:
        """The modules of the ``HookedTransformer`` (once it exists) carrying forward hooks beyond the circuit's own
        permanent ones (:attr:`hooks`), by name: hooks a user added, permanently or in a ``hooks()`` context, which
        run wherever the model runs (the structured path refuses them: :func:`circuits.structured.check_supported`)."""
        if self._model is None:
            return []
        own = collections.Counter(name for name, _ in self.hooks)
        return [name for name, registered in forward_hook_counts(self._model).items() if registered > own[name]]

    @property
    def config(self) -> CircuitConfig:
        """The configuration's settings (``model.cfg``'s names and values), without building the model."""
        return self.weights.config if self.weights is not None else CircuitConfig.of(
            **{f: getattr(self._model.cfg, f) for f in CircuitConfig.__dataclass_fields__ if f != "other"})

    @property
    def params(self) -> dict[str, float]:
        """The variant's parameters (empty for Lloyd)."""
        return dict(self.spec.params)

    @property
    def dtype(self) -> torch.dtype:
        return self.config.dtype

    @property
    def device(self) -> torch.device:
        """Where the circuit's weights live (and so where it runs)."""
        return torch.device(self.config.device)

    @property
    def n_layers(self) -> int:
        return len(self.schedule)

    def layers_of(self, kind: str) -> list[int]:
        return list(_layers_of(tuple(self.schedule), kind))

    @property
    def centroid_layers(self) -> list[int]:
        """``centroid_layers[t]``: the layer after which ``C`` holds the centroids of iteration ``t``."""
        return self.layers_of(UPDATE)

    @property
    def assignment_layers(self) -> list[int]:
        """``assignment_layers[t]``: the layer after which ``Y`` holds the assignment to centroids ``t``."""
        return self.layers_of(ASSIGN)


def parameter_digests(parameters: dict[str, torch.Tensor]) -> dict[str, bytes]:
    """:func:`circuits.fingerprint.digest` of each parameter, by name; a tensor under several names (tied layers)
    is read once."""
    by_tensor: dict[int, bytes] = {}
    out = {}
    for name, t in parameters.items():
        if id(t) not in by_tensor:
            by_tensor[id(t)] = digest(t)
        out[name] = by_tensor[id(t)]
    return out


def changed_parameters(built: dict[str, bytes], running) -> dict[str, bytes]:
    """The parameters named in ``built`` (:func:`parameter_digests` of the weights as built) whose bits in ``running``
    (name -> tensor) differ, in ``built``'s order, each with the digest of its bits now (a name ``running`` lacks
    counts as changed, with an empty digest). Only the named parameters are read."""
    now = parameter_digests({name: running[name] for name in built if name in running})
    return {name: now.get(name, b"") for name, digest_built in built.items() if now.get(name) != digest_built}


@functools.lru_cache(maxsize=256)
def _layers_of(schedule: tuple[str, ...], kind: str) -> tuple[int, ...]:
    """The layers of ``schedule`` that are ``kind`` blocks (cached: verification asks for them per layer)."""
    return tuple(layer for layer, k in enumerate(schedule) if k == kind)


def build_lloyd_circuit(d: int, k: int, iterations: int = 10, sharpness: Sharpness | None = None,
                        dtype: torch.dtype = torch.float64, device: str = "cpu") -> KMeansCircuit:
    """The exact Lloyd circuit for ``d``-dimensional points, ``k`` centroids and ``iterations`` steps."""
    sharp = sharpness if sharpness is not None else Sharpness()
    layout = ResidualLayout(d, k)
    schedule = lloyd_schedule(iterations)
    # Weights are tied across layers: one A and one U block, repeated.
    kinds = {ASSIGN: assign_block(layout, sharp), UPDATE: update_block(layout, sharp)}
    blocks = [kinds[kind] for kind in schedule]
    weights = CircuitWeights.from_blocks(blocks, unembed_matrix(layout), layout, dtype=dtype, device=device)
    return KMeansCircuit(weights, layout, schedule, sharp, iterations, "lloyd", blocks)
