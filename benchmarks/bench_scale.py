"""Benchmark: the structured execution path at scale, against the dense HookedTransformer and scikit-learn.

For n in {1e3, 1e4, 1e5, 1e6} (d=2, k=5, T=10, float64, blobs), each measurement in a fresh subprocess (so peak
memory is its own), all in one run:

* ``structured``: :func:`circuits.structured.structured_forward` — the forward pass alone, best of 10 up to
  n = 1e4 (tens of milliseconds, where the 2-core machine's scheduling noise is of the same size), 3 at 1e5, 1 at 1e6;
* ``+verify``: what ``kmeans-circuits cluster --path structured`` does after building: capture every layer,
  decode it, and verify it against the numpy reference with the certificate (once);
* ``dense``: ``model(resid, start_at_layer=0)`` where it fits (n + k + 1 <= 12,000 tokens), best of 3;
* ``sklearn``: ``KMeans(init=C0, n_init=1, algorithm="lloyd", tol=0, max_iter=T)``, best of 5.

Ratios are against scikit-learn measured in the same subprocess. Peak memory is the subprocess's maximum resident
set above its state after imports and data generation. torch and scikit-learn use the default threads (2 cores).
Run: ``python benchmarks/bench_scale.py`` (about 5 minutes on 2 quiet cores).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
import warnings

from circuits import strict_json


def rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def best(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def one(n: int, d: int, k: int, T: int, what: str) -> dict:
    warnings.filterwarnings("ignore", message="HookedTransformer is deprecated")
    import numpy as np
    import torch
    from sklearn.cluster import KMeans
    from sklearn.datasets import make_blobs

    from analysis.cli import keep_freed_memory
    from analysis.pipeline import RunOptions, run_problem
    from circuits.build import build_lloyd_circuit
    from circuits.encoding import encode
    from circuits.initialisation import initial_centroids
    from circuits.structured import Recording, structured_forward

    keep_freed_memory()
    X, _ = make_blobs(n, n_features=d, centers=k, random_state=0)
    C0 = initial_centroids(X, k, "random", 0)
    circuit = build_lloyd_circuit(d, k, T)
    enc = encode(circuit.layout, X, C0)
    sk_time = best(lambda: KMeans(k, init=C0, n_init=1, algorithm="lloyd", tol=0, max_iter=T).fit(X), 5)
    km = KMeans(k, init=C0, n_init=1, algorithm="lloyd", tol=0, max_iter=T).fit(X)
    base = rss_mib()
    out = {"n": n, "what": what, "sklearn_s": sk_time}
    if what == "structured":
        out["seconds"] = best(lambda: structured_forward(circuit.model, enc.resid, recording=Recording(lambda layer, record: None, pre=False)),
                              10 if n <= 10_000 else 3 if n <= 100_000 else 1)
    elif what == "verify":
        t0 = time.perf_counter()
        result = run_problem(X, C0, T, circuit=circuit, options=RunOptions(path="structured"))
        out["seconds"] = time.perf_counter() - t0
        out["verified"] = bool(result.report.verified)
        out["labels_equal_sklearn"] = bool(np.array_equal(result.labels, km.labels_))
        out["max_centroid_diff"] = float(np.abs(result.centroids - km.cluster_centers_).max())
    elif what == "dense":
        with torch.no_grad():
            out["seconds"] = best(lambda: circuit.model(enc.resid, start_at_layer=0), 3 if n <= 2_000 else 1)
    out["peak_mib"] = rss_mib() - base
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, nargs="*", default=[1_000, 10_000, 100_000, 1_000_000])
    parser.add_argument("--d", type=int, default=2)
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument("--iterations", type=int, default=10)
    parser.add_argument("--one", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one is not None:
        print(strict_json.dumps(one(int(args.one[0]), args.d, args.k, args.iterations, args.one[1])))
        return
    print(f"structured path vs dense HookedTransformer vs scikit-learn Lloyd (d={args.d}, k={args.k},"
          f" T={args.iterations}, float64); ratios against scikit-learn in the same subprocess")
    print(f"{'n':>9} {'sklearn s':>10} {'structured s':>13} {'ratio':>7} {'MiB':>6} {'+verify s':>10} {'MiB':>6}"
          f" {'verified':>8} {'=sklearn':>8} {'dense s':>9} {'ratio':>7} {'MiB':>6}")
    for n in args.n:
        row = {}
        for what in ("structured", "verify", "dense"):
            if what == "dense" and n + args.k + 1 > 12_000:
                continue
            res = subprocess.run([sys.executable, __file__, "--one", str(n), what, "--d", str(args.d), "--k",
                                  str(args.k), "--iterations", str(args.iterations)], capture_output=True, text=True)
            if res.returncode != 0:
                print(f"{n}: {what} failed: {res.stderr.strip().splitlines()[-1:]}", flush=True)
                continue
            row[what] = json.loads(res.stdout.strip().splitlines()[-1])
        sk = row["structured"]["sklearn_s"]
        s, v = row.get("structured", {}), row.get("verify", {})
        dense = row.get("dense")
        dense_cols = (f"{dense['seconds']:>9.3f} {dense['seconds'] / dense['sklearn_s']:>6.0f}x {dense['peak_mib']:>6.0f}"
                      if dense else f"{'-':>9} {'-':>7} {'-':>6}")
        print(f"{n:>9} {sk:>10.4f} {s.get('seconds', float('nan')):>13.3f} {s.get('seconds', float('nan')) / sk:>6.0f}x"
              f" {s.get('peak_mib', float('nan')):>6.0f} {v.get('seconds', float('nan')):>10.2f}"
              f" {v.get('peak_mib', float('nan')):>6.0f} {str(v.get('verified')):>8} {str(v.get('labels_equal_sklearn')):>8}"
              f" {dense_cols}", flush=True)


if __name__ == "__main__":
    main()
