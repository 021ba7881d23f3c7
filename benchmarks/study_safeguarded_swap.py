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

    python benchmarks/study_safeguarded_swap.py [--tasks 32] [--n 128]

Lloyd's is :func:`circuits.reference.lloyd` (the project's numpy reference; empty clusters keep their centroid).
"""

from __future__ import annotations

import argparse

import numpy as np

from analysis.evaluate_general import DEFAULT_SHAPES, sklearn_optimum
from circuits import reference
from circuits.training.general_tasks import general_tasks
from circuits.training.tasks import TEST

STEPS = 20


def lloyd_step(X: np.ndarray, C: np.ndarray) -> np.ndarray:
    return reference.update(X, reference.assign(X, C), C)


def swapped(X: np.ndarray, C: np.ndarray) -> np.ndarray:
    """``C`` with its least useful centroid moved onto the point farthest from its nearest centroid."""
    D = reference.sq_distances(X, C)
    labels = D.argmin(1)
    two = np.sort(D, axis=1)[:, :2]
    removal_cost = np.bincount(labels, weights=two[:, 1] - two[:, 0], minlength=len(C))
    out = C.copy()
    out[removal_cost.argmin()] = X[two[:, 0].argmax()]
    return out


def safeguarded_swap(X: np.ndarray, C0: np.ndarray, steps: int) -> tuple[np.ndarray, np.ndarray]:
    """Objectives ``[steps + 1]`` of the study algorithm and of Lloyd's, from ``C0``."""
    C, L = C0, C0
    ours, lloyd = [reference.objective(X, C0)], [reference.objective(X, C0)]
    for _ in range(steps):
        L = lloyd_step(X, L)
        candidates = (lloyd_step(X, C), lloyd_step(X, swapped(X, C)), L)
        C = min(candidates, key=lambda c: reference.objective(X, c))
        ours.append(reference.objective(X, C))
        lloyd.append(reference.objective(X, L))
    return np.array(ours), np.array(lloyd)


def row(label: str, ours: np.ndarray, lloyd: np.ndarray, floor: np.ndarray) -> str:
    ratio = ours[:, 1:] / lloyd[:, 1:]
    rises = (ours[:, 1:] > ours[:, :-1] * (1 + 1e-5)).any(axis=1)
    return (f"| {label} | **{ratio[:, -1].mean():.3f}** / {np.median(ratio[:, -1]):.3f} / {ratio[:, -1].max():.3f} |"
            f" {ratio.mean(axis=0).max():.3f} | {1 - rises.mean():.1%} | {floor.mean():.3f} / {np.median(floor):.3f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=32, help="held-out tasks per shape (default 32)")
    parser.add_argument("--n", type=int, default=128)
    args = parser.parse_args()
    for init in ("random", "k-means++"):
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
        print(row("**all shapes**", *(np.concatenate(a) for a in every)) + "\n")


if __name__ == "__main__":
    main()
