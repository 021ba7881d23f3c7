"""CPU time (user + system) of the verification alone at scale, without a profiler: the lean capture is made first
(as ``cluster`` without ``--out`` makes it), then ``verify_problem`` is timed.

    python benchmarks/make_scale_data.py --n 1000000 --out /tmp/scale6
    python benchmarks/verify_scale.py /tmp/scale6/X.npy /tmp/scale6/C0.npy [--iterations T]

To compare two checkouts, run it with ``PYTHONPATH`` set to each in turn: the code under ``PYTHONPATH`` is timed
(without it, this file's own checkout). ``profile_scale.py`` gives where the time goes, with the profiler's own
overhead on every call.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time
from pathlib import Path


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("points")
    parser.add_argument("init")
    parser.add_argument("--iterations", type=int, default=10)
    args = parser.parse_args()

    import numpy as np

    from analysis.capture import capture
    from analysis.cli import keep_freed_memory
    from analysis.pipeline import choose_sharpness, lloyd_scaling
    from analysis.verify import reads, verify_problem
    from circuits.encoding import encode
    from circuits.variants import get_variant

    keep_freed_memory()  # as the command line does
    X, C0 = np.load(args.points), np.load(args.init)
    sharpness, _ = choose_sharpness(X, [C0])
    circuit = get_variant("lloyd").build(X.shape[1], C0.shape[0], args.iterations, sharpness=sharpness)
    encoded = encode(circuit.layout, X, C0, scaling=lloyd_scaling(X, C0), hold_stream=False)
    cap = capture(circuit, encoded, path="structured", keep=reads(circuit.spec))
    start, wall = cpu_s(), time.perf_counter()
    report = verify_problem(cap, 0)
    print(f"verify: {cpu_s() - start:.2f} s CPU, {time.perf_counter() - wall:.2f} s wall, verified {report.verified}")


if __name__ == "__main__":
    if not os.environ.get("PYTHONPATH"):
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    main()
