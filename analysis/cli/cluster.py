"""``kmeans-circuits cluster``: build the circuit, run it, verify it layer by layer, write the results."""

from __future__ import annotations

import argparse
import io

import numpy as np

from analysis.cli.output import check_out_dir, write_output_dir
from analysis.cli.limits import add_budgets
from analysis.cli.options import (
    KEPT, MAX_POINTS, LoadedProblem, add_path_argument, add_problem_arguments, check_checkpoint, check_kept,
    circuit_options_given, load_problem, run_circuit, cpu_only, sharpness_from, usable_results,
)
from analysis.constructions import CONSTRUCTIONS, choices_help, trained_constructions
from analysis.errors import ProblemError
from analysis.wording import count
from circuits.strict_json import dumps

NAME = "cluster"
HELP = "cluster data with the k-means transformer and verify it against its reference algorithm"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_problem_arguments(parser)
    parser.add_argument("--out", metavar="DIR",
                        help="write labels.csv, centroids.csv, verification.json and report.html here (with --checkpoint:"
                             " labels.csv, centroids.csv and evaluation.json, the comparison with Lloyd's; the"
                             " circuit report is for constructed circuits)")
    parser.add_argument("--json", action="store_true", help="print one JSON object on stdout instead of the table")
    add_path_argument(parser)
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--checkpoint", metavar="FILE", default=None,
                       help="run a trained model (checkpoint folder from `train`) instead of the construction;"
                            " the data must have the model's d and --k its k. A checkpoint of a trained construction"
                            f" ({', '.join(trained_constructions())}: a file of its factors, or a folder holding one"
                            " such as checkpoints/learned) runs that --construction with its factors")
    which.add_argument("--construction", choices=tuple(CONSTRUCTIONS), default=None,
                       help="run a general construction instead of Lloyd's circuit, verified against its own numpy"
                            f" reference and compared with Lloyd's: {choices_help()}; k >= 2; --out gets labels.csv,"
                            " centroids.csv, verification.json, report.html")
    add_budgets(parser, KEPT)


def csv_text(rows, header: list[str]) -> str:
    buf = io.StringIO()
    buf.write(",".join(header) + "\n")
    for row in rows:
        buf.write(",".join(repr(float(v)) if not isinstance(v, int) else str(v) for v in row) + "\n")
    return buf.getvalue()


def labels_csv(labels) -> str:
    """labels.csv: the header and one integer label a line, as :func:`csv_text` writes them, from one list of
    strings (a million labels in 0.2 s against 0.9 s row by row). The cast is checked: a label that is not an
    integer is an error, not a truncation."""
    values = np.asarray(labels).astype(np.int64, casting="safe").tolist() if len(labels) else []
    return "\n".join(["label", *map(str, values)]) + "\n"


def output_files(result, problem) -> dict[str, str]:
    d = result.encoded.d
    verification = {"problem": {"source": problem.source, "init": problem.init, "n": result.encoded.n, "d": d,
                                "k": problem.k, "iterations": problem.iterations},
                    **result.report.to_dict()}
    return {
        "labels.csv": labels_csv(result.labels),
        "centroids.csv": csv_text(result.centroids.tolist(), [f"x{m}" for m in range(d)]),
        "verification.json": dumps(verification, indent=1) + "\n",
    }


#: What ``--out`` receives from a constructed circuit, and from a trained model (``--checkpoint``).
OUT_FILES = ("labels.csv", "centroids.csv", "verification.json", "report.html")
CHECKPOINT_OUT_FILES = ("labels.csv", "centroids.csv", "evaluation.json")
CONSTRUCTION_OUT_FILES = ("labels.csv", "centroids.csv", "verification.json", "report.html")


def run(args: argparse.Namespace) -> int:
    from analysis.cli.constructions import selected_construction

    problem = load_problem(args)
    construction, checkpoint = selected_construction(args)
    out = check_out_dir(args.out, CONSTRUCTION_OUT_FILES if construction is not None else
                        CHECKPOINT_OUT_FILES if getattr(args, "checkpoint", None) else OUT_FILES,
                        previous=OUT_FILES + CHECKPOINT_OUT_FILES)
    if construction is not None or getattr(args, "checkpoint", None) is not None:
        cpu_only(args, "--checkpoint" if getattr(args, "checkpoint", None) is not None else "--construction")
    if construction is not None:
        return run_construction(args, problem, out, construction, checkpoint)
    if getattr(args, "checkpoint", None) is not None:
        return run_checkpoint(args, problem, out)
    sharpness = sharpness_from(args, from_data=True)
    if out is not None:
        check_kept(problem)

    from analysis.cli.progress import Stages
    from analysis.pipeline import DTYPES

    with Stages(NAME, ["circuit"] + (["report"] if out is not None else [])) as stages:
        # At scale the run keeps only what the verification reads, and for --out's report the rows of the points
        # its figures draw (a sample chosen before the run).
        result = run_circuit(problem, DTYPES[args.dtype], sharpness, args.path, stages, args.device,
                             lean=None, threads=args.threads, sample=None if out is None else MAX_POINTS)
        if out is not None:
            from analysis.cli.main import settled_for_the_report
            from analysis.report import build_report

            stages.start("report")
            with settled_for_the_report(at_scale=result.capture.lean):
                files = output_files(result, problem)
                files["report.html"] = build_report(result, problem, seed=args.seed).to_html()
    if out is not None:
        write_output_dir(out, files)
    if args.json:
        print(dumps(result.to_json()))
    else:
        rep = result.report
        print(f"{problem.source}: n={result.encoded.n} d={result.encoded.d} k={problem.k}, init {problem.init},"
              f" variant {problem.variant}, {count(problem.iterations, 'iteration')},"
              f" beta={result.circuit.sharpness.beta:g},"
              f" {result.capture.path} path" + (f" ({result.capture.path_note})" if result.capture.path_note else "")
              + f", device {result.encoded.device}")
        if result.resolution is not None:
            units = result.resolution.in_user_units(rep.scale)
            ties = (f"; ties at the data's precision within {rep.tolerances.tie_window:.3g}"
                    if rep.tolerances.tie_window else "")
            print(f"sharpness from the data: tie-break {units['tie_break_user_sq_distance']:.3g}, hard above"
                  f" {units['hard_gap_user_sq_distance']:.3g} (squared data units){ties}")
        print(rep.summary())
        print(f"inertia {result.inertia:.10g}" + (f"; wrote {out}" if out else ""))
    return 0 if result.report.verified else 1


def write_model_files(out, names: tuple[str, str, str], doc: dict, problem: LoadedProblem, d: int,
                      more: dict[str, str] | None = None) -> None:
    """A trained model's or a construction's ``--out``: labels, centroids, the JSON document and ``more`` files
    (all or none)."""
    write_output_dir(out, {**dict(zip(names, (
        labels_csv(doc["labels"]),
        csv_text(doc["centroids"], [f"x{m}" for m in range(d)]),
        dumps({"problem": {"source": problem.source, "init": problem.init}, **doc}, indent=1) + "\n",
    ))), **(more or {})})


def run_checkpoint(args: argparse.Namespace, problem: LoadedProblem, out) -> int:
    """``cluster --checkpoint``: a trained model on this problem (see :func:`analysis.evaluation.checkpoint.cluster_with_checkpoint`)."""

    model = check_checkpoint(args.checkpoint)["model"]
    d, k = model["d"], model["k"]
    if circuit_options_given(args):
        raise ProblemError("--checkpoint runs a trained model: --variant and the exactness knobs do not apply")
    if model.get("general", False):
        if problem.X.shape[1] > d or problem.k > k:
            raise ProblemError(f"--checkpoint {args.checkpoint!r} is a general model for d <= {d}, k <= {k}; the data"
                               f" has d={problem.X.shape[1]} and --k is {problem.k}")
        d = problem.X.shape[1]
    elif problem.X.shape[1] != d or problem.k != k:
        raise ProblemError(f"--checkpoint {args.checkpoint!r} is a model for d={d}, k={k}; the data has"
                           f" d={problem.X.shape[1]} and --k is {problem.k}")
    from analysis.evaluation.checkpoint import cluster_with_checkpoint
    from circuits.training.schema import CheckpointError

    try:
        doc = cluster_with_checkpoint(args.checkpoint, problem.X, problem.C0, problem.iterations)
    except CheckpointError as exc:
        raise ProblemError(str(exc)) from None
    usable_results(doc, args.checkpoint)
    verdict = checkpoint_verdict(doc)
    doc.update({key: value for key, value in verdict.to_dict().items() if key != "verified"})
    if out is not None:
        write_model_files(out, CHECKPOINT_OUT_FILES, doc, problem, d)
    if args.json:
        print(dumps(doc))
    else:
        print(f"{problem.source}: n={doc['n']} d={d} k={problem.k}, init {problem.init}, trained model {args.checkpoint},"
              f" {count(problem.iterations, 'step')}")
        print(" iter  objective model  objective Lloyd's  labels = Lloyd's")
        for rec in doc["per_iteration"]:
            print(f"{rec['iteration']:5d} {rec['objective_circuit']:16.6g} {rec['objective_reference']:18.6g}"
                  f" {rec['label_agreement']:16.2%}")
        print(verdict)
        print(f"max centroid difference of the export from the training forward {doc['export_error']:.2g} (unit"
              f" coordinates); inertia {doc['inertia']:.10g} (Lloyd's {doc['lloyd_inertia']:.10g}, ratio"
              f" {doc['ratio_to_lloyd']:.4f})" + (f"; wrote {out}" if out else ""))
    return 0 if doc["verified"] else 1


def checkpoint_verdict(doc: dict):
    """A trained model's verdict (:mod:`analysis.verify.verdict`): its export against its training forward."""
    from analysis.verify import verdict as vocabulary

    if doc["verified"]:
        return vocabulary.trained_export(doc["export_tolerance"])
    return vocabulary.failure(f"the exported HookedTransformer's centroids differ from the training forward's by"
                              f" {doc['export_error']:.3g} > {doc['export_tolerance']:.3g} (unit coordinates)",
                              reference="the model's training forward")


def run_construction(args: argparse.Namespace, problem: LoadedProblem, out, construction, checkpoint=None) -> int:
    """``cluster --construction NAME`` (or ``--checkpoint`` of a trained construction's ``checkpoint``): the
    construction's transformer on this problem, verified against its numpy reference and compared with Lloyd's
    (and with the untrained swap where the document holds its objectives); ``--out`` gets its page too."""
    from analysis.cli.constructions import construction_result

    result, page = construction_result(args, problem, construction, checkpoint, NAME, page=out is not None)
    doc = result.doc
    d = doc["d"]
    if out is not None:
        write_model_files(out, CONSTRUCTION_OUT_FILES[:3], doc, problem, d, {"report.html": page.to_html()})
    if args.json:
        print(dumps(doc))
        return 0 if doc["verified"] else 1
    print(f"{problem.source}: n={doc['n']} d={d} k={problem.k}, init {problem.init}, {construction.describe(doc)}"
          f" ({doc['layers']} layers), {count(problem.iterations, 'step')}, {doc['path']} path"
          + (f" ({doc['path_note']})" if doc["path_note"] else ""))
    swap = "objective_swap" in doc["per_iteration"][0]
    print(table_text(doc, swap))
    print(doc["verdict"])
    for note in doc["notes"][1:]:  # the first states the contract, which the verdict says in short
        print(f"note: {note}")
    versus = f"; untrained swap's {doc['swap_inertia']:.10g}" if swap else ""
    print(f"inertia {doc['inertia']:.10g} (Lloyd's {doc['lloyd_inertia']:.10g}, ratio {doc['ratio_to_lloyd']:.4f}"
          f"{versus})" + (f"; wrote {out}" if out else ""))
    return 0 if doc["verified"] else 1


def table_text(doc: dict, swap: bool) -> str:
    """The per-step table of a construction's run: t, the candidate kept, the objectives (the construction's, its
    numpy reference's, Lloyd's, the untrained swap's), labels, margins."""
    from analysis.constructions.common import CANDIDATE_LABELS
    from analysis.report.construction import gap_text

    width = max(len(label) for label in CANDIDATE_LABELS.values())
    lines = ["    t  kept" + " " * (width - 3) + "objective  numpy reference's  Lloyd's objective"
             + ("   swap objective" if swap else "") + "  labels = reference's  min margin  margin to the next"]
    for rec in doc["per_iteration"]:
        lines.append(f"{rec['iteration']:5d}  {CANDIDATE_LABELS[rec['choice']]:{width}s} {rec['objective_circuit']:14.8g}"
                     f" {rec['objective_reference']:18.8g} {rec['objective_lloyd']:18.8g}"
                     + (f" {rec['objective_swap']:16.8g}" if swap else "")
                     + f" {rec['label_agreement']:21.2%} {rec['min_margin']:11.3g}  {gap_text(rec)}")
    return "\n".join(lines)
