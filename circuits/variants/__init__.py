"""Registry of circuit variants: one name per algorithm, each built from the same residual layout.

The registry names builders by import path so that listing or validating a variant name (the command line does
this before any heavy import) never loads torch or TransformerLens.

A variant is selected by a *spec*: its name, optionally followed by parameters, ``NAME[:KEY=VALUE[,KEY=VALUE]]``,
e.g. ``soft``, ``soft:beta=100`` or ``trimmed:radius=0.3``. ``spec in VARIANTS`` is true for every valid spec, and
:func:`get_variant` returns the variant with those parameters bound.
"""

from __future__ import annotations

import importlib
import math
from dataclasses import dataclass, field, replace
from typing import Callable


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
    #: ``(params with defaults filled in, iterations) -> message or None``: limits that involve several parameters
    #: and the number of iterations, which no per-parameter bound can express.
    joint_limit: Callable[[dict, int], str | None] | None = None

    def build(self, d: int, k: int, iterations: int, **kwargs):
        module, function = self.builder.split(":")
        return getattr(importlib.import_module(module), function)(d, k, iterations, **{**self.params, **kwargs})

    @property
    def spec(self) -> str:
        if not self.params:
            return self.name
        # Integers in full: ``:g`` would print a seed of 2**40 as 1.09951e+12, which names another seed.
        return self.name + ":" + ",".join(f"{key}={value}" if isinstance(value, int) else f"{key}={value:g}"
                                          for key, value in self.params.items())


class VariantError(ValueError):
    """A spec that names no variant, or a parameter that is unknown, malformed or out of range (one line)."""


def _integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        pass
    number = float(text)  # "1e3" is an integer too; ValueError for text that is no number at all
    # Above 2**53 a float no longer holds every integer, so "1e17" may not be the seed the user meant.
    if not number.is_integer() or abs(number) > 2**53:
        raise VariantError("must be an integer")
    return int(number)


def _parse(spec: str) -> tuple[Variant, dict[str, float]]:
    name, _, rest = str(spec).partition(":")
    if name not in _VARIANTS:
        raise VariantError(f"unknown variant {name!r}; choose one of {', '.join(_VARIANTS)}")
    variant = _VARIANTS[name]
    allowed = ", ".join(variant.defaults) or "none"
    params: dict[str, float] = {}
    for item in filter(None, rest.split(",")):
        key, eq, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if key not in variant.defaults:
            raise VariantError(f"variant {name!r} has no parameter {key!r} (parameters: {allowed})")
        if not eq or not value:
            raise VariantError(f"variant {name!r}: parameter {key!r} needs a value, e.g. {name}:{key}={variant.defaults[key]}")
        if key in params:
            raise VariantError(f"variant {name!r}: parameter {key!r} is given twice")
        integral = isinstance(variant.defaults[key], int)
        try:
            number = _integer(value) if integral else float(value)
        except VariantError:
            raise VariantError(f"variant {name!r}: {key} must be an integer, got {value!r}") from None
        except ValueError:
            raise VariantError(f"variant {name!r}: {key}={value!r} is not a number") from None
        if key in variant.bounds:
            lo, hi, lo_in, hi_in = variant.bounds[key]
            if not ((lo <= number if lo_in else lo < number) and (number <= hi if hi_in else number < hi)):
                interval = f"{'[' if lo_in else '('}{lo:g}, {hi:g}{']' if hi_in else ')'}"
                raise VariantError(f"variant {name!r}: {key} must lie in {interval}, got {value}")
        params[key] = number
    return variant, params


def check_variant(spec: str, iterations: int) -> str:
    """The variant's name if ``spec`` is valid for a circuit of ``iterations`` iterations; else :class:`VariantError`."""
    variant, params = _parse(spec)
    if variant.joint_limit is not None:
        problem = variant.joint_limit({**variant.defaults, **params}, iterations)
        if problem:
            raise VariantError(f"variant {spec!r} with {iterations} iterations: {problem}")
    return variant.name


#: Largest stiffness a soft assign head takes: its scores ``beta * |x - c|^2`` (unit-scaled, up to 4) and their
#: differences must stay finite in float64 (max ~1.8e308) with room for the softmax's sums.
MAX_STIFFNESS = 1e250


def stiffness_overflow(beta: float, growth: float, iterations: int) -> str | None:
    """Why ``beta * growth**t`` for ``t <= iterations`` exceeds :data:`MAX_STIFFNESS`, or ``None``.

    Compared in logarithms: ``growth**iterations`` itself overflows (OverflowError) long before the product is
    compared, e.g. growth 1e6 over 60 iterations.
    """
    if growth <= 1 or iterations <= 0:
        peak_log = math.log10(beta)
    else:
        peak_log = math.log10(beta) + iterations * math.log10(growth)
    if peak_log > math.log10(MAX_STIFFNESS):
        return (f"the last stiffness beta * growth^T = 1e{peak_log:.1f} exceeds {MAX_STIFFNESS:g}"
                f" (its scores overflow float64); lower beta, growth or the iterations")
    return None


class _Registry(dict):
    """``{name: Variant}``; membership also accepts parameterised specs (``"soft:beta=10" in VARIANTS``)."""

    def __contains__(self, spec: object) -> bool:
        try:
            _parse(spec)  # type: ignore[arg-type]
        except (VariantError, TypeError):
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
        bounds={"beta": (0.0, MAX_STIFFNESS, False, True)},
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
        bounds={"beta": (0.0, MAX_STIFFNESS, False, True), "growth": (1.0, 1e6, True, True)},
        joint_limit=lambda p, iterations: stiffness_overflow(p["beta"], p["growth"], iterations),
        exact="float64 step by step (responsibilities to ~beta_t*eps)",
    ),
}

VARIANTS: dict[str, Variant] = _Registry(_VARIANTS)


def parse_variant(spec: str) -> tuple[str, dict[str, float]]:
    """``"soft:beta=10"`` -> ``("soft", {"beta": 10.0})``; raises :class:`VariantError` with a one-line message."""
    variant, params = _parse(spec)
    return variant.name, params


def get_variant(spec: str) -> Variant:
    """The variant named by ``spec``, with any parameters of the spec bound."""
    variant, params = _parse(spec)
    return replace(variant, params=params) if params else variant
