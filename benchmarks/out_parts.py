"""Where ``cluster --out``'s time goes: the run, each file and each part of the report, and the cores in use.

Runs the command line in this process with a timer around the run (``run_circuit``), the three data files
(``output_files``), the report's header, each default section, the Projection of the trajectories view (its
scikit-learn import and PCA fit) and the page's HTML; every half second it also reads this process's CPU time,
so the phases show as cores in use (one for start-up, two for the run, one for the report)::

    python benchmarks/make_scale_data.py --n 1000000 --out /tmp/scale6
    python benchmarks/out_parts.py cluster --data /tmp/scale6/X.npy --init /tmp/scale6/C0.npy --k 10 \\
        --iterations 10 --out /tmp/o6 --json > /dev/null

Without ``--out`` it times the run alone. The table goes to stderr.
"""

from __future__ import annotations

import functools
import sys
import threading
import time

TICK = 0.5


def cores_over_time(samples: list[tuple[float, float]], stop: threading.Event) -> None:
    """Append ``(seconds since start, cores in use over the last tick)`` until ``stop`` is set."""
    start, last = time.perf_counter(), time.process_time()
    while not stop.wait(TICK):
        now = time.process_time()
        samples.append((time.perf_counter() - start, (now - last) / TICK))
        last = now


def timed(times: dict[str, float], name: str, f):
    @functools.wraps(f)
    def wrapper(*args, **kwargs):
        t = time.perf_counter()
        try:
            return f(*args, **kwargs)
        finally:
            times[name] = times.get(name, 0.0) + time.perf_counter() - t
    return wrapper


def main(argv: list[str]) -> int:
    from analysis.cli import cluster
    from analysis.cli.main import main as command
    from analysis.report import circuit as report_circuit
    from analysis.report import document
    from analysis.views import trajectories

    times: dict[str, float] = {}
    cluster.run_circuit = timed(times, "run (run_circuit)", cluster.run_circuit)
    cluster.output_files = timed(times, "labels.csv, centroids.csv, verification.json", cluster.output_files)
    report_circuit.build_header = timed(times, "header (the model: TransformerLens)", report_circuit.build_header)
    for section in report_circuit.DEFAULT_SECTIONS:
        object.__setattr__(section, "views", timed(times, f"section {section.key}", section.views))
    trajectories.Projection.__init__ = timed(times, "  of which the Projection (import, PCA fit)",
                                             trajectories.Projection.__init__)
    document.Report.to_html = timed(times, "the page's HTML", document.Report.to_html)
    samples: list[tuple[float, float]] = []
    stop = threading.Event()
    sampler = threading.Thread(target=cores_over_time, args=(samples, stop), daemon=True)
    sampler.start()
    start = time.perf_counter()
    code = command(argv)
    times["the command, in all"] = time.perf_counter() - start
    stop.set()
    sampler.join()
    for name, seconds in times.items():
        print(f"{name:48s} {seconds:7.2f} s", file=sys.stderr)
    print("cores in use, per half second: " + " ".join(f"{c:.1f}" for _, c in samples), file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
