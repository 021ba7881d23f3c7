"""``kmeans-circuits discover``: run a circuit-discovery method on a construction and score it against the
task's ground truth (:mod:`analysis.discovery.truth`), beside the random and weights-only baselines.

A *task* is a construction, corruption families (``--corruption``) and an ablation kind (``--ablation``); the
method runs on ``--pairs`` pairs of each family, drawn from blobs (``--n --d --k``) or from the points of
``--dataset/--data`` (initialisations drawn by the families' samplers from ``--seed``). ``--method`` is a
built-in (ACDC, EAP, EAP-IG) or a plug-in ``module:function``. ``--out DIR`` writes ``discovery.json`` and
``discovery.html``, all or nothing. ``--table`` runs every method on every construction, family, ablation and
metric and prints docs/discovery.md's tables (``--out DIR``: also the table as JSON and as Markdown, and the ROC
figures, one per construction). Exit codes: 0 done, 2 bad input (one line, nothing written).
"""

from __future__ import annotations

import argparse
import json
import math

from analysis.cli.options import seed as seed_type
from analysis.constructions import CONSTRUCTIONS
from analysis.errors import ProblemError

NAME = "discover"
HELP = ("circuit discovery (ACDC, EAP, EAP-IG or a plug-in module:function) on a construction, scored against the"
        " task's proven ground truth beside random and weights-only baselines")

CORRUPTIONS = ("move-centroid", "move-point", "swap-centroids", "add-outlier")
ABLATIONS = ("resample", "zero", "mean")
METRICS = ("kl", "l2")
FILES = ("discovery.json", "discovery.html")
TABLE_FILES = ("table.json", "table.md", "figures.html")
#: Ranges of the integer options (stated in --help).
RANGES = {"d": (1, 8), "k": (2, 6), "n": (2, 200), "iterations": (0, 8), "steps": (1, 64), "pairs": (1, 32),
          "seeds": (1, 20), "step": (1, 20), "jobs": (1, 8), "sample": (2, 200)}
#: At most this many candidate edges (the learned swap at one step has 3,938): ACDC tries each, EAP scores each.
MAX_CANDIDATES = 4000
#: Estimated work ``candidates x pairs x tokens^2 x blocks`` of one run, and of the whole table: about ten minutes
#: on 2 cores each (the default run is 1.5e6; the default table 2.3e8).
MAX_WORK = 1e9
MAX_TABLE_WORK = 6e8


def _constructions() -> tuple[str, ...]:
    from circuits.variants import REGISTERED

    return tuple(v.name for v in REGISTERED) + tuple(CONSTRUCTIONS)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    limits = ", ".join(f"--{k} {lo}..{hi}" for k, (lo, hi) in RANGES.items())
    parser.epilog = (f"Limits: {limits}; at most {MAX_CANDIDATES} candidate edges; estimated work (candidates x pairs"
                     f" x tokens^2 x blocks) at most {MAX_WORK:g} for a run and {MAX_TABLE_WORK:g} for --table"
                     " (about ten minutes on 2 cores each); a refusal names the limit.")
    parser.add_argument("--method", default="acdc", metavar="NAME|MODULE:FUNCTION",
                        help="acdc, eap, eap-ig, or a plug-in function (docs/discovery.md, 'Your own method')")
    parser.add_argument("--variant", default="lloyd", metavar="NAME",
                        help=f"the construction: {', '.join(_constructions())} ({' and '.join(CONSTRUCTIONS)}:"
                             " --iterations is their steps)")
    src = parser.add_mutually_exclusive_group()
    src.add_argument("--dataset", metavar="NAME", help="points of a bundled dataset (iris, ...; blobs: --n --d)")
    src.add_argument("--data", metavar="FILE", help="points of a .csv or .npy file, one row per point")
    parser.add_argument("--sample", type=int, metavar="N", help="--dataset/--data: use N points of it, drawn by --seed")
    parser.add_argument("--d", type=int, default=2, help="blobs: dimensions")
    parser.add_argument("--k", type=int, default=3, help="clusters (and centroid tokens)")
    parser.add_argument("--n", type=int, default=12, help="blobs: points (--checkpoint: at least 3 per cluster)")
    parser.add_argument("--iterations", type=int, default=2, help="Lloyd iterations of the circuit (2T+2 blocks)")
    parser.add_argument("--seed", type=seed_type, default=0, help="seed of the drawn problems (0 <= seed < 2**32)")
    parser.add_argument("--pairs", type=int, default=6, help="pairs drawn per corruption family")
    parser.add_argument("--corruption", default="move-point", metavar="LIST",
                        help=f"comma-separated corruption families from {', '.join(CORRUPTIONS)} (add-outlier alone)")
    parser.add_argument("--ablation", choices=ABLATIONS, default="resample",
                        help="what a removed edge carries: the corrupted run's output (ACDC's default), 0, or the"
                             " mean over the pairs' clean runs")
    parser.add_argument("--metric", choices=METRICS, default="kl",
                        help="kl: KL divergence of the soft assignment (ACDC's default); l2: the readout's position"
                             " between the ablated and the clean run")
    parser.add_argument("--threshold", type=float, default=1e-3, help="ACDC: the threshold of the reported subgraph")
    parser.add_argument("--steps", type=int, default=8, help="EAP-IG: interpolation steps")
    parser.add_argument("--group", action="store_true",
                        help="ACDC: test the edges from one source into one destination node together")
    parser.add_argument("--out", metavar="DIR", help="write discovery.json and discovery.html (--table: the table's"
                                                     " files) here")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the summary")
    parser.add_argument("--table", action="store_true",
                        help="run every method on every construction, family, ablation and metric (--seeds datasets)")
    parser.add_argument("--seeds", type=int, default=3, help="--table: datasets per task; --checkpoint: problems")
    parser.add_argument("--constructions", default="lloyd,soft,trimmed,spherical,distractor", metavar="LIST",
                        help="--table: comma-separated constructions (swap and learned at d=1 k=2 n=8, one step)")
    parser.add_argument("--jobs", type=int, default=2, help="--table: constructions run at once (processes)")
    parser.add_argument("--checkpoint", metavar="DIR",
                        help="a trained recurrent checkpoint (checkpoints/headline): discover on one step of it and"
                             " score against the construction it started from, edges training added marked")
    parser.add_argument("--step", type=int, default=2, help="--checkpoint: which recurrent step (>= 1)")


def _names(text: str, allowed, flag: str) -> list[str]:
    names = [c.strip() for c in text.split(",") if c.strip()]
    unknown = [c for c in names if c not in allowed]
    if not names or unknown or len(set(names)) != len(names):
        raise ProblemError(f"{flag}: give distinct names from {', '.join(allowed)}"
                           + (f" (unknown: {', '.join(unknown)})" if unknown else ""))
    return names


def check(args: argparse.Namespace) -> list[str]:
    """Validate before any heavy import; returns the corruptions."""
    for name, (low, high) in RANGES.items():
        value = getattr(args, name)
        if value is not None and not low <= value <= high:
            raise ProblemError(f"--{name} must be in {low}..{high} (a limit of discover: --help lists them), got {value}")
    if args.n < args.k:
        raise ProblemError(f"--n {args.n} is fewer points than --k {args.k} clusters")
    if not 0 <= args.threshold < math.inf:
        raise ProblemError(f"--threshold must be a finite number >= 0, got {args.threshold}")
    corruptions = _names(args.corruption, CORRUPTIONS, "--corruption")
    if "add-outlier" in corruptions and len(corruptions) > 1:
        raise ProblemError("--corruption add-outlier adds a point token: run it alone, not with other corruptions")
    if args.table and args.checkpoint:
        raise ProblemError("--table and --checkpoint are two different runs: give one")
    if args.sample is not None and args.dataset is None and args.data is None:
        raise ProblemError("--sample draws from --dataset/--data: give one of them")
    constructions = _constructions()
    if args.variant not in constructions:
        raise ProblemError(f"--variant {args.variant!r}: choose one of {', '.join(constructions)}")
    swap = args.variant in CONSTRUCTIONS
    if swap and args.iterations < 1:
        raise ProblemError(f"--variant {args.variant} runs --iterations steps: at least 1, got 0")
    if swap and "add-outlier" in corruptions:
        raise ProblemError(f"--variant {args.variant}: add-outlier adds a point token; use the other corruptions")
    args.construction_list = tuple(_names(args.constructions, constructions, "--constructions"))
    return corruptions


def _load_points(args: argparse.Namespace):
    """``(X, source)`` for --dataset/--data (``None`` for blobs), checked against the limits."""
    import numpy as np

    from analysis.data import load_dataset, load_points, validate_problem

    if args.dataset in (None, "blobs") and args.data is None:
        return None, f"blobs, d={args.d} n={args.n}"
    X = load_dataset(args.dataset).X if args.dataset is not None else load_points(args.data)
    source = args.dataset or args.data
    if args.sample is not None:
        if args.sample > len(X):
            raise ProblemError(f"--sample {args.sample}: {source} has only {len(X)} points")
        X = X[np.sort(np.random.default_rng(args.seed).choice(len(X), args.sample, replace=False))]
        source += f" ({args.sample} points drawn with seed {args.seed})"
    low, high = RANGES["n"]
    if not low <= len(X) <= high or X.shape[1] > RANGES["d"][1]:
        raise ProblemError(f"{source}: {len(X)} points in {X.shape[1]} dimensions; discover takes {low}..{high} points"
                           f" in at most {RANGES['d'][1]} dimensions (--sample N draws fewer points)")
    validate_problem(X, args.k)
    return X, source


def _strict(obj):
    """JSON-safe: non-finite floats become ``null`` (strict JSON has no NaN or Infinity), numpy scalars numbers."""
    import numpy as np

    if isinstance(obj, dict):
        return {str(k): _strict(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_strict(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return _strict(obj.tolist())
    if isinstance(obj, (np.floating, float)):
        return float(obj) if math.isfinite(obj) else None
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.bool_):
        return bool(obj)
    return obj


def dumps(obj, **kwargs) -> str:
    return json.dumps(_strict(obj), allow_nan=False, **kwargs)


def run(args: argparse.Namespace) -> int:
    from analysis.cli.output import check_out_dir

    corruptions = check(args)
    if args.table:
        return run_table(args, check_out_dir(args.out, TABLE_FILES))
    out = check_out_dir(args.out, FILES)
    if args.checkpoint:
        return run_checkpoint(args, out, corruptions)
    X, source = _load_points(args)
    if X is not None:
        args.n, args.d = X.shape
    return run_one(args, out, corruptions, X, source, _edge_limit(args.variant, args.iterations))


def _edge_limit(name: str, iterations: int) -> int:
    from analysis.discovery.graph import candidate_count
    from analysis.discovery.run import construction_layers

    edges = candidate_count(construction_layers(name, iterations))
    if edges > MAX_CANDIDATES:
        raise ProblemError(f"--variant {name} --iterations {iterations}: {edges} candidate edges; discover takes at"
                           f" most {MAX_CANDIDATES} (the learned swap at one step has 3938)")
    return edges


def run_one(args: argparse.Namespace, out, corruptions: list[str], X, source: str, edges: int) -> int:
    from analysis.discovery.edges import CorruptionInvisible
    from analysis.discovery.methods import MethodError, load_method
    from analysis.discovery.report import discovery_report, summary
    from analysis.discovery.run import (build_construction, construction_layers, construction_tokens, discover,
                                        family_truth, make_patcher)
    from analysis.discovery.table import dataset_pairs

    try:
        load_method(args.method)  # a plug-in that cannot be imported is refused before any work
    except MethodError as exc:
        raise ProblemError(f"--method: {exc}") from None
    pairs = [p for c in corruptions for p in dataset_pairs(c, args.d, args.k, args.n, args.seed, args.pairs, X)]
    if not pairs:
        raise ProblemError(f"--corruption {args.corruption}: applies to none of the {args.pairs} drawn problems")
    # Refused before the circuit is built: the pairs drawn (the patcher may drop some the corruption cannot change),
    # the sequence's tokens and the blocks, all known from the construction's declaration.
    tokens = construction_tokens(args.variant, args.n, args.k)
    blocks = construction_layers(args.variant, args.iterations)
    work = float(edges) * len(pairs) * tokens**2 * blocks
    if work > MAX_WORK:
        raise ProblemError(f"estimated work {work:.3g} (candidates x pairs x tokens^2 x blocks = {edges} x"
                           f" {len(pairs)} x {tokens}^2 x {blocks}) exceeds discover's limit {MAX_WORK:g}"
                           " (about ten minutes on 2 cores); use fewer --pairs, --n or --iterations")
    circuit = build_construction(args.variant, args.d, args.k, args.iterations)
    try:
        patcher = make_patcher(circuit, pairs, None, args.ablation, args.metric, drop_invisible=True)
    except CorruptionInvisible as exc:
        raise ProblemError(f"--corruption {args.corruption} (seed {args.seed}): {exc}; try another seed") from None
    except ValueError as exc:
        raise ProblemError(f"--variant {args.variant}: {exc}") from None
    truth = family_truth(circuit, patcher.graph, patcher.pairs, args.ablation, X)
    try:
        result = discover(circuit, patcher.pairs, args.method, threshold=args.threshold, steps=args.steps,
                          patcher=patcher, group=args.group, truth=truth)
    except MethodError as exc:
        raise ProblemError(f"--method: {exc}") from None
    rounds = "steps" if args.variant in CONSTRUCTIONS else "iterations"
    description = (f"{args.variant}, {source}, k={args.k}, {args.iterations} {rounds},"
                   f" {len(patcher.pairs)} pairs ({', '.join(corruptions)}; seed {args.seed}), {args.ablation}"
                   f" ablation, {args.metric} metric")
    payload = {"problem": {"variant": args.variant, "source": source, "d": args.d, "k": args.k, "n": args.n,
                           "iterations": args.iterations, "seed": args.seed, "corruptions": corruptions,
                           "pairs": len(patcher.pairs), "grouped_acdc": args.group},
               **result.to_dict()}
    if out is not None:
        from analysis.cli.output import write_output_dir

        write_output_dir(out, {"discovery.json": dumps(payload, indent=1),
                               "discovery.html": discovery_report(result, description).to_html()})
    if args.json:
        print(dumps(payload))
        return 0
    print(description)
    print(summary(result))
    if out is not None:
        print(f"wrote {out / 'discovery.json'} and {out / 'discovery.html'}")
    return 0


def run_table(args: argparse.Namespace, out) -> int:
    from analysis.cli.progress import Stages
    from analysis.discovery.figures import table_page, table_text
    from analysis.discovery.table import TABLE_CORRUPTIONS, run_table as table

    work = _table_work(args)
    if work > MAX_TABLE_WORK:
        raise ProblemError(f"--table with --seeds {args.seeds} and --constructions {args.constructions}: estimated work"
                           f" {work:.3g} exceeds the table's limit {MAX_TABLE_WORK:g} (about ten minutes on 2 cores;"
                           f" the default table is 2.3e8): use fewer --seeds or constructions")
    with Stages(NAME, ["table"]) as stages:
        step = stages.steps("table", len(args.construction_list), "construction")
        result = table(args.construction_list, TABLE_CORRUPTIONS, tuple(range(args.seeds)),
                       jobs=args.jobs, progress=step)
    text = table_text(result)
    payload = {"rows": result.rows, "truths": result.truths, "skipped": result.skipped, "seeds": args.seeds,
               "constructions": list(args.construction_list)}
    if out is not None:
        from analysis.cli.output import write_output_dir

        write_output_dir(out, {"table.json": dumps(payload, indent=1), "table.md": text,
                               "figures.html": table_page(result).to_html()})
    print(dumps(payload) if args.json else text)
    return 0


def _table_work(args: argparse.Namespace) -> float:
    """The table's estimated work, from each construction's blocks and tokens (no circuit built)."""
    from analysis.discovery.graph import candidate_count
    from analysis.discovery.run import construction_layers, construction_tokens
    from analysis.discovery.table import PAIRS, SWAP_SHAPE, TABLE_CORRUPTIONS, TABLE_SHAPE, table_tasks

    tasks = len(table_tasks(TABLE_CORRUPTIONS, ABLATIONS)) * len(METRICS) * args.seeds * PAIRS
    total = 0.0
    for name in args.construction_list:
        d, k, n, t = TABLE_SHAPE if name not in CONSTRUCTIONS else SWAP_SHAPE
        blocks = construction_layers(name, t)
        total += candidate_count(blocks) * construction_tokens(name, n, k)**2 * blocks * tasks
    return total


def run_checkpoint(args: argparse.Namespace, out, corruptions: list[str]) -> int:
    from analysis.discovery.headline import headline_discovery
    from analysis.discovery.report import discovery_report
    from circuits.training.checkpoint import CheckpointError

    if "add-outlier" in corruptions:
        raise ProblemError("--checkpoint: add-outlier changes the number of point tokens; use the other corruptions")
    try:
        result = headline_discovery(args.checkpoint, step=args.step, n=args.n, seeds=tuple(range(args.seeds)),
                                    corruptions=tuple(corruptions))
    except (CheckpointError, ValueError) as exc:
        raise ProblemError(f"--checkpoint {args.checkpoint!r}: {exc}") from None
    summary = result.summary()
    if out is not None:
        from analysis.cli.output import write_output_dir

        res = result.results[load_name(args.method)]
        write_output_dir(out, {"discovery.json": dumps(result.to_dict(), indent=1),
                               "discovery.html": discovery_report(res, summary.replace("\n", "; ")).to_html()})
    print(dumps(result.to_dict()) if args.json else summary)
    return 0


def load_name(method: str) -> str:
    """--checkpoint runs the three built-ins; the page shows --method's (ACDC for a plug-in)."""
    return method if method in ("acdc", "eap", "eap-ig") else "acdc"
