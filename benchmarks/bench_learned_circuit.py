"""Benchmark: the learned safeguarded swap as a transformer (:mod:`circuits.learned.build`) on real data.

Builds the circuit with the checkpoint's factors for digits at k = 10 (or another scikit-learn dataset at its true
k), runs it on the structured path from random-point starts, and checks it against its numpy reference (the same
candidate kept at every step, centroids within 1e-9 of the data's spread). Prints the build time, each run's wall
and CPU seconds (one torch thread), the numpy reference's, and the untrained swap circuit's run for comparison.

Run: ``python benchmarks/bench_learned_circuit.py [--dataset digits] [--steps 20] [--inits 2]``. Absolute times
depend on the machine's load; say so when quoting them.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np
import torch
from sklearn import datasets

LOADERS = {"iris": datasets.load_iris, "wine": datasets.load_wine, "breast_cancer": datasets.load_breast_cancer,
           "digits": datasets.load_digits}


def timed(fn):
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - wall, time.process_time() - cpu


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="digits", choices=sorted(LOADERS))
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--inits", type=int, default=2)
    args = parser.parse_args(argv)
    if args.steps < 1 or args.inits < 1:
        print("error: --steps and --inits must be >= 1", file=sys.stderr)
        return 2
    torch.set_num_threads(1)
    from circuits.learned.build import build_learned_circuit
    from circuits.swap.build import build_swap_circuit

    data = LOADERS[args.dataset]()
    X, k = data.data.astype(np.float64), len(np.unique(data.target))
    circ, build_wall, _ = timed(lambda: build_learned_circuit(X.shape[1], k, args.steps))
    swap, swap_build, _ = timed(lambda: build_swap_circuit(X.shape[1], k, args.steps))
    print(f"{args.dataset}: n={len(X)}, d={X.shape[1]}, k={k}, {args.steps} steps, alphas={circ.alphas.tolist()}; "
          f"build {build_wall:.2f} s ({circ.n_layers} layers, d_model {circ.layout.d_model}); swap build "
          f"{swap_build:.2f} s")
    for seed in range(args.inits):
        C0 = X[np.random.default_rng(seed).choice(len(X), k, replace=False)]
        run, wall, cpu = timed(lambda: circ.run(X, C0))
        ref, ref_wall, _ = timed(lambda: circ.reference(X, C0))
        _, swap_wall, swap_cpu = timed(lambda: swap.run(X, C0))
        spread = float(np.abs(X - X.mean(axis=0)).max())
        diff = float(np.abs(run.centroids - ref.centroids).max()) / spread
        same = run.choices == ref.choices
        kept = {c: run.choices.count(c) for c in dict.fromkeys(run.choices)}
        print(f"seed {seed}: learned circuit {wall:.2f} s wall / {cpu:.2f} s CPU on {run.path}; numpy reference "
              f"{ref_wall:.2f} s; swap circuit {swap_wall:.2f} s wall / {swap_cpu:.2f} s CPU; same choices {same}, "
              f"max centroid diff {diff:.1e} of the spread; final objective / Lloyd's "
              f"{run.objectives[-1] / run.lloyd_objectives[-1]:.4f}; kept {kept}")
        if not same or diff > 1e-9:
            print("error: the circuit differs from its reference", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
