"""Run the same ``cluster --json`` problems with two checkouts and compare their output byte for byte.

A change that claims "the same numbers" (a faster path, a refactor of the verification) is held to this:
``python benchmarks/compare_json.py OLD_CHECKOUT NEW_CHECKOUT`` runs each problem below with ``PYTHONPATH`` set to
each checkout in turn (one interpreter, the one running this script) and prints, per problem, whether stdout and
the exit code are identical. The problems: the four bundled datasets, float32, k-means++, blobs with Lloyd's and
the soft variant, an integer grid full of exact ties, an initial centroid far from the data (an empty cluster),
duplicated points (float64 and float32), a near tie the data decides and an exact tie, 10^5 points, the trimmed
and spherical variants and both constructions. Exit code 0 when every problem is identical, 1 otherwise.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np


def write_problems(folder: Path) -> dict[str, list[str]]:
    """The problems' data files in ``folder``; returns ``name -> cluster arguments``."""
    rng = np.random.default_rng(0)
    grid = np.array([[x, y] for x in range(12) for y in range(12)], dtype=np.float64)
    np.save(folder / "grid.npy", grid)
    np.save(folder / "grid_c0.npy", grid[[0, 13, 70, 143]] + 0.5)
    blobs = rng.normal(size=(300, 3)) + np.repeat(np.eye(3) * 6, 100, axis=0)
    np.save(folder / "far.npy", blobs)
    np.save(folder / "far_c0.npy", np.vstack([blobs[[0, 100, 200]], [[1e3, 1e3, 1e3]]]))
    dup = np.repeat(rng.normal(size=(20, 2)), 5, axis=0)
    np.save(folder / "dup.npy", dup)
    (folder / "t.csv").write_text("0,0\n2,0\n1.000000000000001,0.3\n")
    (folder / "i.csv").write_text("0,0\n2,0\n")
    (folder / "tie.csv").write_text("0,0\n2,0\n1,0\n1,1\n")
    big = np.concatenate([rng.normal(c, 1.0, size=(25_000, 4)) for c in (0, 5, 10, 15)])
    np.save(folder / "big.npy", big)
    f = str(folder)
    return {
        "iris": ["--dataset", "iris", "--k", "3"],
        "iris float32": ["--dataset", "iris", "--k", "3", "--dtype", "float32"],
        "iris k-means++": ["--dataset", "iris", "--k", "3", "--init", "k-means++", "--seed", "3"],
        "wine": ["--dataset", "wine", "--k", "3"],
        "breast cancer": ["--dataset", "breast_cancer", "--k", "2"],
        "digits": ["--dataset", "digits", "--k", "10"],
        "blobs": ["--dataset", "blobs", "--n", "2000", "--k", "5"],
        "blobs soft": ["--dataset", "blobs", "--n", "2000", "--k", "5", "--variant", "soft"],
        "integer grid": ["--data", f"{f}/grid.npy", "--init", f"{f}/grid_c0.npy", "--k", "4"],
        "far centroid": ["--data", f"{f}/far.npy", "--init", f"{f}/far_c0.npy", "--k", "4"],
        "duplicates": ["--data", f"{f}/dup.npy", "--k", "4"],
        "duplicates float32": ["--data", f"{f}/dup.npy", "--k", "4", "--dtype", "float32"],
        "near tie": ["--data", f"{f}/t.csv", "--init", f"{f}/i.csv", "--k", "2", "--iterations", "1"],
        "exact tie": ["--data", f"{f}/tie.csv", "--init", f"{f}/i.csv", "--k", "2"],
        "10^5 points": ["--data", f"{f}/big.npy", "--k", "7", "--iterations", "4"],
        "wine trimmed": ["--dataset", "wine", "--k", "3", "--variant", "trimmed"],
        "iris spherical": ["--dataset", "iris", "--k", "3", "--variant", "spherical"],
        "swap": ["--construction", "swap", "--dataset", "iris", "--k", "3"],
        "learned": ["--construction", "learned", "--dataset", "iris", "--k", "3"],
        "wine k-means++ k=5": ["--dataset", "wine", "--k", "5", "--init", "k-means++", "--seed", "1"],
    }


def run(checkout: Path, args: list[str]) -> tuple[int, bytes]:
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    done = subprocess.run([sys.executable, "-m", "analysis.cli", "cluster", *args, "--json"], env=env,
                          capture_output=True, cwd=checkout)
    return done.returncode, done.stdout


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old", type=Path)
    parser.add_argument("new", type=Path)
    args = parser.parse_args()
    same = True
    with tempfile.TemporaryDirectory() as folder:
        for name, argv in write_problems(Path(folder)).items():
            (old_code, old_out), (new_code, new_out) = run(args.old, argv), run(args.new, argv)
            equal = old_code == new_code and old_out == new_out and bool(old_out)
            same &= equal
            print(f"{name:22s} exit {old_code} / {new_code}  {'identical' if equal else 'DIFFERENT'}", flush=True)
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
