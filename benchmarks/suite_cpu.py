"""Where the test suite's CPU goes: per test file, in the test process and in the processes it starts.

A pytest plugin and its report. Run the suite with it (each xdist worker writes its own log)::

    PYTHONPATH=benchmarks KMC_SUITE_CPU=/tmp/suite python -m pytest -q -n 2 -p suite_cpu
    python benchmarks/suite_cpu.py /tmp/suite            # the files, most CPU first

Per test (setup, call and teardown together) it records the test process's CPU (user + system, all its threads)
and that of the child processes it waited for (a command run with subprocess or through tests/command_server.py, a
notebook kernel, mkdocs; not a Chromium or a Ray worker that outlives the test), and the wall time. The command
server's own start-up (about 7 s of CPU, once per worker) is counted in no test. CPU is the figure to compare
between runs on a shared machine: two workers on two cores, or another job, stretch the wall times, not the CPU.
"""

from __future__ import annotations

import argparse
import collections
import os
import resource
import sys
import time
from pathlib import Path

import pytest

LOG = "KMC_SUITE_CPU"


def _cpu() -> tuple[float, float]:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    # Commands run through tests/command_server.py are children of its server, which counts their CPU for us.
    server = sys.modules.get("command_server")
    served = server.served_cpu() if server is not None else 0.0
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime + served


_rows: list[str] = []


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    own, children, wall = *_cpu(), time.monotonic()
    yield
    own2, children2 = _cpu()
    _rows.append(f"{own2 - own:.3f}\t{children2 - children:.3f}\t{time.monotonic() - wall:.3f}\t{item.nodeid}\n")


def pytest_sessionfinish(session):
    prefix = os.environ.get(LOG)
    if prefix and _rows:
        with open(f"{prefix}.{os.getpid()}.tsv", "a") as f:
            f.writelines(_rows)


def report(prefix: str, top: int) -> None:
    per_file: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0.0, 0.0, 0])
    logs = sorted(Path(prefix).parent.glob(Path(prefix).name + ".*.tsv"))
    if not logs:
        sys.exit(f"no logs {prefix}.*.tsv: run the suite with {LOG}={prefix} and -p suite_cpu first")
    for log in logs:
        for line in log.read_text().splitlines():
            *times, nodeid = line.split("\t")
            row = per_file[nodeid.split("::")[0]]
            for i, value in enumerate((*map(float, times), 1)):
                row[i] += value
    total = [sum(r[i] for r in per_file.values()) for i in range(4)]
    print(f"{int(total[3])} tests in {len(logs)} process(es): {total[0] / 60:.1f} min of CPU in the test processes, "
          f"{total[1] / 60:.1f} min in their children, {total[2] / 60:.1f} min of wall time added over tests")
    print(f"{'own CPU s':>9} {'children':>9} {'wall s':>8} {'tests':>5}  file")
    for name, (own, children, wall, n) in sorted(per_file.items(), key=lambda kv: -(kv[1][0] + kv[1][1]))[:top]:
        print(f"{own:9.1f} {children:9.1f} {wall:8.1f} {n:5d}  {name}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("prefix", help=f"the {LOG} prefix the suite was run with")
    parser.add_argument("--top", type=int, default=30, help="how many files to list (default 30)")
    args = parser.parse_args()
    report(args.prefix, args.top)
