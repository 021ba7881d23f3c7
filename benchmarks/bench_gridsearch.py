"""Benchmark: ``GridSearchCV`` over the number of clusters, the circuit against ``KMeans``, in the same run.

Both estimators search ``n_clusters`` in 4 values on iris with 5-fold cross-validation (20 fits plus the refit),
Lloyd's from k-means++ initial centroids, one initialisation, ``max_iter`` iterations (the circuit always runs
them all; ``KMeans`` uses ``tol=0`` for the same work). Reported per estimator: wall time of the search, the ratio to
``KMeans``, and for the circuit how many fits built a circuit and how many reused one
(:func:`analysis.estimator.built_circuit`), split into time spent building, running and verifying.

A second search repeats the first with the cache warm (same folds, same data): every fit then reuses its circuit,
which is what a repeated search, a refit on the same data, or ``predict`` on the same points costs.

Run: ``python benchmarks/bench_gridsearch.py [--max-iter 10] [--repeats 1]``.
"""

from __future__ import annotations

import argparse
import time
import warnings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--max-iter", type=int, default=10, help="Lloyd iterations")
    parser.add_argument("--ks", default="2,3,4,5", help="values of n_clusters searched")
    parser.add_argument("--cv", type=int, default=5, help="cross-validation folds")
    args = parser.parse_args()

    import torch
    from sklearn.cluster import KMeans
    from sklearn.datasets import load_iris
    from sklearn.model_selection import GridSearchCV

    from analysis import estimator as est_module
    from analysis.estimator import CircuitKMeans, clear_circuit_cache

    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    X = load_iris().data
    grid = {"n_clusters": [int(k) for k in args.ks.split(",")]}

    # Count builds and time the stages by wrapping the estimator's collaborators (measurement only).
    stats = {"builds": 0, "build_s": 0.0, "run_s": 0.0}
    real_get_variant, real_run = est_module.get_variant, est_module.run_problem

    class Timed:
        def __init__(self, variant):
            self.variant = variant

        def build(self, *a, **kw):
            t0 = time.perf_counter()
            out = self.variant.build(*a, **kw)
            stats["builds"] += 1
            stats["build_s"] += time.perf_counter() - t0
            return out

        def __getattr__(self, name):
            return getattr(self.variant, name)

    def timed_run(*a, **kw):
        t0 = time.perf_counter()
        out = real_run(*a, **kw)
        stats["run_s"] += time.perf_counter() - t0
        return out

    est_module.get_variant = lambda name: Timed(real_get_variant(name))
    est_module.run_problem = timed_run

    def search(estimator):
        t0 = time.perf_counter()
        gs = GridSearchCV(estimator, grid, cv=args.cv).fit(X)
        return time.perf_counter() - t0, gs

    fits = len(grid["n_clusters"]) * args.cv + 1
    t_km, gs_km = search(KMeans(init="k-means++", n_init=1, max_iter=args.max_iter, tol=0, random_state=0))
    print(f"iris n={len(X)}, GridSearchCV n_clusters in {grid['n_clusters']}, cv={args.cv} ({fits} fits),"
          f" max_iter={args.max_iter}, torch threads 1")
    print(f"{'estimator':<28}{'wall s':>9}{'x KMeans':>10}{'builds':>8}{'reused':>8}{'build s':>9}{'run+verify s':>14}")
    print(f"{'KMeans':<28}{t_km:>9.2f}{1.0:>10.1f}")
    clear_circuit_cache()
    for label in ("CircuitKMeans (cold cache)", "CircuitKMeans (warm cache)"):
        stats.update(builds=0, build_s=0.0, run_s=0.0)
        t, gs = search(CircuitKMeans(init="k-means++", max_iter=args.max_iter, random_state=0))
        print(f"{label:<28}{t:>9.2f}{t / t_km:>10.1f}{stats['builds']:>8}{fits - stats['builds']:>8}"
              f"{stats['build_s']:>9.2f}{stats['run_s']:>14.2f}")
        assert gs.best_params_ == gs_km.best_params_, (gs.best_params_, gs_km.best_params_)
    print(f"best n_clusters (both): {gs_km.best_params_['n_clusters']}")


if __name__ == "__main__":
    main()
