"""The paper's finite-temperature sweep: how far the soft k-means circuit lands from Lloyd's.

For each stiffness ``beta`` (the paper's "temperature" ``gamma`` in ``softmax(-gamma |x - c|^2)``: *larger* is
sharper) and each cell of four grids (k x scale, d x k, n x k, n x d; the other parameters at their base values),
:func:`run_sweep` draws problems as in the paper's experiments: ``k`` Gaussian components with means uniform in
``[0, 1]^d`` and per-dimension standard deviation 0.1, ``n`` points min-max scaled to ``[0, 1]^d`` and then
multiplied by ``scale`` (data in ``[0, scale]^d``); ``k`` distinct data points as the initial centroids, the same
for both algorithms; ``iterations`` (10) steps of each. The gap is the relative excess k-means objective of the
soft circuit's final centroids (each point to its nearest centroid) over Lloyd's final centroids,
``(J_soft - J_lloyd) / J_lloyd``: relative, because the objective itself grows as ``scale^2``.

``beta`` acts on the user's squared distances, exactly as in the paper: a runner that works in the encoder's
unit frame (data divided by a radius ``S``) multiplies it by ``S^2``.

A *runner* executes the soft algorithm on a batch: ``runner(X, C0, beta, iterations) -> final centroids`` with
``X`` of shape ``(batch, n, d)``. :func:`circuit_runner` runs the soft ``HookedTransformer`` (dense);
:func:`structured_runner` the same weights on the structured execution path (needed for the ``full`` grid, which
goes to a million points); :func:`reference_runner` the numpy reference. Lloyd's side is the numpy
reference :func:`circuits.reference.lloyd`, which the exact circuit equals (verified elsewhere); every row also
records how far the runner's centroids are from the soft numpy reference, so the sweep doubles as a check of
the circuit at every grid point.

Each grid cell (all its stiffnesses and seeds) is one unit of work, :func:`sweep_cell`: :func:`sweep_cells` runs
them on the serial engine or on Ray (:mod:`analysis.engine`) and gets the same rows either way.

:func:`trend_checks` states whether the paper's qualitative finding holds (the gap shrinks as the stiffness and
the data scale grow, and grows with ``k``) and lists every comparison where it does not.
"""

from analysis.sweep.core import (
    AXES, GAP_FLOOR, GRIDS, PAIRS, RUNNERS, TREND_SLACK, Runner, SweepGrid, SweepRow, TrendCheck, aggregate,
    cell_gap, circuit_runner, describe_cell, finding_undetermined, grid_from, log_gap, mixture_problem,
    reference_runner, rows_csv, structured_runner, summary_lines, sweep_cell, sweep_cells, run_sweep, trend_checks,
)
from analysis.sweep.limits import FLOAT64_MAX, FLOAT64_TINY, range_problem

#: The sweep's API: grid, runners, rows, finding (:mod:`analysis.sweep.core`), the float64 limits
#: (:mod:`analysis.sweep.limits`); the figures (:mod:`analysis.sweep.figures`) are loaded when first asked for.
__all__ = [
    "AXES", "FLOAT64_MAX", "FLOAT64_TINY", "GAP_FLOOR", "GRIDS", "PAIRS", "RUNNERS", "TREND_SLACK", "Runner",
    "SweepGrid", "SweepRow", "TrendCheck", "aggregate", "cell_gap", "circuit_runner", "describe_cell",
    "finding_undetermined", "grid_from", "log_gap", "mixture_problem", "range_problem", "reference_runner",
    "rows_csv", "run_sweep", "structured_runner", "summary_lines", "sweep_cell", "sweep_cells", "trend_checks",
    "heatmaps", "sweep_html",
]


def __getattr__(name: str):
    # The figures live in analysis.sweep.figures (plotly and the document engine are imported only to draw).
    if name in ("heatmaps", "sweep_html"):
        from analysis.sweep import figures

        return getattr(figures, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
