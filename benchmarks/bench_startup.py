"""Start-up cost of the command line, against a Python process that fits scikit-learn's KMeans on iris.

Every measurement is a fresh subprocess (imports included), best of ``--repeat``; the scikit-learn process runs in
the same session so the ratios hold on a loaded machine, where absolute times do not:

* ``sklearn``: ``python -c`` importing scikit-learn, loading iris and fitting ``KMeans(3, n_init=1)``;
* ``cluster``: ``kmeans-circuits cluster --dataset iris --k 3`` end to end (as ``python -m analysis.cli``);
* ``--help``: ``kmeans-circuits --help``;
* ``report: first stage``: ``kmeans-circuits report --dataset iris --k 3 --out ...`` until its first progress line
  (``[1/2] circuit``) reaches stderr; the process is then stopped.

The code measured is the one ``python -m analysis.cli`` imports (set ``PYTHONPATH`` to measure another checkout).
Usage: ``python benchmarks/bench_startup.py [--repeat 3]``.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SKLEARN = ("import sklearn.cluster, sklearn.datasets as d; X = d.load_iris().data;"
           " sklearn.cluster.KMeans(3, n_init=1).fit(X)")
CLI = [sys.executable, "-m", "analysis.cli"]


def wall(argv: list[str]) -> float:
    """Seconds from start to exit of ``argv`` (which must succeed)."""
    start = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def first_stage(argv: list[str]) -> float:
    """Seconds from start until ``argv`` prints its first progress line (``[1/``) on stderr; then it is stopped."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        for line in proc.stderr:
            if "[1/" in line:
                return time.perf_counter() - start
        raise RuntimeError(f"{' '.join(argv)} printed no progress line (exit {proc.wait()})")
    finally:
        proc.kill()
        proc.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs per measurement; the best is kept (default 3)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.html"
        cases = {
            "sklearn KMeans on iris (python -c)": lambda: wall([sys.executable, "-c", SKLEARN]),
            "cluster --dataset iris --k 3": lambda: wall([*CLI, "cluster", "--dataset", "iris", "--k", "3"]),
            "--help": lambda: wall([*CLI, "--help"]),
            "report: first stage line": lambda: first_stage(
                [*CLI, "report", "--dataset", "iris", "--k", "3", "--out", str(report)]),
        }
        # Interleaved rounds, so that a burst of load on the machine hits every case alike.
        times: dict[str, list[float]] = {name: [] for name in cases}
        for _ in range(args.repeat):
            for name, measure in cases.items():
                times[name].append(measure())
    best = {name: min(values) for name, values in times.items()}
    base = best["sklearn KMeans on iris (python -c)"]
    print(f"start-up, best of {args.repeat} fresh processes; ratio = time / the scikit-learn process")
    print(f"{'command':38s} {'best s':>7s} {'ratio':>6s}   all s")
    for name, value in best.items():
        print(f"{name:38s} {value:7.2f} {value / base:6.2f}   " + " ".join(f"{v:.2f}" for v in times[name]))


if __name__ == "__main__":
    main()
