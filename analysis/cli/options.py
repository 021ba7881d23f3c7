"""Options shared by several commands, and their validation.

``add_problem_arguments`` adds ``--dataset/--data``, ``--k``, ``--iterations``, ``--init``, ``--seed``,
``--variant``, the blobs options and the exactness knobs; ``load_problem`` turns them into validated arrays or
raises :class:`~analysis.errors.ProblemError`, within the budgets :data:`RUN` and :data:`KEPT`
(:mod:`analysis.cli.limits`). Also here: ``--device``, ``--engine/--address``, ``--shapes``, the checks every
command gets before it runs (:func:`check_numbers`, :func:`check_path_options`, :func:`check_device`), and
:func:`usable_results`, which turns a trained model's non-finite results into bad input. Nothing here imports torch
at import time.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from analysis import engine
from analysis.cli.limits import Budget, add_budgets, limit, limit_threads
from analysis.cli.output import check_path_length
from analysis.data import (
    DATASETS, MAX_ITERATIONS, check_work, load_dataset, load_points, resolve_init, validate_problem,
)
from analysis.errors import ProblemError
from analysis import scheduler


#: A run's work, and what a lean run keeps, grow as n (d + k) per layer: blobs of 10^6 points, d = 2, k = 5, 70
#: iterations (5e8) took 187 s of CPU and a 3.0 GB peak (``cluster ... --json``, lean; docs/cli.md, "Limits").
RUN = Budget("n x (d + k) x (--iterations + 1)", 500_000_000, "about 3 minutes of CPU and 3 GB",
             "n, d: the data's")
#: A run that draws a report (``report``, ``cluster --out``) under the at-scale threshold keeps every layer's point x
#: centroid scores and pattern: blobs of 2e5 points, k = 5, 99 iterations (1e8) peaked at 10.2 GB (195 s of CPU) with
#: ``--out`` when every run did (a run at scale now keeps a bounded sample's rows: the RUN budget bounds it).
KEPT = Budget("n x k x (--iterations + 1)", 30_000_000,
              f"with a report under {scheduler.AT_SCALE_POINTS:,} points: what it keeps, about 3 GB")


#: Points a report draws per figure unless ``report --max-points`` says otherwise, and those ``cluster --out``'s report
#: draws (mirrors analysis.views.DEFAULT_MAX_POINTS, which cannot be imported here without loading torch before the
#: input is validated).
MAX_POINTS = 400


@dataclass
class LoadedProblem:
    """The problem a command was given, as :func:`load_problem` read and validated it: the points ``X`` and the
    initial centroids ``C0`` (the user's units), ``k``, the iterations, the variant spec string, where the data came
    from (``source``: a dataset's name or the file) and how the centroids were chosen (``init``, in words), and a
    bundled dataset's classes ``y`` (``None`` for a user's file)."""

    source: str
    X: np.ndarray
    C0: np.ndarray
    k: int
    iterations: int
    init: str
    variant: str
    y: np.ndarray | None = None


def seed(text: str) -> int:
    """An ``argparse`` type: a seed numpy and scikit-learn accept (0 <= seed < 2**32)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid seed {text!r}: expected an integer") from None
    if not 0 <= value < 2**32:
        raise argparse.ArgumentTypeError(f"seed must be in [0, 2**32), got {value}")
    return value


def add_problem_arguments(parser: argparse.ArgumentParser) -> None:
    src = parser.add_mutually_exclusive_group(required=True)
    src.add_argument("--dataset", metavar="NAME", help=f"bundled dataset: {', '.join(DATASETS)}")
    src.add_argument("--data", metavar="FILE", help=".csv (numeric, header optional) or .npy, one row per point")
    parser.add_argument("--k", type=int, required=True, help="number of clusters")
    limit(parser.add_argument("--iterations", type=int, default=10, metavar="T", help="Lloyd iterations (default 10)"),
          MAX_ITERATIONS, "2 T + 2 layers; Lloyd's usually converges in tens")
    parser.add_argument("--init", default="random", metavar="random|k-means++|FILE",
                        help="initial centroids: random data points, k-means++, or a file of k rows (default random)")
    parser.add_argument("--seed", type=seed, default=0, help="seed for the initialisation and blobs (default 0)")
    parser.add_argument("--variant", default="lloyd", metavar="NAME[:KEY=VALUE,...]", help=variant_help())
    blobs = parser.add_argument_group("blobs", "options of --dataset blobs")
    blobs.add_argument("--n", type=int, default=500, help="number of points (default 500)")
    blobs.add_argument("--d", type=int, default=2, help="dimension (default 2)")
    blobs.add_argument("--centers", type=int, default=3, help="number of blobs (default 3)")
    knobs = parser.add_argument_group("exactness knobs", "see circuits/sharpness.py for the safe ranges")
    knobs.add_argument("--beta", type=float, default=None, help="assignment sharpness (default: chosen from the data, see circuits/sharpness.py)")
    knobs.add_argument("--beta-update", type=float, default=None, help="update sharpness (default 4000)")
    knobs.add_argument("--tie-break", type=float, default=None, help="tie-break in unit-scaled squared distance (default: chosen from the data)")
    knobs.add_argument("--dtype", choices=("float64", "float32"), default="float64",
                       help="float64 (exact) or float32 (an approximation, reported as such)")
    add_device_argument(parser)
    add_budgets(parser, RUN)


def add_path_argument(parser: argparse.ArgumentParser) -> None:
    """``--path``: how the circuit is run (the same names as :class:`analysis.capture.ExecutionPath`); ``--threads``:
    how many threads the run may use (:class:`analysis.scheduler.Scheduler`)."""
    parser.add_argument("--path", choices=("auto", "dense", "structured"), default="auto",
                        help="execution path: the dense HookedTransformer forward, the structured path (same weights,"
                             " attention on groups of identical queries/keys, O(n k d)), or auto: structured when the"
                             " circuit is structured, else dense (default auto)")
    limit_threads(parser.add_argument(
        "--threads", type=int, default=None,
        help="threads the run may use, this one included: at scale (50,000 points on) the reference, its bound and"
             " the step checks run beside the circuit (default: 2 at scale where there are 2 CPUs, else 1; the"
             " numbers do not depend on it)"))


def sharpness_from(args: argparse.Namespace, from_data: bool = False):
    """The knobs given on the command line, checked against their safe ranges.

    ``from_data``: a ``dict`` of the given knobs (``None`` if none), so the run chooses the others from its data
    (:func:`analysis.pipeline.choose_sharpness`); otherwise a whole :class:`Sharpness` with defaults filled in.
    """
    from circuits.sharpness import Sharpness

    given = {name: getattr(args, name) for name in ("beta", "beta_update", "tie_break") if getattr(args, name) is not None}
    try:
        whole = Sharpness(**given)
    except ValueError as exc:
        raise ProblemError(str(exc)) from None
    if from_data:
        return given or None
    return whole


def variant_help() -> str:
    """``--variant``'s help: the syntax, every registered variant with its parameters and their defaults."""
    from circuits.variants import REGISTERED

    listed = "; ".join(v.name + (" (" + ", ".join(f"{p.name}={p.default:g}" for p in v.parameters) + ")"
                                 if v.parameters else "") for v in REGISTERED)
    return (f"circuit variant, NAME or NAME:KEY=VALUE[,KEY=VALUE] (e.g. soft:beta=100); variants and their"
            f" parameters' defaults: {listed}. Default lloyd")


def check_variant_arg(spec: str, iterations: int, args: argparse.Namespace | None = None) -> str:
    """``--variant`` for a circuit of ``iterations`` iterations: the variant's name, or :class:`ProblemError`.

    With ``args``, also refuses an exactness knob the variant replaces by its own parameter (a ``--beta`` that the
    soft circuit would otherwise ignore in favour of its stiffness).
    """
    from circuits.variants import VariantError, check_variant, get_variant

    if iterations < 0:
        raise ProblemError(f"--iterations must be >= 0, got {iterations}")
    name, colon, rest = spec.partition(":")
    if colon and not all(item.strip() for item in rest.split(",")):
        # "soft:" or "soft:beta=1," reads as a parameter left out, not as the defaults.
        raise ProblemError(f"--variant {spec!r}: an empty parameter after {name}:; give {name} alone for the defaults,"
                           f" or KEY=VALUE pairs separated by commas")
    try:
        name = check_variant(spec, iterations)
    except VariantError as exc:
        # The registry's message names the unknown variant, or the bad parameter of a known one.
        raise ProblemError(str(exc)) from None
    variant = get_variant(spec)
    replaced = [knob for knob in variant.replaced_knobs if args is not None and getattr(args, knob, None) is not None]
    if replaced:
        flags = " and ".join("--" + knob.replace("_", "-") for knob in replaced)
        example = ",".join(f"{p.name}={p.default:g}" for p in variant.parameters)
        raise ProblemError(f"{flags}: not used by variant {name!r}, whose own parameters take that role"
                           f" (e.g. --variant {name}:{example})")
    return name


def load_problem(args: argparse.Namespace) -> LoadedProblem:
    check_variant_arg(args.variant, args.iterations, args)
    if args.dataset == "blobs":  # refused before the points are drawn
        check_run(args.n, args.d, args)
    if args.dataset is not None:
        ds = load_dataset(args.dataset, n=args.n, d=args.d, centers=args.centers, seed=args.seed)
        X, y, source = ds.X, ds.y, args.dataset
    else:
        X, y, source = load_points(args.data), None, args.data
    validate_problem(X, args.k)
    check_work(args.iterations, X.shape[1], args.k)
    check_run(X.shape[0], X.shape[1], args)
    C0, init = resolve_init(args.init, X, args.k, args.seed)
    return LoadedProblem(source, X, C0, args.k, args.iterations, init, args.variant, y)


def circuit_options_given(args: argparse.Namespace) -> bool:
    """Whether the options name an altered circuit (``--variant``) or an exactness knob: options of Lloyd's circuit
    and its variants, which a trained model and a construction, with knobs of their own, do not take."""
    from circuits.variants import get_variant

    return (not get_variant(args.variant).unaltered
            or any(getattr(args, knob) is not None for knob in ("beta", "beta_update", "tie_break")))


def check_run(n: int, d: int, args: argparse.Namespace) -> None:
    """:data:`RUN` of ``n`` points in ``d`` dimensions."""
    RUN.check({"n": n, "d": d, "--k": args.k, "--iterations": args.iterations},
              total=n * (d + args.k) * (args.iterations + 1))


def check_kept(problem: LoadedProblem) -> None:
    """:data:`KEPT`: a run whose report is drawn keeps every layer's scores and pattern, under
    :data:`~analysis.scheduler.AT_SCALE_POINTS` points (at scale, those of a bounded sample alone)."""
    if problem.X.shape[0] >= scheduler.AT_SCALE_POINTS:
        return
    KEPT.check({"n": problem.X.shape[0], "--k": problem.k, "--iterations": problem.iterations},
               total=problem.X.shape[0] * problem.k * (problem.iterations + 1))


def usable_results(doc, checkpoint: str) -> None:
    """A trained model's results, before they are printed or written: a NaN or infinite number in them means its
    weights overflow on these inputs (a checkpoint is untrusted input: weights of 3e38 pass every check of the
    file), so the checkpoint is unusable: bad input, exit 2, not a document of NaN."""
    from circuits.strict_json import first_nonfinite

    found = first_nonfinite(doc)
    if found is not None:
        raise ProblemError(f"--checkpoint {checkpoint}: an unusable checkpoint: the model's numbers overflow on these"
                           f" inputs ({found[0]} is {found[1]}; its weights are too large for its dtype)")


def check_checkpoint(path: str) -> dict:
    """The validated config of ``--checkpoint`` (its training log too), read before torch is imported."""
    from circuits.training.schema import CheckpointError, read_config, read_log

    if not (Path(path) / "config.json").is_file() and not Path(path).is_file():
        raise ProblemError(f"--checkpoint {path!r}: no checkpoint there (no config.json)")
    try:
        read_log(path)
        return read_config(path)
    except CheckpointError as exc:
        raise ProblemError(str(exc)) from None


def add_device_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                        help="where torch computes: auto (cuda when available, else cpu; the default), cpu or cuda")


def resolve_device(name: str | None) -> str:
    """``--device``: cuda when available for ``auto`` (and ``None``); asking for cuda where there is none is bad
    input."""
    from circuits.devices import resolve

    try:
        return str(resolve(name))
    except ValueError:
        raise ProblemError(f"--device {name}: no CUDA device is available (use --device cpu)") from None


def check_device(args: argparse.Namespace) -> None:
    """Every command with ``--device``: an explicit device that is not there is bad input before any work (a run
    that quietly took the CPU instead would answer another question than the one asked)."""
    if getattr(args, "device", None) not in (None, "auto", "cpu"):
        resolve_device(args.device)


def cpu_only(args: argparse.Namespace, what: str) -> None:
    """``what`` (a construction, a trained checkpoint, the numpy reference) runs on the CPU: ``--device cuda`` is
    refused for it, also where CUDA is available, rather than ignored."""
    if getattr(args, "device", None) == "cuda":
        raise ProblemError(f"{what} runs on the CPU: --device cuda does not apply")


def add_engine_arguments(parser: argparse.ArgumentParser) -> None:
    """``--engine`` and ``--address``, the same on every command that runs cells (:mod:`analysis.engine`)."""
    parser.add_argument("--engine", choices=engine.ENGINES, default="serial",
                        help="serial: one cell after another in this process (default); ray: one Ray task per cell,"
                             " on a local Ray instance with one worker per core, or on --address (needs"
                             f" {engine.INSTALL})")
    parser.add_argument("--address", metavar="HOST:PORT",
                        help="an existing Ray cluster for --engine ray: HOST:PORT of its head (ray start --head),"
                             " ray://HOST:PORT (Ray Client) or 'auto' (the cluster started on this machine)")


def parse_shapes(text: str | None, d_max: int, k_max: int) -> list[tuple[int, int]]:
    """``--shapes 2x3,16x10`` -> ``[(2, 3), (16, 10)]``, each within the checkpoint's capacity."""
    from analysis.evaluation.cells import DEFAULT_SHAPES

    if text is None:
        return [(d, k) for d, k in DEFAULT_SHAPES if d <= d_max and k <= k_max]
    shapes = []
    for item in (t.strip() for t in text.split(",") if t.strip()):
        parts = item.lower().split("x")
        if len(parts) != 2 or not all(p.isdigit() for p in parts):
            raise ProblemError(f"--shapes: {item!r} is not DxK (e.g. 16x10)")
        d, k = int(parts[0]), int(parts[1])
        if not (1 <= d <= d_max and 1 <= k <= k_max):
            raise ProblemError(f"--shapes: {item!r} is outside the checkpoint's capacity d <= {d_max}, k <= {k_max}")
        shapes.append((d, k))
    if not shapes:
        raise ProblemError("--shapes is empty")
    return shapes


def run_circuit(problem: LoadedProblem, dtype, sharpness, path: str, stages, device: str | None = "cpu",
                lean: bool | None = False, threads: int | None = None, sample: int | None = None):
    """Run and verify ``problem``'s circuit on ``path`` and ``device`` (``--device``) as the stage ``circuit`` of
    ``stages`` (one step a layer); a path that cannot run it is bad input. Shared by ``cluster`` and ``report``.
    ``lean``, ``sample``: as :class:`analysis.pipeline.RunOptions`'s (``None``: lean at scale; ``sample``: the
    points a lean run keeps whole for its report)."""
    from analysis.capture import PathUnavailable
    from analysis.pipeline import RunOptions, run_problem
    from circuits.blocks import n_layers

    on_layer = stages.steps("circuit", n_layers(problem.iterations), "layer")
    options = RunOptions(path=path, device=resolve_device(device), lean=lean, on_layer=on_layer, threads=threads,
                         sample=sample)
    try:
        return run_problem(problem.X, problem.C0, problem.iterations, problem.variant, dtype, sharpness,
                           options=options)
    except PathUnavailable as exc:
        raise ProblemError(str(exc)) from None


#: The largest integer an option may take: numpy's int64, which every count and index ends up in.
INT_MAX = 2**63 - 1
#: The options of any command that name a file or a folder: their lengths are checked before the command runs.
PATH_OPTIONS = ("data", "init", "checkpoint", "out")


def check_numbers(sub: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Reject an integer option no array can hold and a float option that is NaN or infinite, for every command.

    Each command checks its own ranges; these two classes would otherwise reach numpy or torch first (an
    ``OverflowError`` or "Maximum allowed dimension exceeded" is a traceback, not a message).
    """
    for action in sub._actions:
        value = getattr(args, action.dest, None)
        flag = action.option_strings[0] if action.option_strings else action.dest
        if action.type is int and isinstance(value, int) and not -INT_MAX <= value <= INT_MAX:
            raise ProblemError(f"{flag} {value} is out of range: counts and indices here are at most 2**63 - 1 in"
                               " size, more than any memory holds")
        if action.type is float and isinstance(value, float) and not math.isfinite(value):
            raise ProblemError(f"{flag} must be a finite number, got {value}")


def check_path_options(args: argparse.Namespace) -> None:
    """:func:`~analysis.cli.output.check_path_length` for every path option a command has (``PATH_OPTIONS``)."""
    for name in PATH_OPTIONS:
        value = getattr(args, name, None)
        if isinstance(value, str):
            check_path_length(value, "--" + name, out=name == "out")
