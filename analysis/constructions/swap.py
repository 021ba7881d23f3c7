"""The safeguarded-swap construction as users run it, declared as :data:`SWAP`: one problem, verified against its
numpy reference and compared with Lloyd's (``cluster --construction swap``), and held-out tasks, as a general
model (``evaluate --construction swap``).

The construction (:mod:`circuits.swap`) is built for each call, for its shape ``(d, k)`` and number of steps (a
circuit a caller altered is never handed to another). *Verified* is
:class:`analysis.verify.swap.ConstructionReport`'s contract: the transformer's result *is* its reference's
(:func:`circuits.swap.reference.safeguarded_swap` without a tie-break) at every step, the same state kept and every
centroid coordinate within its column's tolerance (:func:`analysis.verify.swap.column_tolerances`); a difference the
circuit's tie-break explains is NOT VERIFIED with that cause. Lloyd's (:func:`circuits.reference.lloyd`, from the
same initial centroids) is the yardstick the construction is meant to beat, never to match. What every construction
shares (paths, the document, the diagnostics, the evaluation's model) is in :mod:`analysis.constructions.common`.
"""

from __future__ import annotations

import numpy as np
from jaxtyping import Float

from analysis.constructions.common import sharpness_for
from analysis.constructions.spec import ConstructionSpec
from circuits import reference


def swap_circuit(d: int, k: int, steps: int, beta: float, tie_break: float):
    from circuits.swap import build_swap_circuit

    return build_swap_circuit(d, k, steps, beta=beta, tie_break=tie_break)


def circuit_for(problems: list[tuple[np.ndarray, np.ndarray]], steps: int, factors: None = None):
    """One circuit for ``problems`` (``[(X, C0), ...]`` of one shape) with its tie-break and beta chosen from their
    data as for Lloyd's circuit (:func:`analysis.constructions.common.sharpness_for`): the finest tie-break float64
    resolves on every one of them, and a beta that makes every larger gap hard. One far point makes the unit scale
    huge and the data's gaps tiny in it; a fixed tie-break would then decide labels the data does not tie. Nothing
    is trained: ``factors`` must be ``None``."""
    from circuits.swap.layout import swap_layout

    if factors is not None:
        raise ValueError("the safeguarded swap has no trained factors")
    d, k = problems[0][0].shape[1], problems[0][1].shape[0]
    sharp = sharpness_for(problems, swap_layout(d, k).d_model)
    return swap_circuit(d, k, steps, sharp.beta, sharp.tie_break)


def verify(run, X: Float[np.ndarray, "n d"], C0: Float[np.ndarray, "k d"], circ):
    """``run`` held to :func:`~circuits.swap.reference.safeguarded_swap` with the circuit's select margin
    (:func:`analysis.verify.swap.verify_swap`); its tie-break names the cause where they differ."""
    from analysis.verify.swap import verify_swap

    return verify_swap(run, X, C0, circ.knobs.select_margin, circ.user_tie_break(X, C0))


def reference_run(circ, X: Float[np.ndarray, "n d"], C0: Float[np.ndarray, "k d"], steps: int):
    """The reference's trajectory with the circuit's select margin, without tie-break."""
    from circuits.swap.reference import safeguarded_swap

    return safeguarded_swap(X, C0, steps, circ.knobs.select_margin)


def reference_candidates(X: Float[np.ndarray, "n d"], ref) -> list[dict[str, float]]:
    """Per step, every candidate's objective in the reference trajectory ``ref``, rebuilt from it
    (:func:`circuits.swap.reference.step_candidates`: the reference keeps only the chosen state)."""
    from circuits.swap.reference import CANDIDATES, step_candidates

    return [dict(zip(CANDIDATES, (reference.objective(X, c) for c in step_candidates(X, C, L))))
            for C, L in zip(ref.centroids[:-1], ref.lloyd_centroids[1:])]


def step_groups():
    from circuits.swap.layout import SWAP_GROUPS

    return SWAP_GROUPS


def step_blocks() -> int:
    from circuits.swap.stages import STEP_BLOCKS

    return len(STEP_BLOCKS)


def build(d: int, k: int, steps: int):
    """The circuit with the builder's default knobs (:func:`circuits.swap.build.build_swap_circuit`)."""
    from circuits.swap.build import build_swap_circuit

    return build_swap_circuit(d, k, steps)


SWAP = ConstructionSpec(
    name="swap",
    title="the safeguarded swap",
    heading="safeguarded-swap construction",
    summary="safeguarded swap (circuits/swap)",
    reference_note="circuits/swap/reference.py",
    step_groups=step_groups,
    step_blocks=step_blocks,
    circuit_for=circuit_for,
    verify=verify,
    reference_run=reference_run,
    reference_candidates=reference_candidates,
    build=build,
)
