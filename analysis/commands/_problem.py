"""Options shared by every command that poses a clustering problem, and their validation.

``add_problem_arguments`` adds ``--dataset/--data``, ``--k``, ``--iterations``, ``--init``, ``--seed``,
``--variant``, the blobs options and the exactness knobs; ``load_problem`` turns them into validated arrays or
raises :class:`~analysis.data.InputError`. Neither imports torch.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from analysis.data import (
    DATASETS, MAX_ITERATIONS, InputError, check_work, load_dataset, load_points, resolve_init, validate_problem,
)


@dataclass
class Problem:
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
    parser.add_argument("--iterations", type=int, default=10, metavar="T",
                        help=f"Lloyd iterations, at most {MAX_ITERATIONS} (default 10)")
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


def add_path_argument(parser: argparse.ArgumentParser) -> None:
    """``--path``: how the circuit is run (the same names as :class:`analysis.capture.ExecutionPath`)."""
    parser.add_argument("--path", choices=("auto", "dense", "structured"), default="auto",
                        help="execution path: the dense HookedTransformer forward, the structured path (same weights,"
                             " attention on groups of identical queries/keys, O(n k d)), or auto: structured when the"
                             " circuit is structured, else dense (default auto)")


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
        raise InputError(str(exc)) from None
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
    """``--variant`` for a circuit of ``iterations`` iterations: the variant's name, or :class:`InputError`.

    With ``args``, also refuses an exactness knob the variant replaces by its own parameter (a ``--beta`` that the
    soft circuit would otherwise ignore in favour of its stiffness).
    """
    from circuits.variants import VariantError, check_variant, get_variant

    if iterations < 0:
        raise InputError(f"--iterations must be >= 0, got {iterations}")
    name, colon, rest = spec.partition(":")
    if colon and not all(item.strip() for item in rest.split(",")):
        # "soft:" or "soft:beta=1," reads as a parameter left out, not as the defaults.
        raise InputError(f"--variant {spec!r}: an empty parameter after {name}:; give {name} alone for the defaults,"
                         f" or KEY=VALUE pairs separated by commas")
    try:
        name = check_variant(spec, iterations)
    except VariantError as exc:
        # The registry's message names the unknown variant, or the bad parameter of a known one.
        raise InputError(str(exc)) from None
    variant = get_variant(spec)
    replaced = [knob for knob in variant.replaced_knobs if args is not None and getattr(args, knob, None) is not None]
    if replaced:
        flags = " and ".join("--" + knob.replace("_", "-") for knob in replaced)
        example = ",".join(f"{p.name}={p.default:g}" for p in variant.parameters)
        raise InputError(f"{flags}: not used by variant {name!r}, whose own parameters take that role"
                         f" (e.g. --variant {name}:{example})")
    return name


def load_problem(args: argparse.Namespace) -> Problem:
    check_variant_arg(args.variant, args.iterations, args)
    if args.dataset is not None:
        ds = load_dataset(args.dataset, n=args.n, d=args.d, centers=args.centers, seed=args.seed)
        X, y, source = ds.X, ds.y, args.dataset
    else:
        X, y, source = load_points(args.data), None, args.data
    validate_problem(X, args.k)
    check_work(args.iterations, X.shape[1], args.k)
    if getattr(args, "construction", None) == "swap" and args.iterations < 1:
        raise InputError("--construction swap needs --iterations >= 1 (each iteration is one swap step)")
    C0, init = resolve_init(args.init, X, args.k, args.seed)
    return Problem(source, X, C0, args.k, args.iterations, init, args.variant, y)


def check_checkpoint(path: str) -> dict:
    """The validated config of ``--checkpoint`` (its training log too), read before torch is imported."""
    from circuits.training.schema import CheckpointError, read_config, read_log

    if not (Path(path) / "config.json").is_file() and not Path(path).is_file():
        raise InputError(f"--checkpoint {path!r}: no checkpoint there (no config.json)")
    try:
        read_log(path)
        return read_config(path)
    except CheckpointError as exc:
        raise InputError(str(exc)) from None
