"""``kmeans-circuits report``: run and verify the circuit, then write one self-contained HTML report of it."""

from __future__ import annotations

import argparse

from analysis.cli.output import check_out_file, write_output_file
from analysis.cli.limits import add_budgets
from analysis.cli.options import (
    KEPT, MAX_POINTS, add_path_argument, add_problem_arguments, check_kept, cpu_only, load_problem, run_circuit,
    sharpness_from,
)
from analysis.constructions import CONSTRUCTIONS, choices_help
from analysis.errors import ProblemError
from analysis.wording import count

NAME = "report"
HELP = "write a self-contained HTML report: attention, residual stream, QK/OV weights, centroid paths, verification"



def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_problem_arguments(parser)
    parser.add_argument("--out", metavar="FILE", required=True, help="the HTML file to write (.html)")
    add_path_argument(parser)
    parser.add_argument("--max-points", type=int, default=MAX_POINTS, metavar="M",
                        help=f"points drawn per figure (default {MAX_POINTS}); verification always uses all of them")
    parser.add_argument("--plotly-js", choices=("inline", "shared"), default="inline",
                        help="inline (default): plotly.js embedded in the page; shared: written once beside it as "
                             "plotly-<version>.min.js and referenced relatively (for folders of reports; offline)")
    parser.add_argument("--construction", choices=tuple(CONSTRUCTIONS), default=None,
                        help=f"the page of a general construction instead of Lloyd's circuit: {choices_help()}; per"
                             " step every candidate's objective, the one kept, the choosing heads' attention, the"
                             " verification against its numpy reference")
    add_budgets(parser, KEPT)


def run(args: argparse.Namespace) -> int:
    problem = load_problem(args)
    out = check_out_file(args.out)
    if args.max_points < 1:
        raise ProblemError(f"--max-points must be >= 1, got {args.max_points}")
    if args.construction is not None:
        cpu_only(args, "--construction")
        return run_construction(args, problem, out)
    sharpness = sharpness_from(args, from_data=True)
    check_kept(problem)

    from analysis.cli.progress import Stages
    from analysis.pipeline import DTYPES

    with Stages(NAME, ["circuit", "report"]) as stages:
        # At scale the run keeps what the verification reads and the rows of the --max-points points drawn.
        result = run_circuit(problem, DTYPES[args.dtype], sharpness, args.path, stages, args.device,
                             lean=None, threads=args.threads, sample=args.max_points)
        stages.start("report")
        # The views (plotly, and TransformerLens for those that run the model) load after the first stage shows.
        from analysis.cli.main import settled_for_the_report
        from analysis.report import build_report

        with settled_for_the_report(at_scale=result.capture.lean):
            report = build_report(result, problem, seed=args.seed, max_points=args.max_points)
    write_page(out, report, args.plotly_js)
    rep = result.report
    print(f"{problem.source}: n={result.encoded.n} d={result.encoded.d} k={problem.k}, variant {problem.variant}, "
          f"{count(problem.iterations, 'iteration')}: {rep.verdict}; "
          f"wrote {out} ({out.stat().st_size / 2**20:.1f} MiB, {len(report.figures())} figures)")
    return 0 if rep.verified else 1


def write_page(out, report, plotly_js: str) -> None:
    """Write ``report`` to ``out`` (with plotly.js beside it for ``shared``)."""
    html = report.to_html(plotly_js=plotly_js)
    if plotly_js == "shared":
        from analysis.report.assets import write_plotly_js

        try:
            write_plotly_js(out.parent)
        except OSError as exc:
            raise ProblemError(f"cannot write plotly.js beside --out {str(out)!r}: {exc.strerror or exc}") from None
    write_output_file(out, html)


def run_construction(args: argparse.Namespace, problem, out) -> int:
    """``report --construction NAME``: the construction's page (:mod:`analysis.report.construction`)."""
    from analysis.cli.constructions import construction_result

    result, report = construction_result(args, problem, CONSTRUCTIONS[args.construction], None, command=NAME,
                                         page=True)
    write_page(out, report, args.plotly_js)
    print(f"{problem.source}: n={result.doc['n']} d={result.doc['d']} k={problem.k}, construction"
          f" {args.construction}, {count(problem.iterations, 'step')}: {result.doc['verdict']}; wrote {out}"
          f" ({out.stat().st_size / 2**20:.1f} MiB, {len(report.figures())} figures)")
    return 0 if result.doc["verified"] else 1
