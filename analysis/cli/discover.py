"""``kmeans-circuits discover``: run a circuit-discovery method on a construction and score it against the
ground-truth graph derived from the construction's weights.

Makes a blobs problem (``--d``, ``--k``, ``--n``, ``--seed``), one clean/corrupted pair per ``--corruption``
(:mod:`analysis.patching.pairs`), runs ``--method`` (ACDC with a threshold sweep, EAP or EAP-IG,
:mod:`analysis.discovery`) and prints AUROC, precision and recall; ``--out DIR`` writes ``discovery.json`` and
``discovery.html`` (ground truth beside the discovered graph, the ROC curve), all or nothing. ``--table`` runs
every method on every construction over three corruptions and ``--seeds`` and prints the results table of
docs/discovery.md. Exit codes: 0 done, 2 bad input.
"""

from __future__ import annotations

import argparse
import json

from analysis.errors import ProblemError
from analysis.wording import count

NAME = "discover"
HELP = "circuit discovery (ACDC, EAP, EAP-IG) on a construction, scored against the ground truth from its weights"

METHODS = ("acdc", "eap", "eap-ig")
VARIANTS = ("lloyd", "soft", "trimmed", "spherical", "swap", "learned")
CORRUPTIONS = ("move-centroid", "move-point", "swap-centroids", "add-outlier")
FILES = ("discovery.json", "discovery.html")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--method", choices=METHODS, default="acdc", help="discovery method")
    parser.add_argument("--variant", choices=VARIANTS, default="lloyd",
                        help="the construction (default lloyd; swap and learned: --iterations is their steps)")
    parser.add_argument("--d", type=int, default=2, help="dimensions of the blobs problem")
    parser.add_argument("--k", type=int, default=3, help="clusters (and centroid tokens)")
    parser.add_argument("--n", type=int, default=12, help="points (--checkpoint: at least 3 per cluster of the model)")
    parser.add_argument("--iterations", type=int, default=2, help="Lloyd iterations of the circuit (2T+2 blocks)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the problem and its initial centroids")
    parser.add_argument("--corruption", default="move-point", metavar="LIST",
                        help=f"comma-separated corruptions, one pair each, from {', '.join(CORRUPTIONS)}"
                             " (add-outlier alone: it adds a token)")
    parser.add_argument("--threshold", type=float, default=1e-3, help="ACDC: the threshold of the reported subgraph")
    parser.add_argument("--steps", type=int, default=8, help="EAP-IG: interpolation steps")
    parser.add_argument("--out", metavar="DIR", help="write discovery.json and discovery.html here")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the summary")
    parser.add_argument("--table", action="store_true",
                        help="run every method on every construction (3 corruptions x --seeds) and print the table")
    parser.add_argument("--seeds", type=int, default=3, help="--table, --checkpoint: problems per corruption")
    parser.add_argument("--constructions", default="lloyd,soft,trimmed,spherical", metavar="LIST",
                        help=f"--table: comma-separated constructions from {', '.join(VARIANTS)} (swap and learned"
                             " at d=1 k=2 n=8, one step)")
    parser.add_argument("--group", action="store_true",
                        help="ACDC: test the edges from one source into one destination node together")
    parser.add_argument("--checkpoint", metavar="DIR",
                        help="a trained recurrent checkpoint (checkpoints/headline): discover on one step of it and"
                             " score against the construction it started from, edges training added marked")
    parser.add_argument("--step", type=int, default=2, help="--checkpoint: which recurrent step (>= 1)")


def check(args: argparse.Namespace) -> list[str]:
    """Validate before any heavy import; returns the corruptions."""
    for name, low, high in (("d", 1, 8), ("k", 2, 6), ("n", 2, 200), ("iterations", 0, 8), ("steps", 1, 64),
                            ("seeds", 1, 20)):
        value = getattr(args, name)
        if not low <= value <= high:
            raise ProblemError(f"--{name} must be in {low}..{high} (discovery runs a forward pass per edge), got {value}")
    if args.n < args.k:
        raise ProblemError(f"--n {args.n} is fewer points than --k {args.k} clusters")
    if args.seed < 0:
        raise ProblemError(f"--seed must be >= 0, got {args.seed}")
    if not 0 <= args.threshold < float("inf"):
        raise ProblemError(f"--threshold must be a finite number >= 0, got {args.threshold}")
    corruptions = [c.strip() for c in args.corruption.split(",") if c.strip()]
    unknown = [c for c in corruptions if c not in CORRUPTIONS]
    if not corruptions or unknown:
        raise ProblemError(f"--corruption: unknown {', '.join(unknown) or 'empty list'}; choose from {', '.join(CORRUPTIONS)}")
    if "add-outlier" in corruptions and len(corruptions) > 1:
        raise ProblemError("--corruption add-outlier adds a point token: run it alone, not with other corruptions")
    if len(set(corruptions)) != len(corruptions):
        raise ProblemError("--corruption names a corruption twice")
    if args.table and args.out:
        raise ProblemError("--table prints the table; it writes no --out")
    if args.table and args.checkpoint:
        raise ProblemError("--table and --checkpoint are two different runs: give one")
    if not 1 <= args.step <= 20:
        raise ProblemError(f"--step must be in 1..20, got {args.step}")
    if args.variant in ("swap", "learned") and args.iterations < 1:
        raise ProblemError(f"--variant {args.variant} runs --iterations steps: at least 1, got 0")
    if args.variant in ("swap", "learned") and "add-outlier" in corruptions:
        raise ProblemError(f"--variant {args.variant}: add-outlier adds a point token; use the other corruptions")
    constructions = [c.strip() for c in args.constructions.split(",") if c.strip()]
    unknown = [c for c in constructions if c not in VARIANTS]
    if not constructions or unknown or len(set(constructions)) != len(constructions):
        raise ProblemError(f"--constructions: give distinct names from {', '.join(VARIANTS)}"
                           + (f" (unknown: {', '.join(unknown)})" if unknown else ""))
    args.construction_list = tuple(constructions)
    return corruptions


def run(args: argparse.Namespace) -> int:
    from analysis.cli.output import check_out_dir, write_output_dir

    corruptions = check(args)
    out = check_out_dir(args.out, FILES)
    if args.table:
        from analysis.discovery.table import run_table

        result = run_table(args.construction_list, seeds=tuple(range(args.seeds)))
        if args.json:
            print(json.dumps({"rows": result.rows, "skipped": result.skipped}, default=float))
            return 0
        for key, what in (("auroc", "AUROC against the weight-derived circuit"),
                          ("auroc_exercised", "AUROC against the circuit edges the pair exercises"),
                          ("recall", "recall of the reported subgraph"), ("precision", "precision of the reported subgraph")):
            print(f"{what} (mean ± std (min-max, runs)):\n{result.markdown(key=key)}\n")
        for line in result.skipped:
            print(f"skipped: {line}")
        return 0

    from analysis.discovery.report import discovery_report

    if args.checkpoint:
        return run_checkpoint(args, out, corruptions)
    from analysis.discovery.edges import CorruptionInvisible
    from analysis.discovery.run import blobs_problem, discover
    from analysis.patching.pairs import make_pair
    from analysis.discovery.run import build_construction

    X, C0 = blobs_problem(args.d, args.k, args.n, args.seed)
    try:
        pairs = [make_pair(c, X, C0) for c in corruptions]
    except ValueError as exc:
        raise ProblemError(f"--corruption: {exc}") from None
    circuit = build_construction(args.variant, args.d, args.k, args.iterations)
    try:
        result = discover(circuit, pairs, args.method, threshold=args.threshold, steps=args.steps, group=args.group)
    except CorruptionInvisible as exc:
        raise ProblemError(f"--corruption {args.corruption} (seed {args.seed}): {exc}; try another seed or corruption") from None
    rounds = count(args.iterations, "step" if args.variant in ("swap", "learned") else "iteration")
    description = (f"{args.variant}, d={args.d} k={args.k} n={args.n}, {rounds}, seed {args.seed};"
                   f" pairs: {'; '.join(p.description for p in pairs)}")
    payload = {"problem": {"variant": args.variant, "d": args.d, "k": args.k, "n": args.n,
                           "iterations": args.iterations, "seed": args.seed, "corruptions": corruptions,
                           "grouped_acdc": args.group},
               **result.to_dict()}
    if out is not None:
        write_output_dir(out, {"discovery.json": json.dumps(payload, indent=1, default=float),
                               "discovery.html": discovery_report(result, description).to_html()})
    if args.json:
        print(json.dumps(payload, default=float))
        return 0
    pr = result.pr
    print(description)
    print(f"{args.method}: AUROC {result.auroc:.3f} against the weights' circuit"
          f" ({int(result.truth.sum())} of {len(result.truth)} candidate edges), {result.auroc_exercised:.3f} against"
          f" the {int(result.exercised[result.truth].sum())} circuit edges these pairs exercise")
    chosen = f"threshold {args.threshold:g}" if args.method == "acdc" else "top scores"
    print(f"reported subgraph ({chosen}): precision {pr.precision:.3f}, recall {pr.recall:.3f}"
          f" ({pr.found} found, {pr.missed} missed, {pr.spurious} spurious)")
    if out is not None:
        print(f"wrote {out / 'discovery.json'} and {out / 'discovery.html'}")
    return 0


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
        res = result.results[args.method]
        write_files = {"discovery.json": json.dumps(result.to_dict(), indent=1, default=float),
                       "discovery.html": discovery_report(res, summary.replace("\n", "; ")).to_html()}
        from analysis.cli.output import write_output_dir

        write_output_dir(out, write_files)
    print(json.dumps(result.to_dict(), default=float) if args.json else summary)
    return 0
