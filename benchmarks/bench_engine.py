"""Benchmark: the sweep on the serial engine against ``--engine ray`` on this machine's cores.

Runs ``kmeans-circuits sweep`` (default grid and circuit runner unless told otherwise) as a user does, in a fresh
process per run, so the wall times include starting Python, importing torch and (for Ray) starting a local Ray
instance and its workers. Three runs per repeat:

* ``serial``: the default engine, torch with its default threads;
* ``serial-1t``: the same with ``OMP_NUM_THREADS=1`` (one torch thread, as each Ray worker has): a control that
  separates the gain of running cells side by side from the cost of torch's threads on these small problems;
* ``ray``: ``--engine ray``, one single-threaded worker per core.

Reports wall times (CPU seconds too for the serial runs, where all the work is in the one child process; Ray's
workers are not its children), the speed-ups, and whether all runs wrote the same ``sweep.csv`` byte for byte.
The load average is printed after each run: on a shared machine other work slows every run, and a process
competing with others gets a larger share of the machine when it runs more processes, so a speed-up measured
under load is not the one a quiet machine would give.

Run: ``python benchmarks/bench_engine.py [--grid default] [--runner circuit] [--repeats 1] [--cpus N]``
(``--cpus N`` runs everything on the first N cores this process may use, by CPU affinity, which also sizes the
local Ray instance; default: every one).
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path


RUNS = (("serial", ["--engine", "serial"], {}), ("serial-1t", ["--engine", "serial"], {"OMP_NUM_THREADS": "1"}),
        ("ray", ["--engine", "ray"], {}))


def run_once(argv: list[str], out: Path, env: dict) -> tuple[float, float]:
    """Wall seconds of one sweep, and the CPU seconds (user + system) of the processes it waited for."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    res = subprocess.run([sys.executable, "-m", "analysis.cli", "sweep", *argv, "--out", str(out)],
                         capture_output=True, text=True, env={**os.environ, **env})
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if res.returncode != 0:
        sys.exit(f"sweep {' '.join(argv)} failed ({res.returncode}):\n{res.stderr}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grid", default="default")
    parser.add_argument("--runner", default="circuit")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--cpus", type=int, default=None, help="cores for every run (CPU affinity); default all")
    args = parser.parse_args()
    if args.cpus is not None:
        os.sched_setaffinity(0, set(sorted(os.sched_getaffinity(0))[: args.cpus]))
    cores = len(os.sched_getaffinity(0))
    grid = ["--grid", args.grid, "--runner", args.runner]
    print(f"sweep --grid {args.grid} --runner {args.runner}: serial vs --engine ray on {cores} core(s)"
          f" ({os.cpu_count()} on the machine); load average before: {os.getloadavg()[0]:.2f}")
    print("    run     repeat   wall s    cpu s  load after")
    best: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        csvs = []
        for repeat in range(1, args.repeats + 1):
            for name, argv, env in RUNS:
                out = Path(tmp) / f"{name}{repeat}"
                wall, cpu = run_once([*grid, *argv], out, env)
                best[name] = min(best.get(name, wall), wall)
                shown = f"{cpu:8.1f}" if name != "ray" else "       -"
                print(f"{name:>10} {repeat:8d} {wall:8.1f} {shown}  {os.getloadavg()[0]:10.2f}", flush=True)
                csvs.append((out / "sweep.csv").read_bytes())
    same = all(c == csvs[0] for c in csvs)
    print(f"speed-up of ray (best wall times): {best['serial'] / best['ray']:.2f}x over serial,"
          f" {best['serial-1t'] / best['ray']:.2f}x over serial-1t; every sweep.csv identical: {same}")


if __name__ == "__main__":
    main()
