"""The registry of the hand-built general constructions, beside Lloyd's circuit and its variants.

Each construction is one :class:`~analysis.constructions.spec.ConstructionSpec`, declared once at the end of its
module: :data:`~analysis.constructions.swap.SWAP` (the safeguarded swap, ``--construction swap``) and
:data:`~analysis.constructions.learned.LEARNED` (the learned safeguarded swap, ``--construction learned``, or
``--checkpoint`` of a learned checkpoint). :data:`REGISTERED` lists them, one line each; :data:`CONSTRUCTIONS`
finds one by name, :func:`checkpoint_construction` by a checkpoint file. What they share as they run is in
:mod:`analysis.constructions.common`; the circuits themselves are built in :mod:`circuits.swap` and
:mod:`circuits.learned`. Importing the registry loads no torch: the command line reads it for ``--help``.
"""

from __future__ import annotations

from pathlib import Path

from analysis.constructions.learned import LEARNED
from analysis.constructions.spec import ConstructionSpec
from analysis.constructions.swap import SWAP

__all__ = ["CONSTRUCTIONS", "REGISTERED", "ConstructionSpec", "checkpoint_construction", "choices_help",
           "trained_constructions"]

#: Every construction, in the order the command line and the docs list them.
REGISTERED: tuple[ConstructionSpec, ...] = (
    SWAP,
    LEARNED,
)

#: ``{name: declaration}``: what ``--construction NAME`` selects.
CONSTRUCTIONS: dict[str, ConstructionSpec] = {construction.name: construction for construction in REGISTERED}


def trained_constructions() -> tuple[str, ...]:
    """The names of the constructions with a trained part (their factors read from a checkpoint)."""
    return tuple(name for name, construction in CONSTRUCTIONS.items() if construction.training is not None)


def checkpoint_construction(path: str | Path | None) -> tuple[ConstructionSpec, Path] | None:
    """The trained construction whose checkpoint ``path`` is (a file of its format, or a folder holding one) and
    that file; ``None`` for anything else (a trained model's checkpoint folder, nothing at all, or no path)."""
    if path is None:
        return None
    for construction in CONSTRUCTIONS.values():
        found = construction.training.find_checkpoint(path) if construction.training is not None else None
        if found is not None:
            return construction, found
    return None


def choices_help() -> str:
    """``--construction``'s choices in words: ``NAME = summary`` for each, in order."""
    return ", ".join(f"{name} = {construction.summary}" for name, construction in CONSTRUCTIONS.items())
