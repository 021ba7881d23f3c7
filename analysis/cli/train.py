"""``kmeans-circuits train``: train the recurrent k-means transformer on random clustering tasks."""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

from analysis.cli.limits import Budget, add_budgets, limit, limit_threads
from analysis.cli.options import add_device_argument, resolve_device, seed
from analysis.cli.output import check_out_dir
from analysis.data import MAX_ITERATIONS
from analysis.errors import ProblemError
from analysis.wording import count
from circuits.strict_json import dumps

NAME = "train"
HELP = "train the k-means transformer (tied update+assign blocks, applied recurrently) to beat Lloyd's"

#: The gradient keeps every recurrent step's activations: about 110 bytes per unit of batch x n x iterations x
#: model width in float32 (measured: 1.8 GB of peak resident set at the defaults, d=32, k=10, width 164, 1.3e7 units;
#: 7.7 GB at --iterations 100). The limit is about 6 GB.
MEMORY = Budget("--batch x --n x --iterations x width", 50_000_000, "the activations the gradient keeps, about 6 GB",
                "width: the model's, 4 d + 3 k + 6, counted twice in float64")
#: A validation runs every held-out task through the model without a gradient: the defaults (64 x 512 x 20) take
#: seconds, and the limit keeps one within minutes.
VALIDATION = Budget("--val-tasks x --n x --eval-iterations", 10_000_000, "one validation, minutes on 2 cores")
#: Sizes above these are no model this tool trains: the weights alone grow as d^2.
MAX_WIDTH = 1024


def add_arguments(parser: argparse.ArgumentParser) -> None:
    limit(parser.add_argument("--d", type=int, required=True, help="dimension of the points"), MAX_WIDTH,
          "the weights grow as d^2")
    limit(parser.add_argument("--k", type=int, required=True, help="number of clusters"), MAX_WIDTH,
          "the weights grow as k^2")
    parser.add_argument("--n", type=int, default=512, help="points per training and validation task (default 512)")
    limit(parser.add_argument("--steps", type=int, required=True, help="optimiser steps (total, also when resuming)"),
          100_000, "ten times the paper's 10,000-step runs")
    parser.add_argument("--init", choices=("exact", "random"), default="exact",
                        help="start from the construction at finite sharpness (default) or from random weights")
    parser.add_argument("--seed", type=seed, default=0, help="seed of the tasks and of a random init (default 0)")
    parser.add_argument("--out", metavar="DIR", required=True, help="checkpoint folder (created or resumed)")
    parser.add_argument("--resume", action="store_true", help="continue the run in DIR up to --steps")
    parser.add_argument("--json", action="store_true", help="print the last log record as JSON on stdout")
    parser.add_argument("--general", action="store_true",
                        help="one model for any d' <= --d and k' <= --k, trained on the general task family"
                             " (shapes, cluster sizes, anisotropic and heavy-tailed clusters, units and inits drawn"
                             " per batch)")
    add_device_argument(parser)
    opt = parser.add_argument_group("optimisation")
    opt.add_argument("--batch", type=int, default=8, help="tasks per step (default 8)")
    opt.add_argument("--lr", type=float, default=1e-3, help="Adam learning rate (default 1e-3; weights are"
                     " preconditioned by their initial size)")
    opt.add_argument("--clip", type=float, default=1.0, help="gradient-norm clip (default 1)")
    opt.add_argument("--gamma", type=float, default=10.0, help="temperature gamma_L of the soft-min loss (default 10)")
    limit(opt.add_argument("--iterations", type=int, default=20, help="recurrent steps in training (default 20)"),
          MAX_ITERATIONS, "each step's activations are kept for the gradient")
    limit(opt.add_argument("--eval-iterations", type=int, default=20, help="recurrent steps in validation (default 20)"),
          MAX_ITERATIONS, "each step runs every validation task once more")
    limit(opt.add_argument("--val-tasks", type=int, default=64, help="held-out validation tasks (default 64)"), 10_000,
          "every validation runs all of them")
    opt.add_argument("--val-every", type=int, default=50, help="validate and checkpoint every this many steps")
    limit_threads(opt.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)"))
    opt.add_argument("--loss", choices=("final", "anytime"), default="final",
                     help="final: the paper's soft-min objective after --iterations steps (default); anytime: every"
                          " step against Lloyd's from the same start, with a hinge on steps worse than Lloyd's and"
                          " on rises (--gamma is then relative to Lloyd's mean squared distance)")
    opt.add_argument("--support", choices=("dense", "construction"), default="dense",
                     help="which head weights train: all (dense, default) or only those the construction sets")
    opt.add_argument("--hinge", type=float, default=1.0, help="anytime loss: weight of relu(ratio - 1) (default 1)")
    opt.add_argument("--rise", type=float, default=1.0, help="anytime loss: weight of a rise between steps (default 1)")
    arch = parser.add_argument_group("architecture and initial sharpness (unit-scaled squared distances)")
    arch.add_argument("--beta", type=float, default=5.0, help="initial assignment stiffness a (default 5)")
    arch.add_argument("--growth", type=float, default=0.0, help="initial schedule growth g (default 0: constant)")
    arch.add_argument("--beta-update", type=float, default=5.0, help="initial update stiffness b (default 5)")
    limit(arch.add_argument("--d-head", type=int, default=None, help="head width (default: the construction's)"),
          4 * MAX_WIDTH + 3 * MAX_WIDTH + 6, "the widest model's width")
    arch.add_argument("--no-reembed", action="store_true", help="do not re-embed constants between steps")
    arch.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    arch.add_argument("--last", action="store_true", help="model.safetensors holds the last weights, not the best"
                      " validation step")
    add_budgets(parser, MEMORY, VALIDATION)


def config_from(args: argparse.Namespace):
    from circuits.training.construction import InitSharpness
    from circuits.training.loop import TrainConfig

    try:
        sharp = InitSharpness(beta=args.beta, growth=args.growth, beta_update=args.beta_update)
        return TrainConfig(
            d=args.d, k=args.k, n=args.n, steps=args.steps, batch=args.batch, lr=args.lr, clip=args.clip,
            gamma=args.gamma, train_iterations=args.iterations, eval_iterations=args.eval_iterations,
            val_tasks=args.val_tasks, val_every=args.val_every, seed=args.seed, init=args.init,
            sharpness=sharp.to_dict(), reembed=not args.no_reembed, d_head=args.d_head, dtype=args.dtype,
            keep_best=not args.last, general=args.general, loss=args.loss, hinge=args.hinge, rise=args.rise, support=args.support,
        )
    except ValueError as exc:
        raise ProblemError(str(exc)) from None


def validate(args: argparse.Namespace) -> None:
    """Reject bad options before torch is imported (TrainConfig checks them again)."""
    for name in ("d", "k", "steps", "batch", "iterations", "eval_iterations", "val_tasks", "val_every"):
        if getattr(args, name) < 1:
            raise ProblemError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.n < args.k:
        raise ProblemError(f"--n must be at least --k, got n={args.n}, k={args.k}")
    for name in ("lr", "clip", "gamma", "beta", "beta_update"):
        value = getattr(args, name)
        # inf passes "> 0" but makes every weight NaN after one step (and a NaN checkpoint after minutes).
        if not 0 < value < float("inf"):
            raise ProblemError(f"--{name.replace('_', '-')} must be positive and finite, got {value}")
    from circuits.training.construction import trainable_layout
    from circuits.training.schema import ADAM_BETA1, max_lr

    if args.lr > max_lr(args.dtype):
        raise ProblemError(f"--lr {args.lr:g} is above {max_lr(args.dtype):.3g}: Adam's first step is lr / (1 -"
                           f" {ADAM_BETA1:g}), which must be a --dtype {args.dtype} number")
    width = trainable_layout(args.d, args.k).d_model
    MEMORY.check({"--batch": args.batch, "--n": args.n, "--iterations": args.iterations, "width": width,
                  "--dtype": args.dtype}, total=args.batch * args.n * args.iterations * width
                 * (2 if args.dtype == "float64" else 1))
    VALIDATION.check({"--val-tasks": args.val_tasks, "--n": args.n, "--eval-iterations": args.eval_iterations})
    if not 0 <= args.growth < float("inf"):
        raise ProblemError(f"--growth must be >= 0 and finite, got {args.growth}")
    if args.threads is not None and args.threads < 1:
        raise ProblemError(f"--threads must be >= 1, got {args.threads}")
    for name in ("hinge", "rise"):
        if not 0 <= getattr(args, name) < float("inf"):
            raise ProblemError(f"--{name} must be >= 0 and finite, got {getattr(args, name)}")


def diverged_message(args: argparse.Namespace, out: Path, stop: Diverged, existed: bool) -> str:
    """What to say when training stopped on a NaN; a new run that never validated a trained model is removed."""
    import shutil

    if stop.best is None:
        cause = (f"the initial model's validation is already NaN or infinite: its weights overflow --dtype {args.dtype}"
                 " (lower --beta, --growth or --beta-update, or use --dtype float64)")
    else:
        cause = (f"training diverged at step {stop.step} (loss or validation NaN or infinite; lower --lr, now"
                 f" {args.lr:g}, or the loss's --gamma, --hinge or --rise if raised)")
    if args.resume or stop.trained:
        return f"{cause}; stopped there: {args.out!r} keeps the best validated weights in model.safetensors"
    if out.exists():
        if existed:  # an empty folder given by the user: empty it again
            for entry in out.iterdir():
                shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
        else:
            shutil.rmtree(out)
    return f"{cause}; nothing written"


#: Without a terminal (a log file), a line at least this often between validations, so a run is never silent.
QUIET_LINE_S = 30.0


class Diverged(Exception):
    """The loss or the validation ratio became NaN or infinite at ``step``; ``best`` is the best validation so far."""

    def __init__(self, step: int, best: float | None, trained: bool):
        super().__init__(step)
        self.step, self.best, self.trained = step, best, trained


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def run(args: argparse.Namespace) -> int:
    validate(args)
    out = check_out_dir(args.out, marker="config.json")  # a checkpoint folder is this command's to resume
    if args.resume and not (out / "config.json").is_file():
        raise ProblemError(f"--resume: {args.out!r} holds no checkpoint")
    if not args.resume and out.exists() and any(out.iterdir()):
        raise ProblemError(f"--out {args.out!r} is not empty; use --resume to continue a run there")
    cfg = config_from(args)

    import torch

    from circuits.training.checkpoint import CheckpointError
    from circuits.training.loop import train

    device = resolve_device(args.device)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    existed = out.exists()
    progress = TrainProgress(cfg.steps, cfg.val_every)
    try:
        last = train(out, cfg, resume=args.resume, progress=progress, device=device)
    except (CheckpointError, ValueError) as exc:
        raise ProblemError(str(exc)) from None
    except Diverged as stop:
        raise ProblemError(diverged_message(args, out, stop, existed)) from None
    finally:
        progress.close()
    if args.json:
        print(dumps(last))
    else:
        from circuits.training.checkpoint import read_config

        prog = read_config(out)["progress"]
        # "step" is a training step here; the model's own steps are k-means iterations.
        print(f"after {count(last['step'], 'training step')}: validation ratio model/Lloyd's {last['val_ratio']:.4f}"
              f" (objectives after {count(cfg.eval_iterations, 'k-means iteration')}, on"
              f" {count(cfg.val_tasks, 'held-out task')}); checkpoint in {Path(args.out)} (model.safetensors: training"
              f" step {prog['best_step']}, {prog.get('best_metric', 'val_ratio')} {prog['best_val_ratio']:.4f})")
    return 0


class TrainProgress:
    """The ``progress`` callback of :func:`circuits.training.loop.train`: a bar on a terminal; else a line per
    validation, and one at least every :data:`QUIET_LINE_S` between them. A NaN or infinite loss or validation
    raises :class:`Diverged`."""

    def __init__(self, steps: int, val_every: int):
        from tqdm.auto import tqdm

        self.val_every, self.trained, self.line = val_every, False, time.monotonic()
        self.bar = tqdm(total=steps, desc="train", unit="step", file=sys.stderr, disable=None, dynamic_ncols=True)

    def __call__(self, step: int, total: int, info: dict) -> None:
        self.bar.n = step
        val = info["val_ratio"]
        self.bar.set_postfix(loss=_fmt(info["loss"]), val_ratio=_fmt(val), refresh=False)
        self.bar.refresh()
        rec = info.get("validated")
        if not math.isfinite(info["loss"]) or val is None or not math.isfinite(val):
            # Checked before the line is printed: the error is then the only line about this step.
            raise Diverged(step, info["best"], self.trained)
        if rec is not None:
            self.trained = True
        if self.bar.disable and rec is not None:
            # No terminal (a log file): one line per validation instead of a bar.
            self._say(f"step {rec['step']}/{total} loss {rec['loss']:.4f} val_ratio {rec['val_ratio']:.4f}"
                      f" val_score {rec['val_score']:.4f} worst step {max(rec['val_ratio_per_step']):.4f}"
                      f" (best {_fmt(info['best'])}) wall {rec['wall_s']:.0f}s cpu {rec['cpu_s']:.0f}s")
        elif self.bar.disable and time.monotonic() - self.line >= QUIET_LINE_S:
            following = min(total, (step // self.val_every + 1) * self.val_every)
            self._say(f"step {step}/{total} loss {info['loss']:.4f} (next validation at step {following})")

    def _say(self, text: str) -> None:
        print(text, file=sys.stderr, flush=True)
        self.line = time.monotonic()

    def close(self) -> None:
        self.bar.close()
