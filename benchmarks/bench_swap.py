"""Benchmark: ``cluster --construction swap`` end to end, against a scikit-learn process on the same data.

Issue 21's goals for the swap construction: 400 points, d = 8, k = 5, 20 steps at most 5x the baseline, and
digits at k = 10 under 15 s wall. The baseline is what a user would otherwise run: a fresh Python process that
imports scikit-learn, loads the same points and fits ``KMeans(n_clusters=k, init="random", n_init=1,
algorithm="lloyd", tol=0, max_iter=T)``. Every command runs in its own process; wall and CPU seconds (user +
system of the child) are measured here, each the best of ``--repeats`` runs. The swap command must exit 0
(VERIFIED: the transformer equals its numpy reference at every step); anything else stops the benchmark.

Run: ``python benchmarks/bench_swap.py [--repeats 2] [--cases blobs400,digits]``. Ratios are robust to a loaded
machine, absolute times are not.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

#: name -> (cluster's data arguments, k, steps)
CASES = {
    "blobs400": (["--dataset", "blobs", "--n", "400", "--d", "8"], 5, 20),
    "digits": (["--dataset", "digits"], 10, 20),
}

BASELINE = """
import sys
import numpy as np
from sklearn.cluster import KMeans
X = np.load(sys.argv[1])
KMeans(n_clusters=int(sys.argv[2]), init="random", n_init=1, algorithm="lloyd", tol=0, max_iter=int(sys.argv[3]),
       random_state=0).fit(X)
"""

EXPORT = """
import sys
import numpy as np
from analysis.cli.options import load_problem
from analysis.cli import build_parser
args = build_parser().parse_args(["cluster", *sys.argv[2:]])
np.save(sys.argv[1], load_problem(args).X)
"""


def timed(cmd: list[str]) -> tuple[float, float]:
    """Wall and CPU seconds (the child's user + system) of one run of ``cmd``; it must exit 0."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(cmd)} exited {os.waitstatus_to_exitcode(status)}: {proc.stderr.read()[-2000:]}")
    return wall, usage.ru_utime + usage.ru_stime


def best(cmd: list[str], repeats: int) -> tuple[float, float]:
    runs = [timed(cmd) for _ in range(repeats)]
    return min(w for w, _ in runs), min(c for _, c in runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--cases", default=",".join(CASES))
    args = parser.parse_args()
    print("cluster --construction swap vs a scikit-learn KMeans process on the same data (each a fresh process,"
          f" best of {args.repeats})")
    print(f"{'case':10s} {'n':>5s} {'d':>3s} {'k':>3s} {'T':>3s} {'sklearn wall':>12s} {'cpu':>6s}"
          f" {'swap wall':>10s} {'cpu':>6s} {'wall ratio':>10s} {'cpu ratio':>9s}")
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.cases.split(","):
            data, k, steps = CASES[name]
            path = str(Path(tmp) / f"{name}.npy")
            subprocess.run([sys.executable, "-c", EXPORT, path, *data, "--k", str(k)], check=True)
            import numpy as np

            n, d = np.load(path).shape
            base = best([sys.executable, "-c", BASELINE, path, str(k), str(steps)], args.repeats)
            swap = best([sys.executable, "-m", "analysis.cli", "cluster", "--construction", "swap", *data, "--k",
                         str(k), "--iterations", str(steps)], args.repeats)
            print(f"{name:10s} {n:5d} {d:3d} {k:3d} {steps:3d} {base[0]:12.2f} {base[1]:6.2f} {swap[0]:10.2f}"
                  f" {swap[1]:6.2f} {swap[0] / base[0]:9.1f}x {swap[1] / base[1]:8.1f}x", flush=True)


if __name__ == "__main__":
    main()
