"""``kmeans-circuits evaluate``: a trained model against Lloyd's from the same initial centroids."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass

from analysis import engine
from analysis.cli.exits import report_failures
from analysis.cli.limits import Budget, add_budgets, limit, limit_threads
from analysis.cli.options import (
    add_device_argument, add_engine_arguments, check_checkpoint, cpu_only, parse_shapes, resolve_device, seed,
    usable_results,
)
from analysis.cli.progress import Cells
from analysis.constructions import CONSTRUCTIONS, choices_help, trained_constructions
from analysis.data import DATASETS, EVALUATION_BLOBS_N, MAX_ITERATIONS, load_dataset
from analysis.errors import ProblemError
from analysis.wording import count
from circuits.strict_json import dumps

NAME = "evaluate"
HELP = "compare a trained checkpoint (or a general construction) with Lloyd's algorithm on held-out tasks and real data"
#: Points per task of a construction's held-out tasks by default: the general checkpoint's training n.
CONSTRUCTION_N = 128

#: The model and Lloyd's run every held-out task and every initialisation of each dataset step by step. The
#: defaults on the headline checkpoint ((320 x 512 + 10 x (1797 + 1000)) x 20 = 3.8e6) take about 3.5 minutes on
#: the 2-core machine; the limit is about 2.6 times that.
WORK = Budget("(--tasks x --n x shapes + --dataset-inits x points) x --steps", 10_000_000, "about 9 minutes on 2 cores",
              "shapes: those of --shapes for a general model, else 1; points: of every dataset of --datasets")
#: The held-out tasks of one shape are drawn at once, and one forward holds --chunk of them (at most all): a
#: residual row of the model per point (320 x 512 by default).
POINTS = Budget("--tasks x --n", 500_000, "held-out points drawn at once; one forward holds up to all of them")

FAMILIES = ("gaussian", "cauchy", "gumbel", "laplace", "lognormal")  # circuits.problems.FAMILIES, import-free


def add_arguments(parser: argparse.ArgumentParser) -> None:
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--checkpoint", metavar="DIR",
                       help="checkpoint folder written by train; a checkpoint of a trained construction"
                            f" ({', '.join(trained_constructions())}: a file of its factors or a folder holding one,"
                            " such as checkpoints/learned) evaluates that --construction with its factors")
    which.add_argument("--construction", choices=tuple(CONSTRUCTIONS), default=None,
                       help="evaluate a general construction instead, like a general checkpoint (any d <= 64,"
                            f" 2 <= k <= 16): {choices_help()}; exact, float64, CPU")
    parser.add_argument("--tasks", type=int, default=320, help="held-out random tasks (default 320; 0: none)")
    limit(parser.add_argument("--steps", type=int, default=20, help="recurrent steps / Lloyd iterations (default 20)"),
          MAX_ITERATIONS, "each step runs every task through the model and Lloyd's once more")
    parser.add_argument("--init", choices=("random", "k-means++"), default="random",
                        help="initial centroids of both (default: k random data points)")
    parser.add_argument("--n", type=int, default=None, help="points per task (default: the checkpoint's)")
    parser.add_argument("--family", choices=FAMILIES, default="gaussian", help="noise family of the tasks")
    parser.add_argument("--seed", type=seed, default=0, help="seed of the test stream (default 0)")
    parser.add_argument("--datasets", default=None, metavar="NAMES",
                        help="comma-separated scikit-learn datasets (default digits,blobs; 'none' to skip)")
    parser.add_argument("--dataset-inits", type=int, default=10, help="initialisations per dataset (default 10)")
    parser.add_argument("--chunk", type=int, default=16, help="tasks per forward pass (memory)")
    limit_threads(parser.add_argument("--threads", type=int, default=None, help="torch CPU threads"))
    parser.add_argument("--shapes", default=None, metavar="DxK,...",
                        help="general checkpoints: the shapes of the held-out tasks, e.g. 2x3,16x10 (default"
                             " 2x3,4x8,8x5,16x10,32x16,64x8); --tasks is then per shape, and --datasets are run in"
                             " raw units at their true k (default iris,wine,breast_cancer,digits)")
    parser.add_argument("--no-optimum", action="store_true",
                        help="general checkpoints: skip the comparison with scikit-learn's KMeans(n_init=10)")
    add_device_argument(parser)
    parser.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    add_engine_arguments(parser)
    add_budgets(parser, WORK, POINTS)


def parse_datasets(text: str) -> list[str]:
    if text.strip().lower() in ("", "none"):
        return []
    names = [t.strip() for t in text.split(",") if t.strip()]
    for name in names:
        if name not in DATASETS:
            raise ProblemError(f"unknown dataset {name!r}; choose from {', '.join(DATASETS)} or 'none'")
    return names


@dataclass(frozen=True)
class Plan:
    """What ``evaluate`` runs, from its validated options: the real ``datasets``, and for a general checkpoint or a
    construction the ``shapes`` (d, k) of its held-out tasks (``None`` otherwise); ``construction`` the one it
    evaluates (its declaration: ``--construction``, or the trained construction whose checkpoint ``--checkpoint``
    names) and ``factors`` a trained one's."""

    datasets: list[str]
    shapes: list[tuple[int, int]] | None = None
    construction: object = None
    factors: object = None


def construction_of(args: argparse.Namespace) -> tuple[object, object]:
    """The construction ``evaluate`` runs and a trained one's factors: ``--construction`` (the shipped factors),
    or the trained construction whose checkpoint ``--checkpoint`` names, with its factors; ``(None, None)`` for a
    trained model."""
    from analysis.cli.constructions import selected_construction

    construction, _ = selected_construction(args)
    if construction is None:
        return None, None
    try:
        return construction, construction.factors(args.checkpoint)
    except ValueError as exc:
        raise ProblemError(f"--checkpoint {args.checkpoint}: {exc}") from None


def validate(args: argparse.Namespace) -> Plan:
    for name in ("steps", "chunk", "dataset_inits"):
        if getattr(args, name) < 1:
            raise ProblemError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.tasks < 0:
        raise ProblemError(f"--tasks must be >= 0, got {args.tasks}")
    if args.threads is not None and args.threads < 1:
        raise ProblemError(f"--threads must be >= 1, got {args.threads}")
    construction, factors = construction_of(args)
    if construction is not None:
        from analysis.constructions.common import CAPACITY

        cpu_only(args, "--construction (float64)")
        model = {"d": CAPACITY[0], "k": CAPACITY[1], "general": True}
    else:
        checkpoint = check_checkpoint(args.checkpoint)
        model = checkpoint["model"]
    general = bool(model.get("general", False))
    if args.shapes is not None and not general:
        raise ProblemError("--shapes needs a general checkpoint (trained with --general)")
    shapes = None
    if general:
        shapes = parse_shapes(args.shapes, model["d"], model["k"])
        if construction is not None and any(k < 2 for _, k in shapes):
            raise ProblemError(f"--shapes: the {construction.name} construction needs k >= 2")
    default = "iris,wine,breast_cancer,digits" if general else "digits,blobs"
    datasets = parse_datasets(args.datasets if args.datasets is not None else default)
    if general and "blobs" in datasets:
        raise ProblemError("--datasets blobs: a general checkpoint is evaluated on real data at its true k")
    if not args.tasks and not datasets:
        raise ProblemError("nothing to evaluate: --tasks is 0 and --datasets is none")
    n = args.n if args.n is not None else CONSTRUCTION_N if construction is not None else checkpoint["training"]["n"]
    points = sum(EVALUATION_BLOBS_N if name == "blobs" else len(load_dataset(name).X) for name in datasets)
    shape_count = len(shapes) if shapes else 1
    WORK.check({"--tasks": args.tasks, "--n": n, "shapes": shape_count, "--dataset-inits": args.dataset_inits,
                "points": points, "--steps": args.steps},
               total=(args.tasks * n * shape_count + args.dataset_inits * points) * args.steps)
    POINTS.check({"--tasks": args.tasks, "--n": n})
    engine.check(args.engine, args.address)
    return Plan(datasets, shapes, construction, factors)


def format_table(doc: dict) -> str:
    lines = []
    if "tasks" in doc:
        t = doc["tasks"]
        lines.append(f"{t['count']} held-out tasks: n={t['n']} d={t['d']} k={t['k']}, family {t['family']},"
                     f" init {t['init']} (same initial centroids for both)")
        lines.append(" step  model obj  Lloyd obj  ratio mean  median  better  worse  ARI model/Lloyd  NMI model/Lloyd")
        for r in t["per_step"]:
            lines.append(f"{r['step']:5d} {r['model_objective']:10.3f} {r['lloyd_objective']:10.3f} {r['ratio_mean']:11.4f}"
                         f" {r['ratio_median']:7.4f} {r['frac_model_better']:7.1%} {r['frac_model_worse']:6.1%}"
                         f"   {r['model_ari']:.3f} / {r['lloyd_ari']:.3f}   {r['model_nmi']:.3f} / {r['lloyd_nmi']:.3f}")
    for ds in doc.get("datasets", []):
        f = ds["final"]
        lines.append(f"{ds['name']}: n={ds['n']} ({ds['prepared']}), {ds['classes']} classes, k={ds['k']},"
                     f" {ds['inits']} {ds['init']} inits, {count(ds['steps'], 'step')}: objective model"
                     f" {f['model_objective']:.4g}"
                     f" Lloyd {f['lloyd_objective']:.4g} (ratio {f['ratio_mean']:.4f}); ARI {f['model_ari']:.3f} /"
                     f" {f['lloyd_ari']:.3f}, NMI {f['model_nmi']:.3f} / {f['lloyd_nmi']:.3f}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    plan = validate(args)

    import torch

    from analysis.evaluation import DatasetRun, evaluation_cell, task_chunks, tasks_evaluation
    from circuits.training.checkpoint import CheckpointError, load_model
    from circuits.training.tasks import TEST, task_stream

    if args.threads is not None:
        torch.set_num_threads(args.threads)
    if plan.construction is not None:
        model = plan.construction.model(plan.factors)
        doc = {"construction": model.name, "general": True, "capacity": [model.config.d, model.config.k]}
        if model.factors is not None:
            doc["alphas"] = [float(a) for a in model.factors]
            if args.checkpoint is not None:
                doc["checkpoint"] = str(args.checkpoint)
        return run_general(args, model, doc, args.n if args.n is not None else CONSTRUCTION_N, plan)
    device = resolve_device(args.device)
    try:
        model, config = load_model(args.checkpoint)
    except CheckpointError as exc:
        raise ProblemError(str(exc)) from None
    model.to(device)
    if model.config.general:
        doc = {"checkpoint": str(args.checkpoint), "general": True, "capacity": [model.config.d, model.config.k],
               "trained": {key: config["training"][key] for key in ("d", "k", "n", "steps", "init", "loss")},
               "best_step": config.get("progress", {}).get("best_step")}
        return run_general(args, model, doc, args.n if args.n is not None else config["training"]["n"], plan)
    n = args.n if args.n is not None else config["training"]["n"]
    if n < model.config.k:
        raise ProblemError(f"--n {n} is below k={model.config.k}")
    doc: dict = {"checkpoint": str(args.checkpoint), "trained": {key: config["training"][key] for key in
                                                                  ("d", "k", "n", "steps", "init")},
                 "best_step": config.get("progress", {}).get("best_step")}
    # One cell per chunk of held-out tasks and one per dataset, on the chosen engine; gathered in this order.
    chunks = []
    if args.tasks:
        tasks = task_stream(64, n, model.config.d, model.config.k, args.tasks, args.seed, TEST, args.family, args.init)
        chunks = task_chunks(tasks, args.steps, args.chunk)
    runs = [DatasetRun(name, args.steps, args.dataset_inits, args.init, args.seed, max(1, args.chunk // 4))
            for name in plan.datasets]
    print(f"evaluating on {args.tasks} held-out tasks ({len(chunks)} chunks) and {len(runs)} dataset(s)"
          f" ({args.engine} engine) ...", file=sys.stderr)
    job = Job(evaluation_cell, chunks, runs, "tasks",
              lambda results: tasks_evaluation(tasks, args.steps, chunks, results).to_dict(), format_table)
    return run_cells(args, model, doc, job)


@dataclass(frozen=True)
class Job:
    """The cells of one evaluation: ``cells`` then ``runs`` (one per dataset), each through ``fn``; ``gather``
    makes the finished cells' results into ``doc[key]``, ``text`` the document into the table printed."""

    fn: Callable
    cells: list
    runs: list
    key: str
    gather: Callable[[list], dict]
    text: Callable[[dict], str]


def run_cells(args: argparse.Namespace, model, doc: dict, job: Job) -> int:
    """Run ``job`` on the chosen engine, put its cells' gathered results and the datasets in ``doc``, print ``doc``
    (JSON or ``job.text``); the exit status names the failed cells, if any."""
    cells, runs = job.cells, job.runs
    with Cells(NAME, len(cells) + len(runs)) as bar:
        outcome = engine.map_cells(job.fn, [*cells, *runs], args.engine, args.address, bar.update, shared=model)
    if any(r is not None for r in outcome.results[: len(cells)]):
        doc[job.key] = job.gather(outcome.results[: len(cells)])
    if runs:
        doc["datasets"] = [r for r in outcome.results[len(cells):] if r is not None]
    if outcome.failures:
        doc["failed"] = [f.cell for f in outcome.failures]
    if args.checkpoint is not None and "construction" not in doc:
        usable_results(doc, args.checkpoint)
    print(dumps(doc) if args.json else job.text(doc))
    return report_failures(outcome.failures)


def run_general(args: argparse.Namespace, model, doc: dict, n: int, plan: Plan) -> int:
    """A general checkpoint or construction: held-out tasks at each ``--shapes`` (``n`` points each) and real data
    in raw units at the true k; ``doc`` is the JSON document's header."""
    from analysis.evaluation import DatasetRun, ShapeGrid, general_cell, shapes_evaluation

    if n < max(k for _, k in plan.shapes):
        raise ProblemError(f"--n {n} is below the largest k of --shapes")
    from analysis.data import load_dataset

    for name in plan.datasets:
        ds = load_dataset(name)
        k = len(set(ds.y.tolist()))
        if ds.X.shape[1] > model.config.d or k > model.config.k:
            raise ProblemError(f"--datasets {name}: d={ds.X.shape[1]}, k={k} is outside the checkpoint's capacity"
                               f" d <= {model.config.d}, k <= {model.config.k}")
    # One cell per shape and one per dataset, on the chosen engine; gathered in this order.
    cells = ShapeGrid(plan.shapes, args.tasks, n, args.steps, args.init, args.seed, args.chunk,
                      with_optimum=not args.no_optimum).cells() if args.tasks else []
    runs = [DatasetRun(name, args.steps, args.dataset_inits, args.init, args.seed, max(1, args.chunk // 8))
            for name in plan.datasets]
    print(f"evaluating on {args.tasks} held-out tasks at each of {len(cells)} shapes and {len(runs)} dataset(s)"
          f" ({args.engine} engine) ...", file=sys.stderr)
    job = Job(general_cell, cells, runs, "shapes", lambda results: shapes_evaluation(cells, results), format_general)
    return run_cells(args, model, doc, job)


def format_general(doc: dict) -> str:
    lines = []
    rows = [(f"d={s['d']} k={s['k']}", s["anytime"]) for s in doc.get("shapes", {}).get("per_shape", [])]
    if rows:
        sh = doc["shapes"]
        lines.append(f"{sh['tasks_per_shape']} held-out general tasks per shape, n={sh['n']}, init {sh['init']},"
                     f" {count(sh['steps'], 'step')} (same initial centroids for both)")
        rows.append(("all shapes", sh["overall"]))
    rows += [(f"{ds['name']} (k={ds['k']}, {ds['inits']} inits)", ds["anytime"]) for ds in doc.get("datasets", [])]
    lines.append(f"{'':24s} ratio mean  median     max  worst step  never rises  model/opt  Lloyd/opt")
    for label, a in rows:
        opt = (f"  {a['model_over_optimum']:9.4f}  {a['lloyd_over_optimum']:9.4f}" if "model_over_optimum" in a else "")
        lines.append(f"{label:24s} {a['ratio_mean']:10.4f} {a['ratio_median']:7.4f} {a['ratio_max']:7.4f}"
                     f" {a['worst_step_mean']:11.4f} {a['frac_never_rises']:12.1%}{opt}")
    for ds in doc.get("datasets", []):
        f = ds["final"]
        lines.append(f"{ds['name']}: ARI model {f['model_ari']:.3f} / Lloyd's {f['lloyd_ari']:.3f},"
                     f" NMI {f['model_nmi']:.3f} / {f['lloyd_nmi']:.3f}")
    return "\n".join(lines)
