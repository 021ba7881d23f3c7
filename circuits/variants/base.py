"""What every variant circuit shares: its assembly, and small MLP pieces several variants use.

A variant is the Lloyd circuit with one recognisable change, declared by a :class:`circuits.spec.VariantSpec`.
:func:`assemble` turns a list of blocks into a :class:`~circuits.build.KMeansCircuit` with the variant's permanent
hooks: they are part of the architecture, like a choice of attention normalisation; on the ``HookedTransformer``
they survive ``run_with_cache`` and ``model.hooks()`` (which only remove non-permanent hooks).

torch (and with it :mod:`circuits.build`) is imported when a circuit is built, not when this package is: listing
and validating variant specs, which the command line does before any heavy import, must not load it.
"""

from __future__ import annotations

from dataclasses import replace
from collections.abc import Callable
from typing import TYPE_CHECKING

from circuits.blocks import lloyd_schedule, unembed_matrix
from circuits.layout import ResidualLayout
from circuits.sharpness import Sharpness
from circuits.spec import VariantSpec
from circuits.weights import BlockWeights, MLPBuilder

if TYPE_CHECKING:
    import torch

    from circuits.build import KMeansCircuit

#: Subspace holding |x|^2 on point tokens, for variants whose scores need the full squared distance.
NX = ("NX", 1)


def nx_units(mlp: MLPBuilder) -> None:
    """``NX <- |X|^2`` on every token (0 off points): gated units square exactly, ``relu(NX)`` erases the old value."""
    d = mlp.layout.d
    for m in range(d):
        mlp.unit(gate={("X", m): 1.0}, linear={("X", m): 1.0}, output={("NX", 0): 1.0})
        mlp.unit(gate={("X", m): -1.0}, linear={("X", m): -1.0}, output={("NX", 0): 1.0})
    mlp.unit(gate={("NX", 0): 1.0}, linear={("ONE", 0): 1.0}, output={("NX", 0): -1.0})


def unit_sharpness(sharpness: Sharpness | None, **changes) -> Sharpness:
    base = sharpness if sharpness is not None else Sharpness()
    return replace(base, **changes) if changes else base


def finfo(dtype: torch.dtype | None):
    """``torch.finfo`` of a circuit's dtype (``None``: float64, the default of every builder)."""
    import torch  # at build time only (module docstring)

    return torch.finfo(torch.float64 if dtype is None else dtype)


def assemble(spec: VariantSpec, layout: ResidualLayout, blocks: list[BlockWeights], iterations: int,
             sharpness: Sharpness, dtype: torch.dtype | None = None, device: str = "cpu",
             hooks: dict[int, tuple[str, Callable, str]] | None = None, **cfg_overrides) -> KMeansCircuit:
    """The circuit of ``blocks`` (schedule ``U A ... U A``; ``dtype`` ``None``: float64) with its permanent hooks,
    ``hooks[layer] = (hook name, function, description)``: installed on the ``HookedTransformer`` when it is built,
    applied by the structured path to the plain modules (:class:`~circuits.build.CircuitWeights`)."""
    import torch  # at build time only (module docstring)

    from circuits.build import CircuitWeights, KMeansCircuit

    schedule = lloyd_schedule(iterations)
    if [b.kind for b in blocks] != schedule:
        raise ValueError(f"blocks {[b.kind for b in blocks]} do not follow the schedule {schedule}")
    dtype = torch.float64 if dtype is None else dtype
    ordered = sorted((hooks or {}).items())
    weights = CircuitWeights.from_blocks(blocks, unembed_matrix(layout), layout, dtype=dtype, device=device,
                                         hooks=[(name, fn) for _, (name, fn, _) in ordered], **cfg_overrides)
    described = [(name, description) for _, (name, _, description) in ordered]
    score_hooks = {layer: fn for layer, (_, fn, _) in ordered}
    return KMeansCircuit(weights, layout, schedule, sharpness, iterations, spec.name, blocks, spec=spec, hooks=described,
                         score_hooks=score_hooks)
