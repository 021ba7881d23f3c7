"""The valid domain: the residuals every obligation is proven on, and generic tokens of each type in it.

Exactly one of ``IS_POINT``, ``IS_CENTROID``, ``IS_BOS`` is 1 and the others 0; ``ONE = 1``; ``N, ID, Y, Y_stage
>= 0`` (and a variant's ``NX = |x|^2 >= 0``); ``X, C, C_stage`` (and any other variant subspace) are arbitrary
reals. Every residual the circuit produces lies in it, at any sharpness (:mod:`analysis.proof.theorem` shows why).
"""

from __future__ import annotations

from fractions import Fraction

from analysis.proof.algebra import Lin, Sign
from circuits.layout import TOKEN_TYPES, ResidualLayout

FLAGS = ("IS_POINT", "IS_CENTROID", "IS_BOS")
#: Token type (``circuits.layout.TOKEN_TYPES``) -> the flag it sets.
TOKEN_FLAGS = dict(zip(TOKEN_TYPES, ("IS_BOS", "IS_POINT", "IS_CENTROID")))
NONNEG_SUBSPACES = ("N", "ID", "Y", "Y_stage", "NX")


def valid_domain(layout: ResidualLayout) -> dict[str, Sign]:
    """Sign constraint of every non-flag coordinate: ``NONNEG`` for N, ID, Y, Y_stage, ``FREE`` otherwise."""
    out = {}
    for i, label in enumerate(layout.labels):
        name = layout.subspace_of(i)[0]
        if name in FLAGS or name == "ONE":
            continue
        out[label] = Sign.NONNEG if name in NONNEG_SUBSPACES else Sign.FREE
    return out


def token_flags(token_type: str) -> dict[str, int]:
    """The flags and ``ONE`` of a token of ``token_type`` (``"point"``, ``"centroid"`` or ``"bos"``)."""
    return {flag: int(flag == TOKEN_FLAGS[token_type]) for flag in FLAGS} | {"ONE": 1}


def token_forms(layout: ResidualLayout, token_type: str) -> dict[int, Lin]:
    """A generic token of ``token_type``: each residual coordinate as an affine form (a variable, or a constant)."""
    flags = token_flags(token_type)
    out: dict[int, Lin] = {}
    for i, label in enumerate(layout.labels):
        name = layout.subspace_of(i)[0]
        if name in flags:
            if flags[name]:
                out[i] = Lin.of({}, Fraction(1))
        else:
            out[i] = Lin.of({label: Fraction(1)})
    return out
