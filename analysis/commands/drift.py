"""``kmeans-circuits drift``: how a trained model's weights and behaviour drifted from the construction."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from analysis.commands._output import check_out_file, write_output_file
from analysis.commands._problem import check_checkpoint, seed
from analysis.data import InputError

NAME = "drift"
HELP = "report (self-contained HTML) how a trained checkpoint differs from the exact construction"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--checkpoint", metavar="DIR", required=True, help="checkpoint folder written by train")
    parser.add_argument("--out", metavar="FILE", required=True, help="HTML report to write (e.g. drift.html)")
    parser.add_argument("--tasks", type=int, default=16, help="held-out tasks for the behaviour views (default 16)")
    parser.add_argument("--n", type=int, default=None, help="points per task (default: the checkpoint's)")
    parser.add_argument("--steps", type=int, default=20, help="recurrent steps (default 20)")
    parser.add_argument("--seed", type=seed, default=0, help="seed of the test stream (default 0)")
    parser.add_argument("--no-ablations", action="store_true", help="skip the ablations and the stiffness sweep")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    parser.add_argument("--json", action="store_true", help="also print the numbers and the summary as JSON")


def run(args: argparse.Namespace) -> int:
    for name in ("tasks", "steps"):
        if getattr(args, name) < 1:
            raise InputError(f"--{name} must be >= 1, got {getattr(args, name)}")
    if args.threads is not None and args.threads < 1:
        raise InputError(f"--threads must be >= 1, got {args.threads}")
    out = check_out_file(args.out, suffixes=None, example="drift.html")
    check_checkpoint(args.checkpoint)

    import torch

    from analysis.commands._progress import Stages
    from analysis.drift import analyse, drift_report, stages_of
    from circuits.training.checkpoint import CheckpointError, load_model, read_log

    if args.threads is not None:
        torch.set_num_threads(args.threads)
    try:
        model, config = load_model(args.checkpoint)
        log = read_log(args.checkpoint)
    except CheckpointError as exc:
        raise InputError(str(exc)) from None
    n = args.n if args.n is not None else config["training"]["n"]
    if n < model.config.k:
        raise InputError(f"--n {n} is below k={model.config.k}")
    with Stages(NAME, stages_of(with_ablations=not args.no_ablations) + ["report"]) as stages:
        analysis = analyse(model, config, log, tasks=args.tasks, n=n, steps=args.steps, seed=args.seed,
                           with_ablations=not args.no_ablations, stage=stages.start)
        stages.start("report")
        html = drift_report(analysis, title=f"What training changed: {Path(args.checkpoint).name}").to_html()
    write_output_file(out, html)
    if args.json:
        print(json.dumps(analysis.to_dict()))
    else:
        print("\n".join(f"- {s}" for s in analysis.summary))
        print(f"wrote {out}")
    return 0
