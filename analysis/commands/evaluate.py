"""``kmeans-circuits evaluate``: a trained model against Lloyd's from the same initial centroids."""

from __future__ import annotations

import argparse
import json
import sys

from analysis import engine
from analysis.commands._problem import check_checkpoint, seed
from analysis.data import DATASETS, InputError

NAME = "evaluate"
HELP = "compare a trained checkpoint with Lloyd's algorithm on held-out tasks and real datasets"

FAMILIES = ("gaussian", "cauchy", "gumbel", "laplace", "lognormal")  # circuits.training.tasks.FAMILIES, import-free


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--checkpoint", metavar="DIR", required=True, help="checkpoint folder written by train")
    parser.add_argument("--tasks", type=int, default=320, help="held-out random tasks (default 320; 0: none)")
    parser.add_argument("--steps", type=int, default=20, help="recurrent steps / Lloyd iterations (default 20)")
    parser.add_argument("--init", choices=("random", "k-means++"), default="random",
                        help="initial centroids of both (default: k random data points)")
    parser.add_argument("--n", type=int, default=None, help="points per task (default: the checkpoint's)")
    parser.add_argument("--family", choices=FAMILIES, default="gaussian", help="noise family of the tasks")
    parser.add_argument("--seed", type=seed, default=0, help="seed of the test stream (default 0)")
    parser.add_argument("--datasets", default=",".join(("digits", "blobs")), metavar="NAMES",
                        help="comma-separated scikit-learn datasets (default digits,blobs; 'none' to skip)")
    parser.add_argument("--dataset-inits", type=int, default=10, help="initialisations per dataset (default 10)")
    parser.add_argument("--chunk", type=int, default=16, help="tasks per forward pass (memory)")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    parser.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    engine.add_arguments(parser)


def parse_datasets(text: str) -> list[str]:
    if text.strip().lower() in ("", "none"):
        return []
    names = [t.strip() for t in text.split(",") if t.strip()]
    for name in names:
        if name not in DATASETS:
            raise InputError(f"unknown dataset {name!r}; choose from {', '.join(DATASETS)} or 'none'")
    return names


def validate(args: argparse.Namespace) -> list[str]:
    for name in ("steps", "chunk", "dataset_inits"):
        if getattr(args, name) < 1:
            raise InputError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.tasks < 0:
        raise InputError(f"--tasks must be >= 0, got {args.tasks}")
    if args.threads is not None and args.threads < 1:
        raise InputError(f"--threads must be >= 1, got {args.threads}")
    check_checkpoint(args.checkpoint)
    datasets = parse_datasets(args.datasets)
    if not args.tasks and not datasets:
        raise InputError("nothing to evaluate: --tasks is 0 and --datasets is none")
    engine.check(args.engine, args.address)
    return datasets


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
                     f" {ds['inits']} {ds['init']} inits, {ds['steps']} steps: objective model {f['model_objective']:.4g}"
                     f" Lloyd {f['lloyd_objective']:.4g} (ratio {f['ratio_mean']:.4f}); ARI {f['model_ari']:.3f} /"
                     f" {f['lloyd_ari']:.3f}, NMI {f['model_nmi']:.3f} / {f['lloyd_nmi']:.3f}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    datasets = validate(args)

    import torch

    from analysis.evaluate import DatasetRun, evaluation_cell, task_chunks, tasks_evaluation
    from circuits.training.checkpoint import CheckpointError, load_model
    from circuits.training.tasks import TEST, task_stream

    if args.threads is not None:
        torch.set_num_threads(args.threads)
    try:
        model, config = load_model(args.checkpoint)
    except CheckpointError as exc:
        raise InputError(str(exc)) from None
    n = args.n if args.n is not None else config["training"]["n"]
    if n < model.config.k:
        raise InputError(f"--n {n} is below k={model.config.k}")
    doc: dict = {"checkpoint": str(args.checkpoint), "trained": {key: config["training"][key] for key in
                                                                  ("d", "k", "n", "steps", "init")},
                 "best_step": config.get("progress", {}).get("best_step")}
    # One cell per chunk of held-out tasks and one per dataset, on the chosen engine; gathered in this order.
    chunks = []
    if args.tasks:
        tasks = task_stream(64, n, model.config.d, model.config.k, args.tasks, args.seed, TEST, args.family, args.init)
        chunks = task_chunks(tasks, args.steps, args.chunk)
    runs = [DatasetRun(name, args.steps, args.dataset_inits, args.init, args.seed, max(1, args.chunk // 4))
            for name in datasets]
    print(f"evaluating on {args.tasks} held-out tasks ({len(chunks)} chunks) and {len(runs)} dataset(s)"
          f" ({args.engine} engine) ...", file=sys.stderr)
    with engine.progress_bar(len(chunks) + len(runs), NAME) as bar:
        outcome = engine.map_cells(evaluation_cell, [*chunks, *runs], args.engine, args.address, bar.update, shared=model)
    if any(r is not None for r in outcome.results[: len(chunks)]):
        doc["tasks"] = tasks_evaluation(tasks, args.steps, chunks, outcome.results[: len(chunks)]).to_dict()
    if datasets:
        doc["datasets"] = [r for r in outcome.results[len(chunks):] if r is not None]
    if outcome.failures:
        doc["failed"] = [f.cell for f in outcome.failures]
    if args.json:
        print(json.dumps(doc))
    else:
        print(format_table(doc))
    return engine.report_failures(outcome.failures)
