"""Which variants the prover covers, and how, read from the variant declarations (:mod:`circuits.variants`).

Each :class:`~circuits.spec.VariantSpec` names its proof support: an :class:`~circuits.spec.ObligationSet`,
which :data:`PROVERS` maps to its implementation here (:mod:`analysis.proof.variant_proofs`; ``circuits/`` never
imports ``analysis/``), or a :class:`NoObligations` saying why no obligation applies; and whether the
finite-sharpness bound (:mod:`analysis.proof.bound`) is derived for it.
"""

from __future__ import annotations

from collections.abc import Callable

from analysis.proof.variant_proofs import prove_damped, prove_lloyd, prove_trimmed
from circuits.spec import NoObligations, ObligationSet
from circuits.variants import REGISTERED

__all__ = ["BOUNDED_VARIANTS", "OBLIGATION_SETS", "PROVERS", "NoObligations", "register"]

#: Obligation set -> prover (a function of the built circuit).
PROVERS: dict[ObligationSet, Callable] = {
    ObligationSet.LLOYD: prove_lloyd,
    ObligationSet.DAMPED: prove_damped,
    ObligationSet.TRIMMED: prove_trimmed,
}

#: Variant name -> prover, or why there is no obligation set.
OBLIGATION_SETS: dict[str, Callable | NoObligations] = {
    variant.name: PROVERS[variant.proof] if isinstance(variant.proof, ObligationSet) else variant.proof
    for variant in REGISTERED
}

#: Circuits the finite-sharpness bound (:mod:`analysis.proof.bound`) is derived for.
BOUNDED_VARIANTS = tuple(variant.name for variant in REGISTERED if variant.bounded)


def register(name: str, prover: Callable | NoObligations) -> None:
    """Add the obligations of a variant declared outside :data:`circuits.variants.REGISTERED` (or why it has none)."""
    OBLIGATION_SETS[name] = prover
