"""Registry of circuit variants: one name per algorithm, each built from the same residual layout.

The registry names builders by import path so that listing or validating a variant name (the command line does
this before any heavy import) never loads torch or TransformerLens.

A variant is selected by a *spec*: its name, optionally followed by parameters, ``NAME[:KEY=VALUE[,KEY=VALUE]]``,
e.g. ``soft``, ``soft:beta=100`` or ``trimmed:radius=0.3``. ``spec in VARIANTS`` is true for every valid spec, and
:func:`get_variant` returns the variant with those parameters bound.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field, replace


@dataclass(frozen=True)
class Variant:
    name: str
    algorithm: str
    alteration: str
    builder: str  # "module:function" taking (d, k, iterations, sharpness=..., dtype=..., **params)
    #: Tunable parameters with their defaults (distances in unit-scaled squared distance, as the knobs).
    defaults: dict[str, float] = field(default_factory=dict)
    #: Parameters bound by a spec such as ``soft:beta=100``.
    params: dict[str, float] = field(default_factory=dict)
    exact: str = "exact"
    #: Allowed values per parameter: ``(low, high, low_inclusive, high_inclusive)``; builders check again.
    bounds: dict[str, tuple[float, float, bool, bool]] = field(default_factory=dict)

    def build(self, d: int, k: int, iterations: int, **kwargs):
        module, function = self.builder.split(":")
        return getattr(importlib.import_module(module), function)(d, k, iterations, **{**self.params, **kwargs})

    @property
    def spec(self) -> str:
        if not self.params:
            return self.name
        return self.name + ":" + ",".join(f"{key}={value:g}" for key, value in self.params.items())


def _parse(spec: str) -> tuple[Variant, dict[str, float]]:
    name, _, rest = str(spec).partition(":")
    if name not in _VARIANTS:
        raise KeyError(f"unknown variant {name!r}; choose one of {', '.join(_VARIANTS)}")
    variant = _VARIANTS[name]
    params: dict[str, float] = {}
    for item in filter(None, rest.split(",")):
        key, eq, value = item.partition("=")
        key = key.strip()
        if not eq or key not in variant.defaults:
            allowed = ", ".join(variant.defaults) or "none"
            raise KeyError(f"variant {name!r} has no parameter {key!r} (parameters: {allowed})")
        try:
            number = float(value)
        except ValueError:
            raise KeyError(f"variant {name!r}: {key}={value!r} is not a number") from None
        if isinstance(variant.defaults[key], int):
            if not number.is_integer():
                raise KeyError(f"variant {name!r}: {key} must be an integer, got {value!r}")
            number = int(number)
        if key in variant.bounds:
            lo, hi, lo_in, hi_in = variant.bounds[key]
            if not ((lo <= number if lo_in else lo < number) and (number <= hi if hi_in else number < hi)):
                interval = f"{'[' if lo_in else '('}{lo:g}, {hi:g}{']' if hi_in else ')'}"
                raise KeyError(f"variant {name!r}: {key} must lie in {interval}, got {value}")
        params[key] = number
    return variant, params


class _Registry(dict):
    """``{name: Variant}``; membership also accepts parameterised specs (``"soft:beta=10" in VARIANTS``)."""

    def __contains__(self, spec: object) -> bool:
        try:
            _parse(spec)  # type: ignore[arg-type]
        except (KeyError, TypeError):
            return False
        return True


_VARIANTS: dict[str, Variant] = {
    "lloyd": Variant(
        "lloyd",
        algorithm="Lloyd's k-means (hard assignment, mean update)",
        alteration="none: the exact construction",
        builder="circuits.build:build_lloyd_circuit",
    ),
    "soft": Variant(
        "soft",
        algorithm="soft k-means: responsibilities softmax_j(-beta |x - c_j|^2), responsibility-weighted means",
        alteration="finite temperature in the assign head; normalised linear attention (hook) in the update head",
        builder="circuits.variants.soft:build_soft_circuit",
        defaults={"beta": 30.0},
        bounds={"beta": (0.0, 1e250, False, True)},
        exact="float64 step by step (responsibilities to ~beta*eps)",
    ),
    "spherical": Variant(
        "spherical",
        algorithm="spherical k-means: unit points, cosine assignment, normalised-mean centroids",
        alteration="use_qk_norm=True (scores are cosines); points projected onto the unit sphere",
        builder="circuits.variants.spherical:build_spherical_circuit",
    ),
    "trimmed": Variant(
        "trimmed",
        algorithm="trimmed k-means: points farther than radius from every centroid are outliers, left out of the update",
        alteration="use_attention_sinks=True: sink logit -beta*radius^2 in the assign head",
        builder="circuits.variants.trimmed:build_trimmed_circuit",
        defaults={"radius": 0.5},
        bounds={"radius": (0.0, 4.0, False, True)},
    ),
    "sparse": Variant(
        "sparse",
        algorithm="hard assignment; centroid = sparsemax(-gamma |x_i - c_j|^2)-weighted average of the members",
        alteration="closeness scores and sparsemax attention (hook) in the update head",
        builder="circuits.variants.sparse:build_sparse_circuit",
        defaults={"gamma": 10.0},
        bounds={"gamma": (0.0, 1e6, True, True)},
        exact="float64 step by step (weights to ~(8 gamma + 16)*eps)",
    ),
    "gumbel": Variant(
        "gumbel",
        algorithm="hard assignment; centroid = one member drawn by Gumbel-max, probability softmax(-gamma |x_i - c_j|^2)",
        alteration="closeness scores and seeded Gumbel-max hard attention (hook) in the update head",
        builder="circuits.variants.gumbel:build_gumbel_circuit",
        defaults={"gamma": 0.0, "seed": 0},
        bounds={"gamma": (0.0, 1e6, True, True), "seed": (0, 2**63 - 1, True, True)},
    ),
    "damped": Variant(
        "damped",
        algorithm="damped Lloyd: c_j <- c_j + eta (mean_j - c_j)",
        alteration="partial erasure: the update MLP's commit units scaled by eta",
        builder="circuits.variants.damped:build_damped_circuit",
        defaults={"eta": 0.5},
        bounds={"eta": (0.0, 2.0, False, False)},
    ),
    "annealed": Variant(
        "annealed",
        algorithm="deterministic annealing: soft k-means with stiffness beta * growth^t at iteration t",
        alteration="per-layer (untied) temperature in the assign heads; linear attention (hook) in the update head",
        builder="circuits.variants.soft:build_annealed_circuit",
        defaults={"beta": 1.0, "growth": 2.0},
        bounds={"beta": (0.0, 1e250, False, True), "growth": (1.0, 1e6, True, True)},
        exact="float64 step by step (responsibilities to ~beta_t*eps)",
    ),
}

VARIANTS: dict[str, Variant] = _Registry(_VARIANTS)


def parse_variant(spec: str) -> tuple[str, dict[str, float]]:
    """``"soft:beta=10"`` -> ``("soft", {"beta": 10.0})``; raises ``KeyError`` with a one-line message."""
    variant, params = _parse(spec)
    return variant.name, params


def get_variant(spec: str) -> Variant:
    """The variant named by ``spec``, with any parameters of the spec bound."""
    variant, params = _parse(spec)
    return replace(variant, params=params) if params else variant
