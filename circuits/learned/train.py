"""Training the learned safeguarded swap: a derivative-free search of its per-step extrapolation factors.

The trained part is ``p`` numbers (``alphas``, :mod:`circuits.learned.reference`), and the objective is piecewise
constant in them (an assignment changes at discrete values), so the search is a coordinate-wise grid: sweep each
factor over a coarse grid with the others fixed, then over a fine grid around the best, keeping the best value of

    score(alphas) = mean over tasks of mean over steps t = 1..T of  objective_t / Lloyd's objective_t

(the *anytime* ratio: lower is better at every step, not only at the end) on a wide training suite
(:func:`training_tasks`): the general family of :mod:`circuits.training.general_tasks` (any d <= 32, k <= 12,
unequal sizes, anisotropy, heavy tails, raw units, random or k-means++ starts) and the paper's family
(:mod:`circuits.training.tasks`) at four shapes, all from the ``TRAIN`` stream. Held-out tasks (the ``TEST``
stream, another seed) are measured by ``benchmarks/bench_learned.py``.

    python -m circuits.learned.train --out checkpoints/learned/learned.json      # a few minutes on one core
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from circuits.learned import checkpoint
from circuits.learned.reference import learned_swap, safety_chains
from circuits.swap.reference import SwapTrajectory
from circuits.training.general_tasks import general_tasks
from circuits.training.tasks import TRAIN, make_tasks

#: The paper's family shapes (d, k) in the training suite.
PAPER_SHAPES = ((4, 3), (8, 5), (16, 10), (32, 10))
SELECT_MARGIN = 1e-10
COARSE = np.arange(0.0, 8.01, 0.5)
FINE = np.arange(-0.5, 0.51, 0.25)


def training_tasks(seed: int, stream: int = TRAIN, general_batches: int = 10, per_batch: int = 4,
                   paper_per_shape: int = 6, n: int = 200) -> list[tuple[np.ndarray, np.ndarray]]:
    """The training suite: ``general_batches`` batches of the general family and the paper family's shapes."""
    tasks = []
    for i in range(general_batches):
        tb = general_tasks(per_batch, n, 32, 12, seed, stream, i)
        tasks += list(zip(tb.X, tb.C0))
    for i, (d, k) in enumerate(PAPER_SHAPES):
        tb = make_tasks(paper_per_shape, n, d, k, seed, stream, i)
        tasks += list(zip(tb.X, tb.C0))
    return tasks


def ratio(objectives: np.ndarray, lloyd: np.ndarray) -> np.ndarray:
    """Objective over Lloyd's, 1 where both are 0 (as :func:`circuits.reference.objective_ratio`)."""
    return np.where(lloyd > 0, objectives / np.where(lloyd > 0, lloyd, 1.0), np.where(objectives > 0, np.inf, 1.0))


def score(tasks, chains: list[SwapTrajectory], alphas, steps: int) -> float:
    """Mean over tasks and steps 1..``steps`` of the objective over Lloyd's (lower is better)."""
    ratios = []
    for (X, C0), ch in zip(tasks, chains):
        run = learned_swap(X, C0, steps, alphas, SELECT_MARGIN, chains=ch)
        ratios.append(np.mean(ratio(run.objectives[1:], run.lloyd_objectives[1:])))
    return float(np.mean(ratios))


def search(tasks, chains, steps: int, params: int, log=print) -> tuple[np.ndarray, float]:
    """Coordinate-wise grid search from all factors 1 (two Lloyd's steps): a coarse sweep, then a fine one."""
    alphas = np.ones(params)
    best = score(tasks, chains, alphas, steps)
    log(f"start alphas={alphas.tolist()} score={best:.5f}")
    for grid, relative in ((COARSE, False), (FINE, True)):
        for i in range(params):
            for value in (alphas[i] + grid if relative else grid):
                if value < 0 or value > checkpoint.MAX_ALPHA or value == alphas[i]:
                    continue
                trial = alphas.copy()
                trial[i] = value
                s = score(tasks, chains, trial, steps)
                if s < best - 1e-9:
                    alphas, best = trial, s
            log(f"alpha_{i} -> {alphas[i]:.2f}  score={best:.5f}")
    return alphas, best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Train the learned safeguarded swap's extrapolation factors.")
    parser.add_argument("--out", default=str(checkpoint.DEFAULT_PATH))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--params", type=int, default=4, help="factors: one per step, the last for later steps")
    parser.add_argument("--general-batches", type=int, default=10)
    args = parser.parse_args(argv)
    if args.steps < 1 or not 1 <= args.params <= checkpoint.MAX_ALPHAS or args.general_batches < 0:
        print("error: --steps >= 1, --params in 1..64, --general-batches >= 0", file=sys.stderr)
        return 2
    t0 = time.time()
    tasks = training_tasks(args.seed, general_batches=args.general_batches)
    chains = [safety_chains(X, C0, args.steps, SELECT_MARGIN) for X, C0 in tasks]
    swap_score = float(np.mean([np.mean(ratio(ch.objectives[1:], ch.lloyd_objectives[1:])) for ch in chains]))
    print(f"{len(tasks)} training tasks; untrained safeguarded swap score={swap_score:.5f}")
    alphas, best = search(tasks, chains, args.steps, args.params)
    training = {"command": "python -m circuits.learned.train " + " ".join(argv if argv is not None else sys.argv[1:]),
                "seed": args.seed, "tasks": len(tasks), "steps": args.steps, "score": best,
                "score_all_alphas_1": score(tasks, chains, np.ones(args.params), args.steps),
                "score_untrained_swap": swap_score, "seconds": round(time.time() - t0, 1)}
    path = checkpoint.save(checkpoint.LearnedCheckpoint(alphas, training), args.out)
    print(f"alphas={[round(a, 3) for a in alphas]} score={best:.5f}; wrote {path} ({training['seconds']} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
