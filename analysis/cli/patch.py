"""``kmeans-circuits patch``: corrupt a problem, patch the clean run into the corrupted one, write the heatmaps.

Builds the circuit, makes the clean/corrupted pair (:mod:`analysis.patching.pairs`), verifies both unpatched runs
against the Lloyd reference, runs the sweeps (:mod:`analysis.patching.sweeps`) and writes ``patching.json`` (every
metric of every cell) and ``patching.html`` (self-contained heatmaps, plotly.js embedded) into ``--out``, all or
nothing; with ``--report`` also ``report.html``, the circuit report of the clean run with a patching section.
Without ``--out`` nothing is written (the summary, or ``--json``, is on stdout), as for ``cluster``.
Exit codes as everywhere: 0 done and both unpatched runs verified, 1 an unpatched run disagrees with the reference
(results are still written), 2 bad input.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from analysis.cli.limits import Budget, add_budgets
from analysis.cli.output import check_out_dir, write_output_dir
from analysis.cli.options import add_problem_arguments, load_problem, resolve_device, sharpness_from
from analysis.errors import ProblemError
from analysis.wording import count
from circuits.blocks import n_layers as schedule_length
from circuits.strict_json import dumps

NAME = "patch"
HELP = "activation patching: corrupt the problem, patch clean activations back in, write heatmaps of what restores it"

CORRUPTION_KINDS = ("move-centroid", "move-point", "swap-centroids", "add-outlier")
SWEEP_NAMES = ("layer-position", "layer-subspace", "components")
#: Every cell of a sweep reruns the dense circuit from its layer to the read layer: the work grows as tokens^2 x
#: layers^2 x patched positions. Every sweep of blobs n=1000, k=3, 10 iterations (1004 tokens, 22 layers, 8
#: positions: 3.9e9) took 132 s and 1.7 GB on 2 cores; the limit is about 6 minutes.
WORK = Budget("tokens^2 x layers^2 x positions", 10_000_000_000, "about 6 minutes on 2 cores",
              "tokens n + k + 1, layers 2 --iterations + 2, positions every token with --positions each, else k + 5")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_problem_arguments(parser)
    corr = parser.add_argument_group("corruption")
    corr.add_argument("--corruption", required=True, choices=CORRUPTION_KINDS, metavar="KIND",
                      help=f"how the corrupted run differs: {', '.join(CORRUPTION_KINDS)}")
    corr.add_argument("--centroid", type=int, default=0, metavar="J",
                      help="move-centroid: which initial centroid moves; swap-centroids: the first of the two (default 0)")
    corr.add_argument("--other", type=int, default=1, metavar="J",
                      help="swap-centroids: the second centroid (default 1)")
    corr.add_argument("--point", type=int, default=None, metavar="I",
                      help="move-point: which point crosses a boundary (default: the one nearest to a boundary)")
    corr.add_argument("--to", default=None, metavar="V,V,...",
                      help="move-centroid: new position; add-outlier: the outlier (comma-separated, d values)")
    corr.add_argument("--outlier-distance", type=float, default=3.0, metavar="R",
                      help="add-outlier without --to: R times farther out than the farthest point (default 3)")
    sweep = parser.add_argument_group("sweeps")
    sweep.add_argument("--sweeps", default=",".join(SWEEP_NAMES), metavar="LIST",
                       help=f"comma-separated, from {', '.join(SWEEP_NAMES)} (default: all)")
    sweep.add_argument("--positions", choices=("auto", "each", "types"), default="auto",
                       help="layer-position columns: every token, or token types plus centroids and the corrupted"
                            " point (default auto: every token up to 64 tokens)")
    sweep.add_argument("--read", default="final", metavar="LAYER",
                       help="read the outcome after this layer (default final: the last layer)")
    parser.add_argument("--out", metavar="DIR",
                        help="write patching.json and patching.html here (without it nothing is written)")
    parser.add_argument("--report", action="store_true",
                        help="also write report.html into --out: the circuit report of the clean run with a patching"
                             " section")
    parser.add_argument("--json", action="store_true", help="print one JSON object on stdout instead of the summary")
    add_budgets(parser, WORK)


def check_work(args: argparse.Namespace, problem) -> None:
    """:data:`WORK` of the sweeps asked for, before the circuit is built."""
    from analysis.patching.sweeps import MAX_POSITION_COLUMNS

    tokens = problem.X.shape[0] + problem.k + 1
    each = args.positions == "each" or (args.positions == "auto" and tokens <= MAX_POSITION_COLUMNS)
    positions = tokens + 3 if each else problem.k + 5
    WORK.check({"tokens": tokens, "layers": schedule_length(problem.iterations), "positions": positions},
               total=tokens**2 * schedule_length(problem.iterations) ** 2 * positions)


def parse_vector(text: str | None, d: int, what: str):
    if text is None:
        return None
    import numpy as np

    try:
        values = [float(v) for v in text.split(",")]
    except ValueError:
        raise ProblemError(f"{what}: expected {d} comma-separated numbers, got {text!r}") from None
    if len(values) != d:
        raise ProblemError(f"{what}: expected {d} values (the data has d={d}), got {len(values)}")
    if not all(np.isfinite(values)):
        raise ProblemError(f"{what}: values must be finite")
    return np.array(values)


def make_pair_from(args: argparse.Namespace, problem):
    from analysis.patching.pairs import make_pair

    d = problem.X.shape[1]
    options: dict = {}
    if args.corruption == "move-centroid":
        options = {"centroid": args.centroid, "to": parse_vector(args.to, d, "--to")}
    elif args.corruption == "move-point":
        options = {"point": args.point}
    elif args.corruption == "swap-centroids":
        options = {"a": args.centroid, "b": args.other}
    elif args.corruption == "add-outlier":
        options = {"at": parse_vector(args.to, d, "--to"), "distance": args.outlier_distance}
    import numpy as np

    try:
        # An outlier R times farther out can overflow to inf: make_pair refuses it in words, numpy need not warn too.
        with np.errstate(over="ignore", invalid="ignore"):
            return make_pair(args.corruption, problem.X, problem.C0, **options)
    except ValueError as exc:
        by = (f" --outlier-distance {args.outlier_distance:g}" if args.corruption == "add-outlier" and args.to is None
              else "")
        raise ProblemError(f"--corruption {args.corruption}{by}: {exc}") from None


def parse_sweeps(text: str) -> list[str]:
    names = [s.strip() for s in text.split(",") if s.strip()]
    bad = [s for s in names if s not in SWEEP_NAMES]
    if bad or not names:
        raise ProblemError(f"--sweeps: unknown sweep {', '.join(bad) or '(none)'}; choose from {', '.join(SWEEP_NAMES)}")
    return list(dict.fromkeys(names))


def parse_read(text: str, n_layers: int) -> int:
    if text == "final":
        return n_layers - 1
    try:
        layer = int(text)
    except ValueError:
        raise ProblemError(f"--read: expected 'final' or a layer number, got {text!r}") from None
    if not 0 <= layer < n_layers:
        raise ProblemError(f"--read {layer}: the circuit has layers 0..{n_layers - 1}")
    return layer


def run(args: argparse.Namespace) -> int:
    problem = load_problem(args)
    pair = make_pair_from(args, problem)
    sweeps = parse_sweeps(args.sweeps)
    read = parse_read(args.read, schedule_length(problem.iterations))
    check_work(args, problem)
    if args.report and args.out is None:
        raise ProblemError("--report writes report.html into --out: give --out DIR")
    out = check_out_dir(args.out, ("patching.json", "patching.html") + (("report.html",) if args.report else ()),
                        previous=("report.html",))
    sharpness = sharpness_from(args)

    from analysis.cli.progress import Stages
    from analysis.patching.experiment import PatchingExperiment
    from analysis.patching.unpatched import verify_unpatched
    from analysis.pipeline import DTYPES
    from circuits.variants import get_variant

    # Built before the progress lines start: knobs too large for the dtype are bad input, reported on one line.
    circuit = get_variant(problem.variant).build(pair.d, pair.k, problem.iterations, sharpness=sharpness,
                                                 dtype=DTYPES[args.dtype], device=resolve_device(args.device))
    names = ["clean and corrupted runs"] + [f"sweep {name}" for name in sweeps] + ["pages"]
    with Stages(NAME, names) as stages:
        stages.start("clean and corrupted runs")
        exp = PatchingExperiment(circuit, pair)
        check = verify_unpatched(exp)
        results = _sweeps(exp, sweeps, args.positions, read, stages)
        stages.start("pages")
        files, doc, problem_info = _pages(args, problem, exp, Patched(results, check, read))
    if out is not None:
        write_output_dir(out, files)
    if args.json:
        print(dumps({**doc, "sweeps": [compact(s) for s in doc["sweeps"]],
                          "out": None if out is None else str(out)}))
    else:
        s = doc["summary"]
        print(f"{problem.source}: n={problem_info['n']} d={pair.d} k={pair.k}, init {problem.init},"
              f" {count(problem.iterations, 'iteration')}; corruption: {pair.description}")
        print(f"read after {s['read_label']}: {s['labels_differing']} label(s) differ between clean and corrupted"
              f" ({s['labels_differing_up_to_renaming']} once cluster ids are matched),"
              f" |C_clean - C_corrupted| = {s['centroid_error']:.4g}")
        for sw in doc["sweeps"]:
            rows = sw["restoring_rows"]
            print(f"{sw['name']}: the clean readout comes back exactly at {len(rows)} of {len(sw['rows'])} rows")
            for row in rows[:6]:
                cols = [c["col"] for c in sw["restoring_cells"] if c["row"] == row]
                print(f"  {row:>18}: {', '.join(cols[:8])}{', ...' if len(cols) > 8 else ''}")
            if len(rows) > 6:
                print(f"  {'...':>18}  (every cell in " + ("--json's output or --out's patching.json)" if out is None
                                                        else f"{out / 'patching.json'})"))
        print(("unpatched runs VERIFIED against the reference" if check.verified else
               "unpatched runs NOT VERIFIED: " + "; ".join(check.clean.failures + check.corrupted.failures))
              + ("" if out is None else f"; wrote {out}"))
    return 0 if check.verified else 1


def _sweeps(exp, names: list[str], positions: str, read: int, stages) -> list:
    from analysis.patching.sweeps import (default_position_columns, sweep_components, sweep_layer_position,
                                          sweep_layer_subspace)

    each = {"auto": None, "each": True, "types": False}[positions]
    results = []
    for name in names:
        stages.start(f"sweep {name}")
        if name == "layer-position":
            results.append(sweep_layer_position(exp, default_position_columns(exp, each), read_layer=read))
        elif name == "layer-subspace":
            results.append(sweep_layer_subspace(exp, read_layer=read))
        else:
            results.append(sweep_components(exp, columns=default_position_columns(exp, each), read_layer=read))
    return results


@dataclass(frozen=True)
class Patched:
    """What the sweeps found: their ``results``, the unpatched runs' ``check`` and the layer they ``read`` after."""

    results: list
    check: object
    read: int


def _pages(args, problem, exp, patched: Patched) -> tuple[dict, dict, dict]:
    """The files to write (``patching.json``, ``patching.html``, ``report.html`` with ``--report``), the result
    document and the problem's description."""
    from analysis.patching.report import patching_page, result_document

    pair, circuit, (results, check, read) = exp.pair, exp.circuit, (patched.results, patched.check, patched.read)

    problem_info = {"source": problem.source, "init": problem.init, "n": int(problem.X.shape[0]),
                    "d": pair.d, "k": pair.k, "iterations": problem.iterations, "variant": problem.variant}
    doc = result_document(exp, results, check, read, problem_info)
    files = {
        "patching.json": dumps(doc, indent=1) + "\n",
        "patching.html": patching_page(exp, results, check, read, problem_info),
    }
    if args.report:
        from analysis.cli.main import settled_for_the_report
        from analysis.patching.report import add_patching_section
        from analysis.pipeline import run_problem
        from analysis.report import build_report

        clean_run = run_problem(pair.X_clean, pair.C0_clean, problem.iterations, circuit=circuit)
        with settled_for_the_report(at_scale=clean_run.capture.lean):
            report = build_report(clean_run, problem, seed=args.seed)
            add_patching_section(report, exp, results, check, read)
            files["report.html"] = report.to_html()
    return files, doc, problem_info


def compact(sweep_doc: dict) -> dict:
    """A sweep for stdout: axes, the fraction restored, and the restoring rows and cells."""
    keep = ("name", "title", "read_layer", "rows", "cols", "note", "restoring_rows", "restoring_cells")
    return {**{key: sweep_doc[key] for key in keep}, "restored": sweep_doc["values"]["restored"]}
