"""Registry of circuit variants: one name per algorithm, each built from the same residual layout.

The registry names builders by import path so that listing or validating a variant name (the command line does
this before any heavy import) never loads torch or TransformerLens.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass


@dataclass(frozen=True)
class Variant:
    name: str
    algorithm: str
    alteration: str
    builder: str  # "module:function" taking (d, k, iterations, dtype=...) and returning a KMeansCircuit

    def build(self, d: int, k: int, iterations: int, **kwargs):
        module, function = self.builder.split(":")
        return getattr(importlib.import_module(module), function)(d, k, iterations, **kwargs)


VARIANTS: dict[str, Variant] = {
    "lloyd": Variant(
        "lloyd",
        algorithm="Lloyd's k-means (hard assignment, mean update)",
        alteration="none: the exact construction",
        builder="circuits.build:build_lloyd_circuit",
    ),
}


def get_variant(name: str) -> Variant:
    try:
        return VARIANTS[name]
    except KeyError:
        raise KeyError(f"unknown variant {name!r}; choose one of {', '.join(VARIANTS)}") from None
