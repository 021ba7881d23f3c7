"""Lloyd's algorithm in the registry: :data:`circuits.spec.LLOYD` with its builder.

Lloyd's declaration (texts, reference, proof support) is :data:`circuits.spec.LLOYD`, the default spec of every
:class:`~circuits.build.KMeansCircuit`; its builder is :func:`circuits.build.build_lloyd_circuit`, which cannot
be named in :mod:`circuits.spec` (:mod:`circuits.build` imports it) and is imported at build time only
(:mod:`circuits.variants.base`: validating a spec never loads torch).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from circuits import spec
from circuits.sharpness import Sharpness

if TYPE_CHECKING:
    import torch

    from circuits.build import KMeansCircuit


def build_lloyd(d: int, k: int, iterations: int = 10, sharpness: Sharpness | None = None,
                dtype: torch.dtype | None = None, device: str = "cpu") -> KMeansCircuit:
    """:func:`circuits.build.build_lloyd_circuit` (``dtype`` ``None``: float64)."""
    import torch

    from circuits.build import build_lloyd_circuit

    return build_lloyd_circuit(d, k, iterations, sharpness=sharpness,
                               dtype=torch.float64 if dtype is None else dtype, device=device)


LLOYD = replace(spec.LLOYD, builder=build_lloyd)
