"""Start-up cost of the command line, against a Python process that fits scikit-learn's KMeans on iris.

Every measurement is a fresh subprocess (imports included), best of ``--repeat``; the scikit-learn process runs in
the same session so the ratios hold on a loaded machine, where absolute times do not:

* ``sklearn``: ``python -c`` importing scikit-learn, loading iris and fitting ``KMeans(3, n_init=1)``;
* ``cluster``: ``kmeans-circuits cluster --dataset iris --k 3`` end to end (as ``python -m analysis.cli``);
* ``--help``: ``kmeans-circuits --help``;
* ``report: first stage``: ``kmeans-circuits report --dataset iris --k 3 --out ...`` until its first progress line
  (``[1/2] circuit``) reaches stderr; the process is then stopped.

The code measured is the one ``python -m analysis.cli`` imports, or that of each ``--checkout DIR`` (a source tree
with ``analysis/`` and ``circuits/``, e.g. ``git archive`` of an older commit), all in the same interleaved rounds.
Usage: ``python benchmarks/bench_startup.py [--repeat 3] [--checkout DIR ...]``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SKLEARN = ("import sklearn.cluster, sklearn.datasets as d; X = d.load_iris().data;"
           " sklearn.cluster.KMeans(3, n_init=1).fit(X)")
CLI = [sys.executable, "-m", "analysis.cli"]
BASELINE = "sklearn KMeans on iris (python -c)"


def wall(argv: list[str], cwd: str | None = None, env: dict | None = None) -> float:
    """Seconds from start to exit of ``argv`` (which must succeed)."""
    start = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=cwd, env=env)
    return time.perf_counter() - start


def first_stage(argv: list[str], cwd: str | None = None, env: dict | None = None) -> float:
    """Seconds from start until ``argv`` prints its first progress line (``[1/``) on stderr; then it is stopped."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=cwd, env=env)
    try:
        for line in proc.stderr:
            if "[1/" in line:
                return time.perf_counter() - start
        raise RuntimeError(f"{' '.join(argv)} printed no progress line (exit {proc.wait()})")
    finally:
        proc.kill()
        proc.wait()


def cli_cases(report: Path, checkout: str | None) -> dict:
    """The command-line measurements, of the code in ``checkout`` (``None``: whatever ``analysis`` imports here)."""
    where = {} if checkout is None else {"cwd": checkout, "env": {**os.environ, "PYTHONPATH": checkout}}
    tag = "" if checkout is None else f" [{Path(checkout).name}]"
    return {
        f"cluster --dataset iris --k 3{tag}": lambda: wall([*CLI, "cluster", "--dataset", "iris", "--k", "3"], **where),
        f"--help{tag}": lambda: wall([*CLI, "--help"], **where),
        f"report: first stage line{tag}": lambda: first_stage(
            [*CLI, "report", "--dataset", "iris", "--k", "3", "--out", str(report)], **where),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs per measurement; the best is kept (default 3)")
    parser.add_argument("--checkout", action="append", default=None, metavar="DIR",
                        help="measure the code of this source tree (repeatable: e.g. before and after a change, in"
                             " the same rounds); default: the code on the current path")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.html"
        cases = {BASELINE: lambda: wall([sys.executable, "-c", SKLEARN])}
        for checkout in args.checkout or [None]:
            cases.update(cli_cases(report, checkout))
        # Interleaved rounds, so that a burst of load on the machine hits every case alike.
        times: dict[str, list[float]] = {name: [] for name in cases}
        for _ in range(args.repeat):
            for name, measure in cases.items():
                times[name].append(measure())
    best = {name: min(values) for name, values in times.items()}
    base = best[BASELINE]
    print(f"start-up, best of {args.repeat} fresh processes; ratio = time / the scikit-learn process")
    width = max(len(name) for name in best) + 1
    print(f"{'command':{width}s} {'best s':>7s} {'ratio':>6s}   all s")
    for name, value in best.items():
        print(f"{name:{width}s} {value:7.2f} {value / base:6.2f}   " + " ".join(f"{v:.2f}" for v in times[name]))


if __name__ == "__main__":
    main()
