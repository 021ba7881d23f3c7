"""Benchmark: the dense HookedTransformer circuit against scikit-learn's Lloyd, measured in the same run.

For each n (d=8, k=10, T=10, float64) a fresh subprocess builds the problem and times

* ``circuit``: a forward pass of the HookedTransformer (``model(resid, start_at_layer=0)``), the cost a user
  pays to run the algorithm: after one warm-up pass on a small problem (torch's first call pays one-off costs),
  best of 3 up to n = 2,000 and a single pass beyond (11 s each at n = 5,000);
* ``circuit+verify``: capture of every layer plus the layer-by-layer verification (what ``cluster`` does);
* ``sklearn``: ``KMeans(init=C0, n_init=1, algorithm="lloyd", tol=0, max_iter=T)``, best of 5.

and reports peak resident memory above the post-import baseline. Run: ``python benchmarks/bench_dense.py``.
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


def one(n: int, d: int, k: int, T: int) -> dict:
    warnings.filterwarnings("ignore", message="HookedTransformer is deprecated")
    import numpy as np
    import torch
    from sklearn.cluster import KMeans
    from sklearn.datasets import make_blobs

    from analysis.pipeline import run_problem
    from circuits.build import build_lloyd_circuit
    from circuits.encoding import encode
    from circuits.initialisation import initial_centroids

    torch.set_num_threads(2)
    X, _ = make_blobs(n, n_features=d, centers=k, cluster_std=2.0, random_state=0)
    C0 = initial_centroids(X, k, "random", 0)
    circuit = build_lloyd_circuit(d, k, T)
    base = rss_mib()

    sk = []
    for _ in range(5):
        t0 = time.perf_counter()
        km = KMeans(k, init=C0, n_init=1, algorithm="lloyd", tol=0, max_iter=T).fit(X)
        sk.append(time.perf_counter() - t0)

    enc = encode(circuit.layout, X, C0)
    times = []
    with torch.no_grad():
        circuit.model(encode(circuit.layout, X[: 4 * k], C0).resid, start_at_layer=0)  # warm-up
        for _ in range(3 if n <= 2000 else 1):
            t0 = time.perf_counter()
            logits = circuit.model(enc.resid, start_at_layer=0)
            times.append(time.perf_counter() - t0)
    forward = min(times)
    peak_forward = rss_mib() - base

    t0 = time.perf_counter()
    result = run_problem(X, C0, T, circuit=circuit)
    full = time.perf_counter() - t0
    agree = bool((logits[0, enc.sequence.points].argmax(-1).numpy() == km.labels_).all())
    return {
        "n": n, "d": d, "k": k, "T": T,
        "circuit_s": forward, "circuit_verify_s": full, "sklearn_s": min(sk),
        "ratio": forward / min(sk), "peak_mib": max(peak_forward, rss_mib() - base),
        "verified": result.report.verified, "labels_equal_sklearn": agree,
        "max_centroid_diff": float(np.abs(result.centroids - km.cluster_centers_).max()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, nargs="*", default=[500, 2000, 5000])
    parser.add_argument("--d", type=int, default=8)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--iterations", type=int, default=10)
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one is not None:
        print(strict_json.dumps(one(args.one, args.d, args.k, args.iterations)))
        return
    print(f"dense HookedTransformer circuit vs scikit-learn Lloyd (d={args.d}, k={args.k}, T={args.iterations}, float64)")
    print(f"{'n':>6} {'circuit s':>10} {'+verify s':>10} {'sklearn s':>10} {'ratio':>8} {'peak MiB':>9} {'verified':>8} {'=sklearn':>8}")
    for n in args.n:
        out = subprocess.run([sys.executable, __file__, "--one", str(n), "--d", str(args.d), "--k", str(args.k),
                              "--iterations", str(args.iterations)], capture_output=True, text=True, check=True)
        r = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"{r['n']:>6} {r['circuit_s']:>10.3f} {r['circuit_verify_s']:>10.3f} {r['sklearn_s']:>10.4f}"
              f" {r['ratio']:>7.0f}x {r['peak_mib']:>9.0f} {str(r['verified']):>8} {str(r['labels_equal_sklearn']):>8}",
              flush=True)


if __name__ == "__main__":
    main()
