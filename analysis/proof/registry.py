"""Which variants the prover covers, and how: the obligation sets and the variants with a sharpness bound.

Exact variants map to a prover (:mod:`analysis.proof.variant_proofs`); the others to a :class:`NoObligations`
saying why no obligation applies. Kept in one small module so that the entries can move onto the variant objects
(:mod:`circuits.variants`) in one step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from analysis.proof.variant_proofs import prove_damped, prove_lloyd, prove_trimmed


@dataclass(frozen=True)
class NoObligations:
    """A variant without an obligation set: soft by design (``N/A``, no hardmax theorem to prove), or claimed exact
    but not covered by the prover (``NOT PROVEN``, which fails: exactness is a claim that needs a certificate)."""

    reason: str
    exact: bool


SOFT_BY_DESIGN = ("soft by design, so there is no hardmax theorem to prove (its attention is a finite-temperature"
               " softmax, transcendental, outside exact rational arithmetic); the circuit is held to its own reference"
               " within float64 rounding by `kmeans-circuits cluster --variant {name}`, block by block")

#: Variant name -> prover (a function of the built circuit), or why there is no obligation set.
OBLIGATION_SETS: dict[str, Callable | NoObligations] = {
    "lloyd": prove_lloyd,
    "damped": prove_damped,
    "trimmed": prove_trimmed,
    "soft": NoObligations("soft k-means: finite temperature is the algorithm; " + SOFT_BY_DESIGN.format(name="soft"), False),
    "annealed": NoObligations("deterministic annealing: soft assignments at every temperature; "
                              + SOFT_BY_DESIGN.format(name="annealed"), False),
    "sparse": NoObligations(
        "sparsemax-weighted k-means normalises its update with a Python hook on hook_attn_scores, not with weights;"
        " obligations on the state dict cannot cover it, so it is not proven here (the verifier checks its weights"
        " against the reference's sparsemax)", True),
    "spherical": NoObligations(
        "spherical k-means runs its scores through RMSNorm (use_qk_norm: q / sqrt(mean(q^2) + eps)), which is neither"
        " polynomial nor exactly a normalisation (eps); no obligation set covers it yet, so it is not proven here"
        " (the verifier checks it numerically)", True),
    "gumbel": NoObligations(
        "Gumbel k-means draws its update with a Python hook on hook_attn_scores, not with weights; obligations on the"
        " state dict cannot cover it, so it is not proven here (the verifier checks it draw for draw)", True),
}

#: Circuits the finite-sharpness bound (:mod:`analysis.proof.bound`) is derived for.
BOUNDED_VARIANTS = ("lloyd", "damped", "trimmed")


def register(name: str, prover: Callable | NoObligations) -> None:
    """Add the obligations of a variant (or why it has none)."""
    OBLIGATION_SETS[name] = prover
