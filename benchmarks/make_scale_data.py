"""Write the scale benchmark's problem as .npy files: blobs ``X`` (n, d) and initial centroids ``C0`` (k, d).

``python benchmarks/make_scale_data.py --n 1000000 --d 8 --k 10 --out /tmp/scale`` writes ``/tmp/scale/X.npy`` and
``/tmp/scale/C0.npy`` (C0: k random data points, seed 0, as ``--init random`` picks them), the input of
``kmeans-circuits cluster --data X.npy --init C0.npy --k 10 --iterations 10`` (issue 31's million-point case).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np


def make(n: int, d: int, k: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import make_blobs

    from circuits.initialisation import initial_centroids

    X, _ = make_blobs(n, n_features=d, centers=k, random_state=seed)
    return X, initial_centroids(X, k, "random", seed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--d", type=int, default=8)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="/tmp/scale")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    X, C0 = make(args.n, args.d, args.k, args.seed)
    np.save(out / "X.npy", X)
    np.save(out / "C0.npy", C0)
    print(f"wrote {out / 'X.npy'} {X.shape} and {out / 'C0.npy'} {C0.shape}")


if __name__ == "__main__":
    main()
