"""The learned safeguarded swap as users run it, declared as :data:`LEARNED`: one problem, verified against its
numpy reference and compared with Lloyd's and the untrained swap (``cluster --construction learned``), held-out
tasks as a general model (``evaluate --construction learned``), and what training changed (``drift --construction
learned``).

The circuit (:func:`circuits.learned.build.build_learned_circuit`) is built for each call, for its shape ``(d, k)``,
number of steps and trained factors (a circuit a caller altered is never handed to another). Its factors come from a
learned checkpoint (:mod:`circuits.learned.checkpoint`, a JSON file read as untrusted input): the shipped one by
default, or any given by path (:func:`find_checkpoint` recognises the file, or a folder holding ``learned.json`` and
no ``config.json``). *Verified* is :class:`analysis.verify.swap.ConstructionReport`'s contract, the swap's: the
transformer's run *is* :func:`circuits.learned.reference.learned_swap`'s with the same factors (no tie-break) at
every step, the same state kept and centroids within each column's tolerance; a difference the circuit's tie-break
explains is NOT VERIFIED with that cause. What every construction shares lives in
:mod:`analysis.constructions.common`; the drift numbers are :func:`analysis.drift.learned.learned_drift`
(:mod:`analysis.report.learned` draws them).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from jaxtyping import Float

from analysis.constructions.common import sharpness_for
from analysis.constructions.spec import ConstructionSpec, Training

#: The file a learned checkpoint folder holds.
CHECKPOINT_FILE = "learned.json"


def find_checkpoint(path: str | Path) -> Path | None:
    """The learned checkpoint file at ``path``: the file itself if it is a JSON object of the learned format, or
    ``path/learned.json`` if ``path`` is a folder holding it and no ``config.json`` (a trained model's folder);
    ``None`` for anything else (a trained model's checkpoint, or nothing)."""
    from circuits.learned.checkpoint import FORMAT, MAX_BYTES
    from circuits.untrusted_json import UntrustedJSONError, loads

    path = Path(path)
    try:
        if path.is_dir():
            inside = path / CHECKPOINT_FILE
            return inside if inside.is_file() and not (path / "config.json").exists() else None
        if not path.is_file() or path.stat().st_size > MAX_BYTES:
            return None
        text = path.read_text(encoding="utf-8")
        obj = loads(text, str(path))
    except UntrustedJSONError as exc:
        # JSON beyond the limits (too deep, a huge number): the learned reader names the field, unless it is a
        # trained model's config, whose reader does.
        return path if exc.field and path.name != "config.json" else None
    except (OSError, UnicodeDecodeError):
        return None  # not readable as a learned checkpoint: the trained-model reader says why
    return path if isinstance(obj, dict) and obj.get("format") == FORMAT else None


def load_alphas(path: str | Path | None = None) -> np.ndarray:
    """The trained factors of the checkpoint at ``path`` (a file or a folder, :func:`find_checkpoint`), the shipped
    one when ``None``; ``ValueError`` naming the problem for anything that is not a valid learned checkpoint."""
    from circuits.learned import checkpoint

    if path is None:
        return checkpoint.load().alphas
    found = find_checkpoint(path)
    return checkpoint.load(found if found is not None else path).alphas


def learned_circuit(d: int, k: int, steps: int, alphas: tuple[float, ...], beta: float, tie_break: float,
                    mask: float | None = None):
    from circuits.learned.build import build_learned_circuit

    return build_learned_circuit(d, k, steps, list(alphas), beta=beta, tie_break=tie_break, mask=mask)


def extent(problems: list[tuple[np.ndarray, np.ndarray]], steps: int, alphas: Float[np.ndarray, " p"]
           ) -> tuple[float, float]:
    """What the circuit must keep exact on ``problems``, found on their reference runs before it is built: the
    mask (:func:`circuits.learned.build.reach_needed` at every step, at least :func:`~circuits.learned.build.mask_for`
    of the factors) and the *reach*, the largest unit norm of any centroid a point is assigned to (current and
    extrapolated, at least 1). A kept learned candidate whose cluster was empty may leave the unit ball, and the
    next extrapolation reaches farther (5 points in d = 8, k = 4 needed a mask of 226 where the factors' default
    is 156); and the extrapolated centroids of most problems stay far inside the factors' worst case
    (:func:`circuits.learned.reference.reach`, 11 for the shipped factors, a 121 times coarser tie-break)."""
    from circuits.encoding import fit_unit_scaling
    from circuits.learned.build import mask_for, reach_needed
    from circuits.learned.reference import alpha_at, learned_swap
    from circuits.learned.stages import CIRCUIT_CANDIDATES
    from circuits.swap.build import CENTRE
    from circuits.swap.knobs import SwapKnobs
    from circuits.swap.reference import lloyd_step

    mask, far = mask_for(alphas), 1.0
    for X, C0 in problems:
        ref = learned_swap(X, C0, steps, alphas, SwapKnobs().select_margin, candidates=CIRCUIT_CANDIDATES)
        # 1% of room: the circuit's centroids are the reference's to rounding, not bit for bit.
        mask = max(mask, 1.01 * float(reach_needed(X, C0, ref.centroids[:-1], alphas).max()))
        scaling = fit_unit_scaling(X, C0, CENTRE)
        for t, C in enumerate(ref.centroids[:-1]):
            E = C + alpha_at(alphas, t) * (lloyd_step(X, C) - C)
            far = max(far, float(np.linalg.norm(scaling.to_unit(np.stack([C, E]))[0], axis=-1).max()))
    return mask, far


def circuit_for(problems: list[tuple[np.ndarray, np.ndarray]], steps: int,
                alphas: Float[np.ndarray, " p"] | list[float] | None = None):
    """One circuit for ``problems`` (``[(X, C0), ...]`` of one shape) with factors ``alphas`` (the shipped
    checkpoint's when ``None``), its mask from what their reference runs reach (:func:`extent`), and its
    tie-break and beta chosen from their data as the swap's (:func:`analysis.constructions.common.sharpness_for`) with
    that reach: the squared distances to centroids that far out, and so the scores' rounding, grow with
    ``reach^2``, so the tie-break is that much coarser. A problem whose extrapolation runs beyond what float64
    scores can mask is refused (:class:`~analysis.errors.ProblemError`) before anything runs."""
    from analysis.errors import ProblemError
    from circuits.learned.stages import learned_layout

    alphas = load_alphas() if alphas is None else np.asarray(alphas, dtype=np.float64).reshape(-1)
    d, k = problems[0][0].shape[1], problems[0][1].shape[0]
    mask, far = extent(problems, steps, alphas)
    sharp = sharpness_for(problems, learned_layout(d, k).d_model, far)
    try:
        return learned_circuit(d, k, steps, tuple(float(a) for a in alphas), sharp.beta, sharp.tie_break, mask)
    except ValueError as exc:
        raise ProblemError(f"the learned construction cannot keep this problem exact: its extrapolated centroids"
                           f" need mask {mask:.3g} ({exc})") from None


def verify(run, X: Float[np.ndarray, "n d"], C0: Float[np.ndarray, "k d"], circ):
    """``run`` held to :func:`~circuits.learned.reference.learned_swap` with the circuit's factors, margin and
    candidates (:func:`analysis.verify.swap.verify_learned`)."""
    from analysis.verify.swap import verify_learned

    return verify_learned(run, X, C0, circ)


def reference_run(circ, X: Float[np.ndarray, "n d"], C0: Float[np.ndarray, "k d"], steps: int):
    """The reference's trajectory with the circuit's factors, margin and candidates, without tie-break."""
    from circuits.learned.reference import learned_swap
    from circuits.learned.stages import CIRCUIT_CANDIDATES

    return learned_swap(X, C0, steps, circ.alphas, circ.knobs.select_margin, candidates=CIRCUIT_CANDIDATES)


def reference_candidates(X: Float[np.ndarray, "n d"], ref) -> list[dict[str, float]]:
    """Per step, every candidate's objective in the reference trajectory ``ref``, which keeps them
    (``candidate_objectives``, NaN where a candidate is left out)."""
    from circuits.learned.reference import CANDIDATES

    return [dict(zip(CANDIDATES, map(float, row))) for row in np.asarray(ref.candidate_objectives)]


def extend_document(doc: dict, circ, run) -> None:
    """What the learned construction's ``cluster --json`` document adds to every construction's: the factors
    (``alphas``), each step's untrained swap objective (``objective_swap``) and the last (``swap_inertia``), and how
    often each candidate was kept (``kept``)."""
    from circuits.learned.reference import CANDIDATES

    for rec in doc["per_iteration"]:
        rec["objective_swap"] = float(run.swap_objectives[rec["iteration"]])
    doc["alphas"] = [float(a) for a in circ.alphas]
    doc["swap_inertia"] = float(run.swap_objectives[-1])
    doc["kept"] = {name: run.choices.count(name) for name in CANDIDATES}


def step_groups():
    from circuits.learned.stages import LEARNED_GROUPS

    return LEARNED_GROUPS


def step_blocks() -> int:
    from circuits.learned.stages import STEP_BLOCKS

    return len(STEP_BLOCKS)


def build(d: int, k: int, steps: int):
    """The circuit with the shipped factors and the builder's default knobs
    (:func:`circuits.learned.build.build_learned_circuit`)."""
    from circuits.learned.build import build_learned_circuit

    return build_learned_circuit(d, k, steps)


def drift(factors: Float[np.ndarray, " p"], **options):
    """What training changed (:func:`analysis.drift.learned.learned_drift`, ``options`` its keywords)."""
    from analysis.drift.learned import learned_drift

    return learned_drift(factors, **options)


LEARNED = ConstructionSpec(
    name="learned",
    title="the learned safeguarded swap",
    heading="learned safeguarded-swap construction",
    summary="learned safeguarded swap with the shipped factors (checkpoints/learned/learned.json; circuits/learned)",
    reference_note="circuits/learned/reference.py learned_swap",
    step_groups=step_groups,
    step_blocks=step_blocks,
    circuit_for=circuit_for,
    verify=verify,
    reference_run=reference_run,
    reference_candidates=reference_candidates,
    build=build,
    extend_document=extend_document,
    training=Training(find_checkpoint, load_alphas, drift),
)
