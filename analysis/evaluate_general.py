"""Moved to :mod:`analysis.evaluation` (:mod:`~analysis.evaluation.cells` for the shape grid,
:mod:`~analysis.evaluation.real` for real data, :mod:`~analysis.evaluation.metrics` for the anytime measures);
kept for one release.

:func:`shape_cells`, :func:`evaluate_shapes` and :func:`evaluate_real` keep their old signatures on top of
:class:`analysis.evaluation.ShapeGrid` and :func:`analysis.evaluation.evaluate_real_data`.
"""

from __future__ import annotations

from analysis.evaluation.cells import (
    DEFAULT_SHAPES, ShapeCell, ShapeGrid, ShapeResult, evaluate_grid, general_cell, shape_tasks, shapes_evaluation,
)
from analysis.evaluation.metrics import anytime_summary, per_task, sklearn_optimum
from analysis.evaluation.real import REAL_DATASETS, DatasetRun, evaluate_real_data

__all__ = [
    "DEFAULT_SHAPES", "REAL_DATASETS", "ShapeCell", "ShapeResult", "anytime_summary", "evaluate_real",
    "evaluate_shapes", "general_cell", "per_task", "shape_cells", "shape_tasks", "shapes_evaluation",
    "sklearn_optimum",
]


def shape_cells(*grid, **options) -> list[ShapeCell]:
    """``ShapeGrid(*grid, **options).cells()``: the old parameters (shapes, tasks, n, steps, init, seed, chunk,
    with_optimum) are the grid's fields, in order."""
    return ShapeGrid(*grid, **options).cells()


def evaluate_shapes(model, *grid, **options) -> dict:
    """``evaluate_grid(model, ShapeGrid(*grid, **options))``."""
    return evaluate_grid(model, ShapeGrid(*grid, **options))


def evaluate_real(model, name: str, inits: int = 10, steps: int = 20, init: str = "random", seed: int = 0,
                  chunk: int = 2) -> dict:
    """Dataset ``name`` in raw units at its true k, from ``inits`` initialisations (seeds ``seed..``)."""
    return evaluate_real_data(model, DatasetRun(name, steps, inits, init, seed, chunk), raw=True)
