"""Every table of the general model's evaluation (issue 15's "Measure" list), produced by one command.

    python benchmarks/bench_general.py [--checkpoint checkpoints/general] [--tasks 32] [--inits 10] [--threads 1]
    python benchmarks/bench_general.py --construction swap     # the same tables for the safeguarded-swap transformer

Runs ``kmeans-circuits evaluate --json`` on the checkpoint three times — held-out general tasks at six shapes with
random initial centroids, the same with scikit-learn's k-means++, and the bundled datasets in raw units at their
true k — writes each JSON to ``CHECKPOINT/eval/`` (``benchmarks/results/CONSTRUCTION/`` for a construction), and prints the markdown tables that ``docs/training.md`` quotes
(also written to ``CHECKPOINT/eval/tables.md``). Every ratio is model / Lloyd's from the same initial centroids
(20 steps), or, in the optimum column, the objective over scikit-learn's ``KMeans(k-means++, n_init=10)``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from circuits import strict_json

RUNS = {
    "synthetic_random": ["--init", "random", "--datasets", "none"],
    "synthetic_kmeanspp": ["--init", "k-means++", "--datasets", "none"],
    "datasets": ["--tasks", "0"],
}


def evaluate(which: list[str], extra: list[str], tasks: int, inits: int, threads: int) -> tuple[dict, float]:
    cmd = [sys.executable, "-m", "analysis.cli", "evaluate", *which, "--tasks", str(tasks), "--n", "128",
           "--dataset-inits", str(inits), "--steps", "20", "--threads", str(threads), "--json", *extra]
    # --tasks in ``extra`` (the datasets run) overrides the one above: argparse keeps the last.
    t0 = time.perf_counter()
    out = subprocess.run(cmd, check=True, capture_output=True, text=True)
    return json.loads(out.stdout), time.perf_counter() - t0


def pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def shape_table(doc: dict, title: str) -> list[str]:
    sh = doc["shapes"]
    lines = [f"| {title} ({sh['tasks_per_shape']} tasks per shape, n={sh['n']}) | ratio after 20 steps (mean / median"
             " / max) | worst step (mean ratio) | ratio after 1 / 5 / 10 steps | objective never rises | model / Lloyd's"
             " over sklearn optimum | sklearn optimum / Lloyd's (mean / median) |", "|---|---|---|---|---|---|---|"]
    rows = [(f"d={s['d']}, k={s['k']}", s["anytime"]) for s in sh["per_shape"]] + [("**all shapes**", sh["overall"])]
    for label, a in rows:
        per = a["ratio_mean_per_step"]
        lines.append(f"| {label} | **{a['ratio_mean']:.3f}** / {a['ratio_median']:.3f} / {a['ratio_max']:.3f} |"
                     f" {a['worst_step_mean']:.3f} | {per[0]:.3f} / {per[4]:.3f} / {per[9]:.3f} |"
                     f" {pct(a['frac_never_rises'])} | {a['model_over_optimum']:.3f} / {a['lloyd_over_optimum']:.3f} |"
                     f" {a['optimum_over_lloyd']:.3f} / {a['optimum_over_lloyd_median']:.3f} |")
    return lines


def dataset_table(doc: dict) -> list[str]:
    inits = doc["datasets"][0]["inits"] if doc["datasets"] else 0
    lines = [f"| dataset (raw units, true k, {inits} random inits) | ratio after 20 steps (mean / max) | worst step |"
             " objective never rises | ARI model / Lloyd's | NMI model / Lloyd's | model / Lloyd's over sklearn"
             " optimum |", "|---|---|---|---|---|---|---|"]
    for ds in doc["datasets"]:
        a, f = ds["anytime"], ds["final"]
        lines.append(f"| {ds['name']}, n={ds['n']}, d={ds['d']}, k={ds['k']} | **{a['ratio_mean']:.4f}** /"
                     f" {a['ratio_max']:.4f} | {a['worst_step_mean']:.4f} | {pct(a['frac_never_rises'])} |"
                     f" {f['model_ari']:.3f} / {f['lloyd_ari']:.3f} | {f['model_nmi']:.3f} / {f['lloyd_nmi']:.3f} |"
                     f" {a['model_over_optimum']:.4f} / {a['lloyd_over_optimum']:.4f} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", default="checkpoints/general")
    parser.add_argument("--construction", choices=("swap",), default=None,
                        help="evaluate this construction instead of the checkpoint")
    parser.add_argument("--engine", choices=("serial", "ray"), default="serial")
    parser.add_argument("--tasks", type=int, default=32, help="held-out tasks per shape (default 32)")
    parser.add_argument("--inits", type=int, default=10, help="initialisations per dataset (default 10)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--datasets", default="iris,wine,breast_cancer,digits")
    args = parser.parse_args()
    RUNS["datasets"] += ["--datasets", args.datasets]
    if args.construction:
        which = ["--construction", args.construction, "--engine", args.engine]
        out = Path(__file__).resolve().parent / "results" / args.construction
    else:
        which = ["--checkpoint", args.checkpoint, "--device", "cpu", "--engine", args.engine]
        out = Path(args.checkpoint) / "eval"
    out.mkdir(parents=True, exist_ok=True)
    docs, seconds = {}, {}
    for name, extra in RUNS.items():
        print(f"{name} ...", file=sys.stderr, flush=True)
        docs[name], seconds[name] = evaluate(which, extra, args.tasks, args.inits, args.threads)
        (out / f"{name}.json").write_text(strict_json.dumps(docs[name], indent=1) + "\n")
    lines = shape_table(docs["synthetic_random"], "random init") + [""]
    lines += shape_table(docs["synthetic_kmeanspp"], "k-means++ init") + [""]
    lines += dataset_table(docs["datasets"]) + [""]
    lines.append("wall seconds: " + ", ".join(f"{k} {v:.0f}" for k, v in seconds.items()))
    text = "\n".join(lines) + "\n"
    (out / "tables.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
