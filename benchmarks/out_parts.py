"""Where ``cluster --out``'s time goes: the run, each file and each part of the report, and the cores in use.

Runs the command line in this process with a timer around the run (``run_circuit``), the three data files
(``output_files``), the report's header, each default section, the Projection of the trajectories view (its
scikit-learn import and PCA fit) and the page's HTML; every half second it also reads this process's CPU time,
so the phases show as cores in use (one for start-up, two for the run, one for the report). Inside the run it
gives each stage's thread, its start and end (seconds from the command's start) and that thread's CPU time: the
capture and the verification on the calling thread, the reference's run and the sharpness bound on the worker,
and the step-wise checks on each thread that took some::

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


def on_threads(spans: list[tuple[str, str, float, float, float]], name: str, f, start: float):
    """``f``, appending ``(name, thread, start, end, thread CPU)`` to ``spans`` for every call."""
    @functools.wraps(f)
    def wrapper(*args, **kwargs):
        t, cpu = time.perf_counter(), time.thread_time()
        try:
            return f(*args, **kwargs)
        finally:
            spans.append((name, threading.current_thread().name, t - start, time.perf_counter() - start,
                          time.thread_time() - cpu))
    return wrapper


def stage_lines(spans: list[tuple[str, str, float, float, float]]) -> list[str]:
    """One line per stage and thread: first start, last end, CPU summed (a stage called several times, such as a
    block's step-wise check, is one line per thread with its count)."""
    merged: dict[tuple[str, str], list] = {}
    for name, thread, begin, end, cpu in spans:
        row = merged.setdefault((name, thread), [begin, end, 0.0, 0])
        row[0], row[1], row[2], row[3] = min(row[0], begin), max(row[1], end), row[2] + cpu, row[3] + 1
    return [f"  {name:26s} {thread:14s} {begin:6.2f} -> {end:6.2f} s   CPU {cpu:6.2f} s" + (f"  ({n} calls)" if n > 1
            else "") for (name, thread), (begin, end, cpu, n) in sorted(merged.items(), key=lambda kv: kv[1][0])]


def main(argv: list[str]) -> int:
    from analysis import pipeline
    from analysis.cli import cluster
    from analysis.cli.main import main as command
    from analysis.report import circuit as report_circuit
    from analysis.report import document
    from analysis.verify import prefetch, procedure, steps
    from analysis.views import trajectories

    times: dict[str, float] = {}
    spans: list[tuple[str, str, float, float, float]] = []
    begin = time.perf_counter()
    pipeline.capture = on_threads(spans, "capture", pipeline.capture, begin)
    pipeline.verify_problem = on_threads(spans, "verification", pipeline.verify_problem, begin)
    prefetch.run_reference = on_threads(spans, "the reference's run", prefetch.run_reference, begin)
    procedure._evaluate_bound = on_threads(spans, "the sharpness bound", procedure._evaluate_bound, begin)
    steps._check_block = on_threads(spans, "step-wise checks", steps._check_block, begin)
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
    projection = "  of which the Projection (import, PCA fit)"
    for name, seconds in times.items():
        if name == projection:
            continue  # timed inside the trajectories section: printed under it
        print(f"{name:48s} {seconds:7.2f} s", file=sys.stderr)
        if name == "section trajectories" and projection in times:
            print(f"{projection:48s} {times[projection]:7.2f} s", file=sys.stderr)
        if name == "run (run_circuit)":
            print("\n".join(stage_lines(spans)), file=sys.stderr)
    print("cores in use, per half second: " + " ".join(f"{c:.1f}" for _, c in samples), file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
