"""``kmeans-circuits sweep``: the paper's finite-temperature sweep of the soft k-means circuit against Lloyd's."""

from __future__ import annotations

import argparse
import functools
import math

from analysis import engine
from analysis.cli.exits import report_failures
from analysis.cli.limits import Budget, add_budgets, limit
from analysis.cli.options import add_device_argument, add_engine_arguments, cpu_only, resolve_device
from analysis.cli.output import check_out_dir, write_output_dir
from analysis.cli.progress import Cells
from analysis.data import MAX_ITERATIONS
from analysis.errors import ProblemError
from analysis.wording import count

NAME = "sweep"
HELP = "run the soft k-means circuit at several temperatures over grids of d, k, n and data scale, against Lloyd's"

#: Work of the grid on the structured and reference runners (O(n (d + k)) per iteration), summed over its cells:
#: at most about the --full grid's (3.5e9: the better part of an hour on 2 cores, docs/variants.md).
LINEAR_WORK = Budget("betas x --seeds x --iterations x n (d + k), summed over cells", 4_000_000_000,
                     "about the --full grid's, the better part of an hour on 2 cores", "structured and reference runners")
#: The circuit runner is the dense HookedTransformer, O((n + k + 1)^2) per layer for every seed of a cell at once:
#: the default grid (8.3e7) takes about 4 minutes on 2 cores, and the limit bounds one cell's attention too.
DENSE_WORK = Budget("betas x --seeds x --iterations x (n + k + 1)^2, summed over cells", 200_000_000,
                    "about 10 minutes on 2 cores", "circuit runner")


def _floats(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None


def _int(text: str) -> int:
    try:
        return int(text)  # exactly: through float, 2**63 + 1 would read as 2**63
    except ValueError:
        value = float(text)  # "1e3" is an integer too
        if not math.isfinite(value) or value != int(value):
            raise ValueError(text) from None
        return int(value)


def _ints(text: str) -> tuple[int, ...]:
    try:
        return tuple(_int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", metavar="DIR", default="sweep",
                        help="write sweep.html (heatmaps, self-contained) and sweep.csv (raw results) here (default ./sweep)")
    parser.add_argument("--grid", choices=("tiny", "default", "large", "full"), default=None,
                        help="tiny: seconds (tests); default: a few minutes on 2 cores (the default); large: the bigger"
                             " grid; full: see --full")
    parser.add_argument("--full", action="store_true",
                        help="the paper's full ranges (d 2-32, k 2-20, n 1e3-1e6, scale 0.1-10) on the structured path;"
                             " about half an hour on 2 cores (same as --grid full --runner structured)")
    parser.add_argument("--runner", choices=("circuit", "structured", "reference"), default=None,
                        help="circuit: the soft HookedTransformer (the default); structured: the same weights on the"
                             " structured path; reference: the numpy soft k-means")
    parser.add_argument("--betas", type=_floats, metavar="B,B,...", help="stiffnesses (paper's temperatures; default 1,10,100)")
    parser.add_argument("--d", type=_ints, metavar="D,D,...", help="dimensions of the d grids")
    parser.add_argument("--k", type=_ints, metavar="K,K,...", help="cluster counts of the k grids")
    parser.add_argument("--n", type=_ints, metavar="N,N,...", help="point counts of the n grids")
    parser.add_argument("--scale", type=_floats, metavar="S,S,...", help="data scales (data in [0, scale]^d)")
    limit(parser.add_argument("--seeds", type=int, help="problems per cell"), 1000,
          "each seed is one more problem in every cell")
    limit(parser.add_argument("--iterations", type=int, help="iterations of both algorithms (default 10)"),
          MAX_ITERATIONS, "each iteration is one more layer pair of the circuit in every run")
    add_device_argument(parser)
    add_engine_arguments(parser)
    add_budgets(parser, LINEAR_WORK, DENSE_WORK)


def grid_and_runner(args: argparse.Namespace) -> tuple[str, str]:
    """``--grid`` and ``--runner`` as given, ``--full`` read as ``--grid full --runner structured``: a ``--full``
    beside another grid or runner is a usage error, not silently overridden."""
    if args.full:
        for flag, given, means in (("--grid", args.grid, "full"), ("--runner", args.runner, "structured")):
            if given not in (None, means):
                raise ProblemError(f"--full is --grid full --runner structured: it cannot be combined with {flag}"
                                   f" {given}")
        return "full", "structured"
    return args.grid or "default", args.runner or "circuit"


def check_work(grid, runner: str) -> None:
    """:data:`LINEAR_WORK` or :data:`DENSE_WORK` of ``grid`` on ``runner``, summed over its cells."""
    dense = runner == "circuit"
    per_cell = [(p["n"] + p["k"] + 1) ** 2 if dense else p["n"] * (p["d"] + p["k"]) for _, p in grid.cells()]
    total = len(grid.betas) * grid.seeds * grid.iterations * sum(per_cell)
    (DENSE_WORK if dense else LINEAR_WORK).check(
        {"cells": len(per_cell), "betas": len(grid.betas), "--seeds": grid.seeds, "--iterations": grid.iterations},
        total=total, instead=", or use --runner structured (the same weights, O(n (d + k)))" if dense else "")


def run(args: argparse.Namespace) -> int:
    from analysis import sweep

    out = check_out_dir(args.out, ("sweep.csv", "sweep.html"))
    args.grid, args.runner = grid_and_runner(args)
    if args.grid == "full" and args.runner == "circuit":
        raise ProblemError("--grid full reaches a million points: use --runner structured (or --full)")
    try:
        grid = sweep.grid_from(args.grid, betas=args.betas, d=args.d, k=args.k, n=args.n, scale=args.scale,
                               seeds=args.seeds, iterations=args.iterations)
        grid.validate()
    except ProblemError:
        raise
    except ValueError as exc:
        raise ProblemError(str(exc)) from None
    check_work(grid, args.runner)
    engine.check(args.engine, args.address)

    runner = sweep.RUNNERS[args.runner]
    if args.runner == "reference":
        cpu_only(args, "--runner reference (numpy)")
    else:
        runner = functools.partial(runner, device=resolve_device(args.device))
    cells = sum(1 for _ in grid.cells())
    with Cells(NAME, cells) as bar:
        outcome = sweep.sweep_cells(grid, runner, bar.update, args.engine, args.address)
    rows = [row for rows in outcome.finished() for row in rows]
    if rows:
        checks = sweep.trend_checks(rows)
        settings = args.runner + "".join(f"; MISSING (failed) {f.cell}" for f in outcome.failures)
        write_output_dir(out, {"sweep.csv": sweep.rows_csv(rows), "sweep.html": sweep.sweep_html(rows, checks, grid, settings)})
        print(f"sweep: {count(len(rows), 'run')} ({args.runner} runner, grid {args.grid}, {args.engine} engine);"
              f" wrote {out / 'sweep.html'} and {out / 'sweep.csv'}")
        for line in sweep.summary_lines(rows, checks, missing=len(outcome.failures)):
            print(line)
    return report_failures(outcome.failures)
