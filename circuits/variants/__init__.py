"""The registry of circuit variants: the list of their declarations, and the parsing of variant specs.

Each variant is one :class:`~circuits.spec.VariantSpec` declared in its own module (texts, parameters with
defaults, types and bounds, builder, reference, proof support); :data:`REGISTERED` lists them, one line each.
Importing them never loads torch or TransformerLens (builders import them when they build), so listing and
validating specs, which the command line does before any heavy import, stays fast.

A variant is selected by a *spec*: its name, optionally followed by parameters, ``NAME[:KEY=VALUE[,KEY=VALUE]]``,
e.g. ``soft``, ``soft:beta=100`` or ``trimmed:radius=0.3``. ``spec in VARIANTS`` is true for every valid spec, and
:func:`get_variant` returns the variant with those parameters bound.
"""

from __future__ import annotations

from circuits.spec import VariantSpec
from circuits.variants.damped import DAMPED
from circuits.variants.distractor import DISTRACTOR
from circuits.variants.gumbel import GUMBEL
from circuits.variants.lloyd import LLOYD
from circuits.variants.soft import ANNEALED, MAX_STIFFNESS, SOFT, stiffness_overflow
from circuits.variants.sparse import SPARSE
from circuits.variants.spherical import SPHERICAL
from circuits.variants.trimmed import TRIMMED

__all__ = ["MAX_STIFFNESS", "REGISTERED", "VARIANTS", "VariantError", "check_variant", "get_variant",
           "parse_variant", "stiffness_overflow"]

#: Every variant, in the order the command line and the docs list them.
REGISTERED: tuple[VariantSpec, ...] = (
    LLOYD,
    SOFT,
    SPHERICAL,
    TRIMMED,
    SPARSE,
    GUMBEL,
    DAMPED,
    ANNEALED,
    DISTRACTOR,
)


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


def _parse(spec: str) -> tuple[VariantSpec, dict[str, float]]:
    name, _, rest = str(spec).partition(":")
    if name not in _VARIANTS:
        raise VariantError(f"unknown variant {name!r}; choose one of {', '.join(_VARIANTS)}")
    variant = _VARIANTS[name]
    declared = {p.name: p for p in variant.parameters}
    allowed = ", ".join(declared) or "none"
    params: dict[str, float] = {}
    for item in filter(None, rest.split(",")):
        key, eq, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if key not in declared:
            raise VariantError(f"variant {name!r} has no parameter {key!r} (parameters: {allowed})")
        param = declared[key]
        if not eq or not value:
            raise VariantError(f"variant {name!r}: parameter {key!r} needs a value, e.g. {name}:{key}={param.default}")
        if key in params:
            raise VariantError(f"variant {name!r}: parameter {key!r} is given twice")
        try:
            number = _integer(value) if param.integral else float(value)
        except VariantError:
            raise VariantError(f"variant {name!r}: {key} must be an integer, got {value!r}") from None
        except ValueError:
            raise VariantError(f"variant {name!r}: {key}={value!r} is not a number") from None
        if not param.contains(number):
            raise VariantError(f"variant {name!r}: {key} must lie in {param.interval}, got {value}")
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


class _Registry(dict):
    """``{name: VariantSpec}``; membership also accepts parameterised specs (``"soft:beta=10" in VARIANTS``)."""

    def __contains__(self, spec: object) -> bool:
        try:
            _parse(spec)  # type: ignore[arg-type]
        except (VariantError, TypeError):
            return False
        return True


_VARIANTS: dict[str, VariantSpec] = {variant.name: variant for variant in REGISTERED}
VARIANTS: dict[str, VariantSpec] = _Registry(_VARIANTS)


def parse_variant(spec: str) -> tuple[str, dict[str, float]]:
    """``"soft:beta=10"`` -> ``("soft", {"beta": 10.0})``; raises :class:`VariantError` with a one-line message."""
    variant, params = _parse(spec)
    return variant.name, params


def get_variant(spec: str) -> VariantSpec:
    """The variant named by ``spec``, with any parameters of the spec bound (:meth:`VariantSpec.build` fills in
    the declared defaults of the others)."""
    variant, params = _parse(spec)
    return variant.with_params(params)
