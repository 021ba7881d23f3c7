"""Where the CPU time of ``cluster`` goes at scale: cProfile of the capture (structured forward, decoding, attention
summaries) and of the verification, with the CPU time (user + system) and peak resident set after each.

    python benchmarks/make_scale_data.py --n 1000000 --out /tmp/scale6
    python benchmarks/profile_scale.py /tmp/scale6/X.npy /tmp/scale6/C0.npy [--full]

The capture is lean (what ``cluster`` without ``--out`` runs from ``analysis.scheduler.AT_SCALE_POINTS`` points on);
``--full`` keeps every layer's attention as a report needs.
"""

from __future__ import annotations

import cProfile
import pstats
import resource
import sys
from pathlib import Path


def rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main(x_path: str, c0_path: str, iterations: int = 10, lean: bool = True) -> None:
    import numpy as np

    from analysis.capture import EVERYTHING, capture
    from analysis.cli import keep_freed_memory
    from analysis.pipeline import choose_sharpness, lloyd_scaling
    from analysis.verify import reads, verify_problem
    from circuits.encoding import encode
    from circuits.variants import get_variant

    keep_freed_memory()  # as the command line does
    X, C0 = np.load(x_path), np.load(c0_path)
    start = cpu_s()
    sharpness, _ = choose_sharpness(X, [C0])
    circuit = get_variant("lloyd").build(X.shape[1], C0.shape[0], iterations, sharpness=sharpness)
    encoded = encode(circuit.layout, X, C0, scaling=lloyd_scaling(X, C0), hold_stream=not lean)
    built = cpu_s()
    print(f"knobs, build, encode: {built - start:.1f} s CPU, peak {rss_mib():.0f} MiB", flush=True)
    profile = cProfile.Profile()
    profile.enable()
    cap = capture(circuit, encoded, path="structured", keep=reads(circuit.spec) if lean else EVERYTHING)
    profile.disable()
    captured = cpu_s()
    print(f"capture: {captured - built:.1f} s CPU, peak {rss_mib():.0f} MiB", flush=True)
    pstats.Stats(profile).sort_stats("tottime").print_stats(15)
    profile = cProfile.Profile()
    profile.enable()
    report = verify_problem(cap, 0)
    profile.disable()
    print(f"verify: {cpu_s() - captured:.1f} s CPU, peak {rss_mib():.0f} MiB, verified {report.verified}", flush=True)
    pstats.Stats(profile).sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    main(sys.argv[1], sys.argv[2], lean="--full" not in sys.argv[3:])
