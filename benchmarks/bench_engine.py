"""Benchmark: the sweep on the serial engine against ``--engine ray`` on this machine's cores.

Runs ``kmeans-circuits sweep`` (default grid and circuit runner unless told otherwise) as a user does, once per
engine and repeat, each in a fresh process, so the wall times include starting Python, importing torch and (for
Ray) starting a local Ray instance and its workers. Reports wall times and the speed-up serial / ray, and checks
that both engines wrote the same ``sweep.csv`` byte for byte. The load average before and after is printed: on a
shared machine other work slows both, and the speed-up says little unless the machine was quiet.

Run: ``python benchmarks/bench_engine.py [--grid default] [--runner circuit] [--repeats 1] [--cpus N]``
(``--cpus N`` runs both engines on the first N cores this process may use, by CPU affinity, which also sizes the
local Ray instance; default: every one).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def run_once(argv: list[str], out: Path) -> float:
    """Wall seconds of one sweep."""
    start = time.perf_counter()
    res = subprocess.run([sys.executable, "-m", "analysis.cli", "sweep", *argv, "--out", str(out)],
                         capture_output=True, text=True)
    wall = time.perf_counter() - start
    if res.returncode != 0:
        sys.exit(f"sweep {' '.join(argv)} failed ({res.returncode}):\n{res.stderr}")
    return wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grid", default="default")
    parser.add_argument("--runner", default="circuit")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--cpus", type=int, default=None, help="cores for both engines (taskset); default all")
    args = parser.parse_args()
    if args.cpus is not None:
        os.sched_setaffinity(0, set(sorted(os.sched_getaffinity(0))[: args.cpus]))
    cores = len(os.sched_getaffinity(0))
    grid = ["--grid", args.grid, "--runner", args.runner]
    print(f"sweep --grid {args.grid} --runner {args.runner}: serial vs --engine ray on {cores} core(s)"
          f" ({os.cpu_count()} on the machine); load average before: {os.getloadavg()[0]:.2f}")
    print(" engine  repeat   wall s  load")
    best = {}
    with tempfile.TemporaryDirectory() as tmp:
        for repeat in range(1, args.repeats + 1):
            for engine in ("serial", "ray"):
                wall = run_once([*grid, "--engine", engine], Path(tmp) / f"{engine}{repeat}")
                best[engine] = min(best.get(engine, wall), wall)
                print(f"{engine:>7} {repeat:7d} {wall:8.1f}  {os.getloadavg()[0]:.2f}", flush=True)
        same = all((Path(tmp) / f"serial{r}" / "sweep.csv").read_bytes() == (Path(tmp) / f"ray{r}" / "sweep.csv").read_bytes()
                   for r in range(1, args.repeats + 1))
    print(f"speed-up serial / ray (best wall times): {best['serial'] / best['ray']:.2f}x;"
          f" sweep.csv identical: {same}; load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
