"""``kmeans-circuits prove``: check the construction on the model's actual weights, for every input.

Builds the variant's ``HookedTransformer`` for ``d`` and ``k``, checks every proof obligation exactly on its state
dict (rational arithmetic, region by region for the MLPs), executes the hard-attention theorem on top of them, and
prints one line per obligation with its status. Exit code 0 when every obligation holds, 1 when one fails, 2 for
bad input.
"""

from __future__ import annotations

import argparse

from analysis.cli.limits import limit
from analysis.cli.options import variant_help
from analysis.data import MAX_ITERATIONS
from analysis.errors import ProblemError
from circuits.strict_json import dumps

#: The most random problems ``--examples`` runs: each is run in exact rational arithmetic, so the limit takes
#: minutes (a billion would take years).
MAX_EXAMPLES = 1000

#: The largest d and k the prover checks (measured: ``prove --d 64 --k 64`` 74 s, ``--d 32 --k 32`` 37 s,
#: ``--d 128 --k 128`` over 300 s, on the 2-core machine).
MAX_SIZE = 64

NAME = "prove"
HELP = "prove the circuit exact: check every obligation symbolically on the model's weights, then the theorem"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    for flag, what in (("--d", "dimension of the points"), ("--k", "number of centroids")):
        limit(parser.add_argument(flag, type=int, required=True, help=what), MAX_SIZE,
              "the exact checks grow with d and k: d = k = 64 took 74 s on 2 cores, 128 over 5 minutes")
    parser.add_argument("--variant", default="lloyd", metavar="NAME[:KEY=VALUE,...]", help=variant_help())
    limit(parser.add_argument("--iterations", type=int, default=1, metavar="T",
                              help="Lloyd iterations of the model to build (default 1: layers U A U A); every layer is"
                                   " checked"), MAX_ITERATIONS, "2 T + 2 layers, each checked")
    limit(parser.add_argument("--examples", type=int, default=1, metavar="E",
                              help="random problems run in exact arithmetic with hardmax as evidence (default 1; 0"
                                   " skips)"), MAX_EXAMPLES,
          "each example is a whole problem in exact arithmetic (about 0.2 s for d=2, k=3; more for larger ones)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the text")
    knobs = parser.add_argument_group("exactness knobs", "see circuits/sharpness.py for the safe ranges")
    knobs.add_argument("--beta", type=float, default=None, help="assignment sharpness (default 1e14)")
    knobs.add_argument("--beta-update", type=float, default=None, help="update sharpness (default 4000)")
    knobs.add_argument("--tie-break", type=float, default=None, help="tie-break in unit-scaled squared distance (default 1e-11)")


def run(args: argparse.Namespace) -> int:
    from analysis.cli.options import check_variant_arg, sharpness_from
    from analysis.data import check_work
    from circuits.variants import get_variant

    if args.d < 1 or args.k < 1:
        raise ProblemError(f"--d and --k must be >= 1, got d={args.d}, k={args.k}")
    if args.examples < 0:
        raise ProblemError(f"--examples must be >= 0, got {args.examples}")
    name = check_variant_arg(args.variant, args.iterations, args)
    check_work(args.iterations, args.d, args.k)
    sharpness = sharpness_from(args)

    from analysis.proof.prover import OBLIGATION_SETS, NoObligations, prove_circuit, without_obligations

    prover = OBLIGATION_SETS.get(name)
    if prover is None or isinstance(prover, NoObligations):
        report = without_obligations(name, args.d, args.k, prover)
    else:
        circuit = get_variant(args.variant).build(args.d, args.k, args.iterations, sharpness=sharpness)
        report = prove_circuit(circuit, examples=args.examples)
    if args.json:
        print(dumps(report.to_dict()))
    else:
        print(report.render())
    return 0 if report.ok else 1
