"""How far below Lloyd's can a *safe* algorithm go on the general model's held-out tasks? A design study in numpy.

The general model's goals (issue 15) ask for a mean ratio to Lloyd's of 0.85 (random init) and 0.95 (k-means++)
after 20 steps, with the objective never rising and never above Lloyd's. This script measures, on exactly the
held-out tasks ``benchmarks/bench_general.py`` evaluates the checkpoint on (test stream, six shapes, n = 128):

* the floor: scikit-learn's best of ten k-means++ restarts run to convergence, over Lloyd's after 20 steps;
* ``safeguarded swap``, a reference algorithm that is *not* a transformer (yet): each step proposes Lloyd's step
  from the current centroids and Lloyd's step after one *swap* (the centroid whose removal costs least — the sum,
  over its points, of their distance to the second-nearest centroid minus the nearest — moves onto the point
  farthest from its nearest centroid), and keeps the best of those two and of plain Lloyd's own trajectory from the
  same start. So by construction its objective never rises and is never above Lloyd's at any step. Every piece is a
  hard-attention or MLP operation (nearest and second-nearest centroid, a per-centroid sum over its points, an
  argmin over centroid tokens, an argmax over points, a mean over points on a summary token, a compare-and-select),
  which is why it is the candidate architecture for the next general model.

    python benchmarks/study_safeguarded_swap.py [--tasks 32] [--n 128] [--transformer] [--real INITS]

The algorithm is :func:`circuits.swap.reference.safeguarded_swap` (Lloyd's step is the project's numpy reference:
empty clusters keep their centroid). ``--transformer`` also runs the exact transformer construction of it
(:func:`circuits.swap.build.build_swap_circuit`) on every task and reports, per shape, the largest relative
difference of its objectives (and centroids) from the reference's and how many tasks kept the same candidate at
every step; the script exits 1 if any objective differs by more than 1e-9 relative. ``--real INITS`` adds
scikit-learn's bundled datasets (iris, wine, breast cancer, digits) at their true k, in raw units, from ``INITS``
random-point and ``INITS`` k-means++ initialisations each (``--tasks 0`` skips the general tasks).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from analysis.evaluation import DEFAULT_SHAPES, REAL_DATASETS, sklearn_optimum
from circuits.swap import reference as swap_reference
from circuits.training.general_tasks import general_tasks
from circuits.training.tasks import TEST

STEPS = 20


def safeguarded_swap(X: np.ndarray, C0: np.ndarray, steps: int,
                     select_margin: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """Objectives ``[steps + 1]`` of the study algorithm and of Lloyd's, from ``C0``."""
    run = swap_reference.safeguarded_swap(X, C0, steps, select_margin)
    return run.objectives, run.lloyd_objectives


def transformer_check(X: np.ndarray, C0: np.ndarray, circuit) -> tuple[float, float, bool]:
    """Run the built circuit; max relative differences to the reference (same select margin and tie-break) of its
    objectives and centroids, and whether every step kept the same candidate."""
    ref = swap_reference.safeguarded_swap(X, C0, circuit.steps, circuit.knobs.select_margin,
                                          circuit.user_tie_break(X, C0))
    run = circuit.run(X, C0)
    obj = float(np.max(np.abs(run.objectives - ref.objectives) / np.maximum(np.abs(ref.objectives), 1e-300)))
    size = float(np.abs(ref.centroids - X.mean(axis=0)).max()) or 1.0
    cen = float(np.abs(run.centroids - ref.centroids).max() / size)
    return obj, cen, run.choices == ref.choices


def row(label: str, ours: np.ndarray, lloyd: np.ndarray, floor: np.ndarray) -> str:
    ratio = ours[:, 1:] / lloyd[:, 1:]
    rises = (ours[:, 1:] > ours[:, :-1] * (1 + 1e-5)).any(axis=1)
    return (f"| {label} | **{ratio[:, -1].mean():.3f}** / {np.median(ratio[:, -1]):.3f} / {ratio[:, -1].max():.3f} |"
            f" {ratio.mean(axis=0).max():.3f} | {1 - rises.mean():.1%} | {floor.mean():.3f} / {np.median(floor):.3f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=32, help="held-out tasks per shape (default 32)")
    parser.add_argument("--n", type=int, default=128)
    parser.add_argument("--transformer", action="store_true",
                        help="also run the transformer construction and check it against the reference")
    parser.add_argument("--real", type=int, default=0, metavar="INITS",
                        help="also run scikit-learn's bundled datasets at their true k, INITS initialisations of each"
                             " kind (default 0: none)")
    args = parser.parse_args()
    if args.tasks < 0 or args.n < 16 or args.real < 0:
        parser.error("--tasks and --real must be >= 0 and --n >= 16")
    worst = 0.0
    for init in ("random", "k-means++") if args.tasks else ():
        print(f"| {init} init ({args.tasks} tasks per shape, n={args.n}) | safeguarded swap / Lloyd's after {STEPS}"
              " steps (mean / median / max) | worst step (mean ratio) | objective never rises |"
              " sklearn optimum / Lloyd's (mean / median) |\n|---|---|---|---|---|")
        every = ([], [], [])
        for i, (d, k) in enumerate(DEFAULT_SHAPES):
            batch = general_tasks(args.tasks, args.n, 64, 16, 0, TEST, i, shape=(d, k), init=init)
            runs = [safeguarded_swap(x, c, STEPS) for x, c in zip(batch.X, batch.C0)]
            ours, lloyd = np.stack([r[0] for r in runs]), np.stack([r[1] for r in runs])
            floor = np.array([sklearn_optimum(x, k) for x in batch.X]) / lloyd[:, -1]
            for acc, part in zip(every, (ours, lloyd, floor)):
                acc.append(part)
            print(row(f"d={d}, k={k}", ours, lloyd, floor), flush=True)
            if args.transformer:
                worst = max(worst, check_shape(batch, d, k))
        print(row("**all shapes**", *(np.concatenate(a) for a in every)) + "\n")
    if args.real:
        worst = max(worst, real_datasets(args.real, args.transformer))
    if args.transformer:
        print(f"transformer vs reference: max relative objective difference {worst:.2e} over all tasks")
        if worst > 1e-9:
            raise SystemExit(1)


def real_datasets(inits: int, transformer: bool) -> float:
    """scikit-learn's bundled datasets at their true k, raw units: ratio to Lloyd's and ARI against the labels."""
    from sklearn.metrics import adjusted_rand_score

    from analysis.data import load_dataset
    from circuits import reference
    from circuits.initialisation import kmeans_plusplus_init, random_points_init

    print(f"| dataset (k), init ({inits} each) | safeguarded swap / Lloyd's after {STEPS} steps (mean / max) |"
          " worst step (mean ratio) | objective never rises | ARI swap / Lloyd's (mean) |\n|---|---|---|---|---|")
    worst = 0.0
    for name in REAL_DATASETS:
        data = load_dataset(name)
        X, k = data.X, len(np.unique(data.y))
        for init in ("random", "k-means++"):
            make = random_points_init if init == "random" else kmeans_plusplus_init
            C0s = make(np.random.default_rng([0, inits]), np.repeat(X[None], inits, axis=0), k)
            runs = [swap_reference.safeguarded_swap(X, c, STEPS) for c in C0s]
            ours = np.stack([r.objectives for r in runs])
            lloyd = np.stack([r.lloyd_objectives for r in runs])
            ratio = ours[:, 1:] / lloyd[:, 1:]
            rises = (np.diff(ours, axis=1) > 1e-12 * ours[:, :-1]).any(axis=1)
            ari = [(adjusted_rand_score(data.y, reference.assign(X, r.centroids[-1])),
                    adjusted_rand_score(data.y, reference.assign(X, r.lloyd_centroids[-1]))) for r in runs]
            a = np.array(ari).mean(axis=0)
            print(f"| {name} ({k}), {init} | **{ratio[:, -1].mean():.3f}** / {ratio[:, -1].max():.3f} |"
                  f" {ratio.mean(axis=0).max():.3f} | {1 - rises.mean():.0%} | {a[0]:.3f} / {a[1]:.3f} |", flush=True)
            if transformer:
                worst = max(worst, check_problems(X, C0s, f"{name} ({init})"))
    return worst


def check_shape(batch, d: int, k: int) -> float:
    return check_problems(batch.X, batch.C0, f"d={d}, k={k}")


def check_problems(Xs, C0s, label: str) -> float:
    """The transformer on problems ``(X, C0)`` of one shape, against the reference; prints one line."""
    from circuits.swap.build import build_swap_circuit  # torch and TransformerLens only when asked for

    start = time.perf_counter()
    Xs = [Xs] * len(C0s) if np.ndim(Xs) == 2 else Xs
    circuit = build_swap_circuit(Xs[0].shape[1], C0s[0].shape[0], STEPS)
    checks = [transformer_check(x, c, circuit) for x, c in zip(Xs, C0s)]
    obj, cen = max(c[0] for c in checks), max(c[1] for c in checks)
    same = sum(c[2] for c in checks)
    print(f"    transformer {label}: {circuit.n_layers} layers, d_model {circuit.layout.d_model};"
          f" max rel. objective diff {obj:.2e}, max centroid diff / data size {cen:.2e}, same choices on"
          f" {same}/{len(checks)} tasks ({time.perf_counter() - start:.0f} s)", flush=True)
    return obj


if __name__ == "__main__":
    main()
