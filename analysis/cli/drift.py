"""``kmeans-circuits drift``: how a trained model's weights and behaviour drifted from the construction."""

from __future__ import annotations

import argparse
from pathlib import Path

from analysis.cli.limits import Budget, add_budgets, limit, limit_threads
from analysis.cli.output import check_out_file, write_output_file
from analysis.cli.options import check_checkpoint, parse_shapes, seed, usable_results
from analysis.constructions import CONSTRUCTIONS, trained_constructions
from analysis.data import MAX_ITERATIONS
from analysis.errors import ProblemError
from circuits.strict_json import dumps

NAME = "drift"
HELP = "report (self-contained HTML) how a trained checkpoint differs from the exact construction"

#: Every view runs each held-out task through the model step by step, some several times (the ablations, the
#: stiffness sweep): the work is tasks x points x steps per shape. The defaults (16 x 512 x 20 on the headline
#: checkpoint) take 50 s on the 2-core machine, so the limit is about 5 minutes.
WORK = Budget("--tasks x --n x --steps x shapes", 1_000_000, "about 5 minutes on 2 cores")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--checkpoint", metavar="DIR",
                       help="checkpoint folder written by train; a checkpoint of a trained construction (a file of"
                            " its factors or a folder holding one, such as checkpoints/learned) gets that"
                            " construction's report")
    which.add_argument("--construction", choices=trained_constructions(), default=None,
                       help="a trained construction with its shipped factors against the untrained construction it"
                            " started from: " + ", ".join(f"{name} = {CONSTRUCTIONS[name].summary}"
                                                          for name in trained_constructions()))
    parser.add_argument("--out", metavar="FILE", required=True, help="HTML report to write (e.g. drift.html)")
    parser.add_argument("--tasks", type=int, default=16, help="held-out tasks for the behaviour views (default 16)")
    parser.add_argument("--n", type=int, default=None,
                        help="points per task (default: the checkpoint's; 128 for the learned construction)")
    limit(parser.add_argument("--steps", type=int, default=20, help="recurrent steps (default 20)"), MAX_ITERATIONS,
          "each step runs every task through the model once more")
    parser.add_argument("--seed", type=seed, default=0, help="seed of the test stream (default 0)")
    parser.add_argument("--no-ablations", action="store_true", help="skip the ablations and the stiffness sweep")
    limit_threads(parser.add_argument("--threads", type=int, default=1,
                                      help="torch CPU threads (default 1: the drift's tensors are small, and a second"
                                           " thread on a busy machine costs more than it gives)"))
    parser.add_argument("--json", action="store_true", help="also print the numbers and the summary as JSON")
    parser.add_argument("--shapes", default=None, metavar="DxK,...",
                        help="general checkpoints: measure the behaviour on held-out tasks of each shape (default"
                             " 2x3,16x10,64x10); the HTML report is the first shape's, --json holds all of them")
    add_budgets(parser, WORK)


def run(args: argparse.Namespace) -> int:
    for name in ("tasks", "steps"):
        if getattr(args, name) < 1:
            raise ProblemError(f"--{name} must be >= 1, got {getattr(args, name)}")
    if args.threads < 1:
        raise ProblemError(f"--threads must be >= 1, got {args.threads}")
    out = check_out_file(args.out, example="drift.html")
    from analysis.cli.constructions import selected_construction

    construction, _ = selected_construction(args)
    if construction is not None:
        return run_trained(args, out, construction)
    checkpoint = check_checkpoint(args.checkpoint)
    model_cfg = checkpoint["model"]
    general = bool(model_cfg.get("general", False))
    if args.shapes is not None and not general:
        raise ProblemError("--shapes needs a general checkpoint (trained with --general)")
    shapes = parse_shapes(args.shapes or "2x3,16x10,64x10", model_cfg["d"], model_cfg["k"]) if general else [None]
    n = args.n if args.n is not None else checkpoint["training"]["n"]
    check_work(args, n, len(shapes))

    import torch

    from analysis.cli.progress import Stages
    from analysis.drift import analyse, stages_of
    from analysis.report.drift import drift_report
    from circuits.training.checkpoint import CheckpointError, load_model
    from circuits.training.schema import read_log

    torch.set_num_threads(args.threads)
    try:
        model, config = load_model(args.checkpoint)
        log = read_log(args.checkpoint)
    except CheckpointError as exc:
        raise ProblemError(str(exc)) from None
    if n < max(s[1] if s else model.config.k for s in shapes):
        raise ProblemError(f"--n {n} is below k")
    label = [f"d={shape[0]} k={shape[1]}: " if shape else "" for shape in shapes]
    names = [f"{lab}{name}" for lab in label for name in stages_of(with_ablations=not args.no_ablations)]
    analyses = []
    with Stages(NAME, names + ["report"]) as stages:
        for lab, shape in zip(label, shapes):
            analyses.append(analyse(model, config, log, tasks=args.tasks, n=n, steps=args.steps, seed=args.seed,
                                    with_ablations=not args.no_ablations, shape=shape,
                                    stage=lambda name, lab=lab: stages.start(lab + name)))
        docs = [{**({"d": s[0], "k": s[1]} if s else {}), **a.to_dict()} for s, a in zip(shapes, analyses)]
        usable_results(docs, args.checkpoint)
        stages.start("report")
        shape_note = f" (d={shapes[0][0]}, k={shapes[0][1]})" if shapes[0] else ""
        html = drift_report(analyses[0], title=f"What training changed: {Path(args.checkpoint).name}{shape_note}").to_html()
    write_output_file(out, html)
    if args.json:
        print(dumps(docs[0] if len(docs) == 1 and not general else {"shapes": docs}))
    else:
        for shape, analysis in zip(shapes, analyses):
            if shape:
                print(f"d={shape[0]} k={shape[1]}:")
            print("\n".join(f"- {s}" for s in analysis.summary))
        print(f"wrote {out}")
    return 0


def check_work(args: argparse.Namespace, n: int, shapes: int) -> None:
    """:data:`WORK`, once ``n`` (a checkpoint's own by default) and the number of shapes are known."""
    WORK.check({"--tasks": args.tasks, "--n": n, "--steps": args.steps, "shapes": shapes})


def run_trained(args: argparse.Namespace, out, construction) -> int:
    """``drift --construction NAME`` (or ``--checkpoint`` of a trained construction's checkpoint): the factors in
    the weights against the untrained construction's, and the trained candidate on held-out tasks (the
    construction's ``training.drift``, a :class:`~analysis.drift.learned.LearnedDrift` record, drawn by
    :mod:`analysis.report.learned`: the layers of the code keep pages out of the declarations)."""
    flag = f"--checkpoint {args.checkpoint}" if args.checkpoint is not None else f"--construction {construction.name}"
    if args.shapes is not None:
        raise ProblemError(f"--shapes: {flag} reads its weights at one shape (the factors do not depend on it)")
    n = args.n if args.n is not None else 128
    check_work(args, n, 1)
    if n < 12:
        raise ProblemError(f"--n must be >= 12 (the general tasks' largest k), got {n}")
    try:
        factors = construction.factors(args.checkpoint)
    except ValueError as exc:
        raise ProblemError(f"{flag}: {exc}") from None
    import torch

    from analysis.cli.progress import Stages
    from analysis.report.learned import learned_drift_report

    torch.set_num_threads(args.threads)
    with Stages(NAME, ["weights and behaviour", "report"]) as stages:
        stages.start("weights and behaviour")
        drift = construction.training.drift(factors, steps=args.steps, tasks=args.tasks, n=n, seed=args.seed,
                                            with_behaviour=not args.no_ablations)
        stages.start("report")
        html = learned_drift_report(drift).to_html()
    write_output_file(out, html)
    if args.json:
        print(dumps(drift.to_dict()))
    else:
        print("\n".join(f"- {s}" for s in drift.summary))
        print(f"wrote {out}")
    return 0
