"""The learned safeguarded swap against the untrained safeguarded swap and Lloyd's, on held-out tasks.

    python benchmarks/bench_learned.py [--checkpoint checkpoints/learned/learned.json] [--tasks 12] [--inits 5]

Held-out suites (the ``TEST`` stream of seed 1; training used the ``TRAIN`` stream of seed 0): the paper's family
at (d, k, n) = (8, 5, 400), (16, 10, 300), (32, 10, 512) from random data points; the harder general family
(:mod:`circuits.training.general_tasks`: any d <= 32, k <= 12, unequal sizes, anisotropy, heavy tails, raw units,
random or k-means++ starts) at n = 256; and iris, wine, breast cancer and digits in raw units at their true k from
``--inits`` random-point starts. Every run is 20 steps from the same initial centroids as Lloyd's.

Per suite and variant, at T = 1, 2, 3, 20: the mean ratio to Lloyd's, and the fraction of the Lloyd-to-optimum
gap closed, ``(mean L/opt - mean model/opt) / (mean L/opt - 1)`` with ``opt`` scikit-learn's best of 10
k-means++ restarts ("-" where Lloyd's is within 1e-6 of it). Variants: ``learned`` (the checkpoint), ``swap``
(the untrained :func:`circuits.swap.reference.safeguarded_swap`), ``learned, alphas=1`` (the same candidate
untrained: two Lloyd's steps), ``no learned`` (the ablation: the learned candidate removed) and
``no swap_reference`` (the swap trajectory's safety net removed). Also: the largest ratio to Lloyd's and to swap
at any step, and how often each candidate is kept. Prints markdown (``docs/training.md`` quotes it).
"""

from __future__ import annotations

import argparse
import time
from collections import Counter

import numpy as np

from circuits.learned import checkpoint
from circuits.learned.reference import CANDIDATES, learned_swap, safety_chains
from circuits.learned.train import ratio
from circuits.training.general_tasks import general_tasks
from circuits.training.tasks import TEST, make_tasks

MARGIN = 1e-10
STEPS = 20
TS = (1, 2, 3, 20)
PAPER = ((8, 5, 400), (16, 10, 300), (32, 10, 512))
DATASETS = ("iris", "wine", "breast_cancer", "digits")


def suites(tasks: int, inits: int, seed: int) -> dict[str, list]:
    from sklearn import datasets

    out = {}
    for i, (d, k, n) in enumerate(PAPER):
        tb = make_tasks(tasks, n, d, k, seed, TEST, i)
        out[f"paper ({d},{k},{n})"] = list(zip(tb.X, tb.C0))
    harder = []
    for i in range(max(1, tasks // 2)):
        tb = general_tasks(4, 256, 32, 12, seed, TEST, i)
        harder += list(zip(tb.X, tb.C0))
    out["harder family"] = harder
    for name in DATASETS:
        data = getattr(datasets, f"load_{name}")()
        X, k = data.data.astype(np.float64), len(np.unique(data.target))
        rng = np.random.default_rng([seed, 17])
        out[f"{name} (k={k})"] = [(X, X[rng.choice(len(X), k, replace=False)]) for _ in range(inits)]
    return out


def optimum(X: np.ndarray, k: int) -> float:
    from sklearn.cluster import KMeans

    return float(KMeans(k, init="k-means++", n_init=10, random_state=0).fit(X).inertia_)


def measure(tasks, alphas) -> dict:
    """Per variant: objectives [tasks, STEPS+1]; Lloyd's; the optimum; the learned run's choices."""
    variants = {"learned": [], "swap": [], "learned, alphas=1": [], "no learned": [], "no swap_reference": []}
    lloyd, opt, choices, tie = [], [], Counter(), []
    no_learned = tuple(c for c in CANDIDATES if c != "learned")
    no_sref = tuple(c for c in CANDIDATES if c != "swap_reference")
    for X, C0 in tasks:
        ch = safety_chains(X, C0, STEPS, MARGIN)
        run = learned_swap(X, C0, STEPS, alphas, MARGIN, chains=ch)
        variants["learned"].append(run.objectives)
        variants["swap"].append(ch.objectives)
        variants["learned, alphas=1"].append(learned_swap(X, C0, STEPS, np.ones(1), MARGIN, chains=ch).objectives)
        variants["no learned"].append(learned_swap(X, C0, STEPS, alphas, MARGIN, candidates=no_learned,
                                                   chains=ch).objectives)
        variants["no swap_reference"].append(learned_swap(X, C0, STEPS, alphas, MARGIN, candidates=no_sref,
                                                          chains=ch).objectives)
        lloyd.append(run.lloyd_objectives)
        opt.append(optimum(X, len(C0)))
        choices.update(run.choices)
        vals = run.candidate_objectives
        tie.append(np.mean(vals[:, 2] <= np.nanmin(vals[:, [0, 1, 3, 4]], axis=1) * (1 - 1e-12)))
    return {"variants": {k: np.array(v) for k, v in variants.items()}, "lloyd": np.array(lloyd),
            "opt": np.array(opt), "choices": choices, "learned_strictly_best": float(np.mean(tie))}


def rows(name: str, m: dict) -> list[str]:
    L, opt = m["lloyd"], m["opt"][:, None]
    out = []
    for variant, obj in m["variants"].items():
        r = ratio(obj, L)
        lo, mo = ratio(L, opt).mean(axis=0), ratio(obj, opt).mean(axis=0)
        gap = [(lo[t] - mo[t]) / (lo[t] - 1) if lo[t] - 1 > 1e-6 else float("nan") for t in TS]
        worst_swap = ratio(obj, m["variants"]["swap"]).max()
        out.append(f"| {name} | {variant} | " + " / ".join(f"{r[:, t].mean():.4f}" for t in TS) + " | "
                   + " / ".join("-" if np.isnan(g) else f"{100 * g:.0f}%" for g in gap)
                   + f" | {r[:, 1:].max():.6f} | {worst_swap:.4f} |")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", default=str(checkpoint.DEFAULT_PATH))
    parser.add_argument("--tasks", type=int, default=12)
    parser.add_argument("--inits", type=int, default=5)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    alphas = checkpoint.load(args.checkpoint).alphas
    t0 = time.perf_counter()
    print(f"alphas = {[round(float(a), 3) for a in alphas]}\n")
    print("| suite | variant | mean ratio to Lloyd's at T = 1 / 2 / 3 / 20 | gap to optimum closed at T = 1 / 2 / 3 /"
          " 20 | max step ratio to Lloyd's | max step ratio to swap |")
    print("|---|---|---|---|---|---|")
    kept = []
    for name, tasks in suites(args.tasks, args.inits, args.seed).items():
        m = measure(tasks, alphas)
        print("\n".join(rows(name, m)), flush=True)
        total = sum(m["choices"].values())
        kept.append(f"| {name} | " + " / ".join(f"{100 * m['choices'][c] / total:.0f}%" for c in CANDIDATES)
                    + f" | {100 * m['learned_strictly_best']:.0f}% |")
    print("\n| suite | kept: " + " / ".join(CANDIDATES) + " | learned strictly best of all candidates |")
    print("|---|---|---|")
    print("\n".join(kept))
    print(f"\n{time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
