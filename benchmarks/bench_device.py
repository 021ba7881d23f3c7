"""Benchmark: the verified circuit on a device (CPU or GPU) from 10^4 to 10^7 points, against scikit-learn's Lloyd.

One command, one table: for each n (d = 8, k = 10, T = 10, float64, blobs; initial centroids k random points), in
a fresh subprocess (so that peak memory is that n's own):

* ``forward``: :func:`circuits.structured.structured_forward` on the device, nothing recorded (after a warm-up run
  at n = 1,000 on the same device, which pays CUDA's start-up);
* ``capture``: the forward again with every layer decoded and its attention summarised (``analysis.capture``);
* ``verify``: the layer-by-layer verification with its certificate (``analysis.verify.verify_problem``);
* ``sklearn``: ``KMeans(init=C0, n_init=1, algorithm="lloyd", tol=0, max_iter=T)`` on the CPU, in the same
  subprocess; ``ratio`` is (capture + verify) / sklearn, i.e. what ``cluster`` does after building, against it;
* ``RSS``: the subprocess's peak resident set (``ru_maxrss``), and ``GPU``: ``torch.cuda.max_memory_allocated``;
* ``verified`` and ``=sklearn`` (the circuit's final labels equal scikit-learn's).

Then ``train``: optimiser steps per second of ``circuits.training.loop.train`` on the device, at the headline
shape (d = 32, k = 10, n = 512, batch 8, 20 recurrent steps, float32), timed between the first and the last step.

    python benchmarks/bench_device.py                       # device auto (cuda where present), n up to --max-n
    python benchmarks/bench_device.py --device cpu --max-n 1000000
    python benchmarks/bench_device.py --device cuda --ns 10000,100000,1000000,10000000 --json out.json
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
import warnings

from circuits import strict_json

NS = (10_000, 100_000, 1_000_000, 10_000_000)


def _sync(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def one(n: int, d: int, k: int, T: int, device_name: str, verify: bool = True, threads: int | None = None) -> dict:
    """Everything measured at one n, in this process (the forward alone unless ``verify``; ``threads``: torch's CPU
    threads on the structured path, by default the scheduler's, :data:`analysis.scheduler.FORWARD_THREADS`)."""
    warnings.filterwarnings("ignore", message="HookedTransformer is deprecated")
    import numpy as np
    import torch
    from sklearn.cluster import KMeans

    from analysis.capture import EVERYTHING, capture
    from analysis.cli import keep_freed_memory
    from analysis.pipeline import choose_sharpness, lloyd_scaling
    from analysis.scheduler import FORWARD_THREADS, Scheduler
    from analysis.verify import reads, verify_problem
    from benchmarks.make_scale_data import make
    from circuits.devices import resolve
    from circuits.encoding import encode
    from circuits.structured import Recording, structured_forward
    from circuits.variants import get_variant

    keep_freed_memory()
    threads = FORWARD_THREADS if threads is None else threads
    device = resolve(device_name)
    X, C0 = make(n, d, k)
    t0 = time.perf_counter()
    km = KMeans(k, init=C0, n_init=1, algorithm="lloyd", tol=0, max_iter=T).fit(X)
    t_sklearn = time.perf_counter() - t0

    def circuit_for(points):
        sharpness, _ = choose_sharpness(points, [C0])
        return get_variant("lloyd").build(d, k, T, sharpness=sharpness, device=str(device))

    def forward(circuit, encoded) -> None:
        structured_forward(circuit.runnable, encoded.resid, circuit.score_hooks,
                           Recording(lambda layer, record: None, pre=False), threads=threads)
        _sync(device)

    small = X[:1000]
    warm = circuit_for(small)
    forward(warm, encode(warm.layout, small, C0, scaling=lloyd_scaling(small, C0), device=device))
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    t0 = time.perf_counter()
    circuit = circuit_for(X)
    encoded = encode(circuit.layout, X, C0, scaling=lloyd_scaling(X, C0), device=device)
    t_build = time.perf_counter() - t0
    t0 = time.perf_counter()
    forward(circuit, encoded)
    t_forward = time.perf_counter() - t0
    t_capture = t_verify = verified = equal = None
    if verify:
        t0 = time.perf_counter()
        # Lean at scale, as cluster (without --out) runs it.
        scheduler = Scheduler.for_points(n)
        cap = capture(circuit, encoded, path="structured", forward_threads=threads,
                      keep=reads(circuit.spec) if scheduler.at_scale else EVERYTHING)
        _sync(device)
        t_capture = time.perf_counter() - t0
        t0 = time.perf_counter()
        verified = bool(verify_problem(cap, 0, scheduler).verified)
        scheduler.close()
        t_verify = time.perf_counter() - t0
        equal = bool(np.array_equal(cap.final.labels[0], km.labels_))
    return {
        "device": str(device), "n": n, "d": d, "k": k, "T": T, "sklearn_s": t_sklearn, "build_s": t_build,
        "forward_s": t_forward, "capture_s": t_capture, "verify_s": t_verify,
        "ratio": (t_capture + t_verify) / t_sklearn if verify else t_forward / t_sklearn,
        "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "rss_data_mib": rss_before,
        "gpu_mib": torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else None,
        "verified": verified, "equal_sklearn": equal,
        "torch_threads": torch.get_num_threads(), "structured_cpu_threads": threads,
    }


def train_rate(device_name: str, steps: int) -> dict:
    """Optimiser steps per second of ``train`` at the headline shape, between the first and the last step."""
    import torch

    from circuits.devices import resolve
    from circuits.training.loop import TrainConfig, train

    device = resolve(device_name)
    stamps = []

    def progress(step: int, total: int, info: dict) -> None:
        _sync(device)
        stamps.append(time.perf_counter())

    cfg = TrainConfig(steps=steps, val_every=steps, val_tasks=8)
    with tempfile.TemporaryDirectory() as out:
        train(out, cfg, progress=progress, device=str(device))
    rate = (len(stamps) - 1) / (stamps[-1] - stamps[0]) if len(stamps) > 1 else float("nan")
    return {"device": str(device), "train_steps": steps, "steps_per_s": rate, "torch_threads": torch.get_num_threads()}


def _child(args: list[str], timeout: float) -> dict:
    done = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        return {"error": (done.stderr.strip().splitlines() or ["failed"])[-1]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def table(rows: list[dict]) -> str:
    head = (f"{'device':>7} {'n':>9} {'sklearn s':>9} {'forward s':>9} {'capture s':>9} {'verify s':>9} {'ratio':>7}"
            f" {'RSS MiB':>8} {'GPU MiB':>8} {'verified':>8} {'=sklearn':>8}")
    lines = [head]
    for r in rows:
        if "error" in r:
            lines.append(f"{r.get('device', '?'):>7} {r['n']:>9}  failed: {r['error']}")
            continue
        gpu = f"{r['gpu_mib']:8.0f}" if r["gpu_mib"] is not None else f"{'-':>8}"
        ran = r["capture_s"] is not None
        capture, verify = (f"{r['capture_s']:9.3f}", f"{r['verify_s']:9.3f}") if ran else (f"{'-':>9}", f"{'-':>9}")
        ratio = f"{r['ratio']:6.0f}x" + ("" if ran else "*")
        lines.append(f"{r['device']:>7} {r['n']:>9} {r['sklearn_s']:9.3f} {r['forward_s']:9.3f} {capture} {verify}"
                     f" {ratio:>7} {r['rss_mib']:8.0f} {gpu} {str(r['verified']):>8} {str(r['equal_sklearn']):>8}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto", help="auto (cuda where present), cpu or cuda")
    parser.add_argument("--ns", default=",".join(map(str, NS)), help="point counts (default 10^4 to 10^7)")
    parser.add_argument("--max-n", type=int, default=None, help="leave out the point counts above this")
    parser.add_argument("--verify-max-n", type=int, default=None,
                        help="above this n, time the forward alone (no capture, no verification; ratio marked *:"
                             " forward / sklearn)")
    parser.add_argument("--d", type=int, default=8)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--iterations", type=int, default=10)
    parser.add_argument("--train-steps", type=int, default=10, help="steps of the training measurement (0: none)")
    parser.add_argument("--structured-threads", type=int, default=None,
                        help="torch CPU threads on the structured path (default analysis.scheduler.FORWARD_THREADS)")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per measurement")
    parser.add_argument("--json", metavar="FILE", help="also write every row as JSON")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--train-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one is not None:
        verify = args.verify_max_n is None or args.one <= args.verify_max_n
        print(strict_json.dumps(one(args.one, args.d, args.k, args.iterations, args.device, verify, args.structured_threads)))
        return
    if args.train_only:
        print(strict_json.dumps(train_rate(args.device, args.train_steps)))
        return
    import torch

    from circuits.devices import resolve

    device = str(resolve(args.device))
    from analysis.scheduler import FORWARD_THREADS

    name = (torch.cuda.get_device_name(device) if device.startswith("cuda") else
            f"CPU, {torch.get_num_threads()} torch threads, {args.structured_threads or FORWARD_THREADS} on the"
            " structured path")
    print(f"device {device} ({name}); d={args.d}, k={args.k}, T={args.iterations}, float64, blobs; scikit-learn on the"
          " CPU in the same process", flush=True)
    ns = [int(v) for v in args.ns.split(",") if v]
    ns = [n for n in ns if args.max_n is None or n <= args.max_n]
    common = ["--device", device, "--d", str(args.d), "--k", str(args.k), "--iterations", str(args.iterations)]
    if args.verify_max_n is not None:
        common += ["--verify-max-n", str(args.verify_max_n)]
    if args.structured_threads is not None:
        common += ["--structured-threads", str(args.structured_threads)]
    rows = []
    for n in ns:
        try:
            row = _child(common + ["--one", str(n)], args.timeout)
        except subprocess.TimeoutExpired:
            row = {"error": f"over {args.timeout:.0f} s"}
        rows.append({"n": n, "device": device, **row})
        print(table(rows).splitlines()[-1] if len(rows) > 1 else table(rows), flush=True)
    train = None
    if args.train_steps > 0:
        try:
            train = _child(["--device", device, "--train-steps", str(args.train_steps), "--train-only"], args.timeout)
        except subprocess.TimeoutExpired:
            train = {"error": f"over {args.timeout:.0f} s"}
        if "error" in train:
            print(f"train: failed: {train['error']}")
        else:
            print(f"train (d=32, k=10, n=512, batch 8, 20 steps, float32) on {device}: {train['steps_per_s']:.2f}"
                  f" steps/s over {args.train_steps} steps")
    if args.json:
        with open(args.json, "w") as f:
            f.write(strict_json.dumps({"device": device, "device_name": name, "rows": rows, "train": train}, indent=1))


if __name__ == "__main__":
    sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parent.parent))
    main()
