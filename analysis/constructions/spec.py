"""A hand-built general construction, declared once: :class:`ConstructionSpec` (what
:class:`circuits.spec.VariantSpec` is for a variant), with its trained part, :class:`Training`.

A construction is a circuit of its own kind, not Lloyd's circuit with one change: each step keeps the best of
several candidates (:mod:`circuits.swap`, :mod:`circuits.learned`). Its declaration, at the end of its module of
this package, holds everything that differs from one construction to another as the library and the commands run
it: its name and texts, the circuit for a batch of problems (knobs chosen from their data), the check against its
numpy reference, the reference the evaluation reads out against, its reference's candidates per step, what its
``cluster --json`` document adds, its circuit with default knobs, and for a trained one its factors' checkpoint
and what training changed. :mod:`analysis.constructions` lists the declarations; the commands and
:mod:`analysis.discovery` read that list, never a construction's name.

The declarations are data and functions of their modules: importing the list loads no torch (the command line
reads it for ``--help``), each function importing what it runs. Their functions are module-level (no lambdas), so
a declaration pickles by reference, as the evaluation's model travels to Ray workers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from jaxtyping import Float

#: ``[(X, C0), ...]``: problems of one shape that one circuit serves.
Problems = list[tuple[np.ndarray, np.ndarray]]


@dataclass(frozen=True)
class Training:
    """The trained part of a construction: a handful of factors in a small checkpoint file, read as untrusted
    input, and what training changed (``drift --construction``)."""

    #: ``path -> the checkpoint file at path, or None``: the file itself when it is of this format, or a folder's.
    find_checkpoint: Callable[[str | Path], Path | None] = field(repr=False)
    #: ``path or None -> factors``: the checkpoint's (the shipped one's for ``None``); ``ValueError`` naming the fault.
    load_factors: Callable[[str | Path | None], np.ndarray] = field(repr=False)
    #: ``(factors, steps=, tasks=, n=, seed=, with_behaviour=) -> record``: the factors against the untrained
    #: construction's, with ``to_dict()`` and ``summary`` (:mod:`analysis.drift.learned`).
    drift: Callable[..., object] = field(repr=False)


@dataclass(frozen=True)
class ConstructionSpec:
    """A construction, declared once (module docstring). ``factors`` below are a trained construction's factors
    (``None``: the shipped checkpoint's); an untrained construction takes none."""

    #: ``--construction NAME``; its ``cluster --json`` document's ``variant`` is ``construction:NAME``.
    name: str
    #: What verdicts and pages call it: "the safeguarded swap".
    title: str
    #: The command line's description of a run: "safeguarded-swap construction".
    heading: str
    #: What ``--help`` says after ``NAME =``: "safeguarded swap (circuits/swap)".
    summary: str
    #: Its numpy reference, named in the first note of its document: "circuits/swap/reference.py".
    reference_note: str
    #: ``() -> StepGroups``: the centroid groups a step's token sequence holds (the sequence's length before a build).
    step_groups: Callable[[], object] = field(repr=False)
    #: ``() -> int``: the blocks of one step (a circuit of ``steps`` steps has ``steps`` times as many layers).
    step_blocks: Callable[[], int] = field(repr=False)
    #: ``(problems, steps, factors) -> circuit``: one circuit for problems of one shape, knobs from their data.
    circuit_for: Callable[[Problems, int, np.ndarray | None], object] = field(repr=False)
    #: ``(run, X, C0, circuit) -> ConstructionReport``: the run held to its numpy reference (:mod:`analysis.verify.swap`).
    verify: Callable[..., object] = field(repr=False)
    #: ``(circuit, X, C0, steps) -> trajectory``: the numpy reference of the circuit, without tie-break.
    reference_run: Callable[..., object] = field(repr=False)
    #: ``(X, reference trajectory) -> [{candidate: objective}, ...]``: each step's candidates in the reference.
    reference_candidates: Callable[[Float[np.ndarray, "n d"], object], list[dict[str, float]]] = field(repr=False)
    #: ``(d, k, steps) -> circuit``: the circuit with its default knobs (and the shipped factors).
    build: Callable[[int, int, int], object] = field(repr=False)
    #: ``(document, circuit, run) -> None``: what the ``cluster --json`` document adds, in place (``None``: nothing).
    extend_document: Callable[[dict, object, object], None] | None = field(default=None, repr=False)
    #: The trained part (``None``: nothing trained).
    training: Training | None = None

    def describe(self, doc: dict) -> str:
        """The run of ``doc`` (its ``cluster --json`` document) in a few words: the heading, and the factors of a
        trained construction."""
        if self.training is None:
            return self.heading
        return f"{self.heading} (factors " + ", ".join(f"{a:g}" for a in doc["alphas"]) + ")"

    def layers(self, steps: int) -> int:
        """The layers of this construction's circuit of ``steps`` steps, known before it is built."""
        return self.step_blocks() * steps

    def factors(self, path: str | Path | None = None) -> np.ndarray | None:
        """A trained construction's factors from the checkpoint at ``path`` (the shipped one for ``None``);
        ``None`` for an untrained one."""
        return None if self.training is None else self.training.load_factors(path)

    def run(self, X: Float[np.ndarray, "n d"], C0: Float[np.ndarray, "k d"], iterations: int, path: str = "auto",
            factors: Float[np.ndarray, " p"] | list[float] | None = None):
        """Run the construction on one problem on ``path``, held to its reference: a
        :class:`~analysis.constructions.common.ConstructionResult` (:func:`~analysis.constructions.common.run_construction`)."""
        from analysis.constructions.common import run_construction

        return run_construction(self, X, C0, iterations, path, factors)

    def cluster(self, X: Float[np.ndarray, "n d"], C0: Float[np.ndarray, "k d"], iterations: int,
                path: str = "auto", factors: Float[np.ndarray, " p"] | list[float] | None = None) -> dict:
        """The ``cluster --json`` document of the construction on one problem (:meth:`run`)."""
        return self.run(X, C0, iterations, path, factors).doc

    def model(self, factors: Float[np.ndarray, " p"] | list[float] | None = None):
        """The construction in the general evaluation's place of a checkpoint
        (:class:`~analysis.constructions.common.ConstructionModel`)."""
        from analysis.constructions.common import ConstructionModel

        return ConstructionModel(self, factors)
