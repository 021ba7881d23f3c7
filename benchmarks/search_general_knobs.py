"""Choose the construction a general model starts from: a grid over its knobs, scored on training tasks.

The general model (``kmeans-circuits train --general``) starts from the construction at finite sharpness
(:mod:`circuits.training.construction`): assignment stiffness ``a`` (``--beta``), update stiffness ``b``
(``--beta-update``) and schedule growth ``g`` (``--growth``). Each point of the grid is scored, untrained, on
batches of the general family's *training* stream (never the validation or test streams) with the anytime score
the training run selects by: the mean over steps 1..T of the mean ratio to Lloyd's, plus the hinge on steps whose
mean is above 1 (:class:`circuits.training.loop.Validator`). The best point is what ``train --general`` starts from.

    python benchmarks/search_general_knobs.py [--batches 8] [--n 128] [--threads 1]
"""

from __future__ import annotations

import argparse
import itertools
import time

import torch

from circuits import strict_json
from circuits.training.construction import InitSharpness
from circuits.training.loop import TrainConfig, Validator, lloyd_per_step
from circuits.training.model import RecurrentKMeans
from circuits.training.tasks import TRAIN

GRID = {"beta": (200.0, 400.0, 800.0), "beta_update": (20.0, 40.0), "growth": (0.0, 0.5, 1.0)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=6, help="training-stream batches of 8 tasks (default 6)")
    parser.add_argument("--n", type=int, default=128)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", metavar="FILE", default=None, help="also write the rows as JSON")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    cfg = TrainConfig(d=64, k=16, n=args.n, batch=8, general=True, loss="anytime")
    # Training-stream batches far beyond any run's steps, so the search and the run share no batch either.
    batches = [cfg.batch_tasks(TRAIN, 10**6 + i) for i in range(args.batches)]
    validator = Validator(batches, [lloyd_per_step(b, args.steps) for b in batches], args.steps, select_by="val_score")
    rows = []
    print(f"{'a':>7} {'b':>5} {'g':>4}  score  final  worst step  rises   ({len(batches) * 8} training tasks, n={args.n})")
    for beta, beta_update, growth in itertools.product(*GRID.values()):
        t0 = time.perf_counter()
        sharp = InitSharpness(beta=beta, beta_update=beta_update, growth=growth)
        cfg_i = TrainConfig(d=64, k=16, n=args.n, general=True, sharpness=sharp.to_dict())
        rec = validator(RecurrentKMeans(cfg_i.model_config()))
        row = {"beta": beta, "beta_update": beta_update, "growth": growth, "score": rec["val_score"],
               "final": rec["val_ratio"], "worst_step": max(rec["val_ratio_per_step"]), "rises": rec["val_rises"],
               "seconds": time.perf_counter() - t0}
        rows.append(row)
        print(f"{beta:7g} {beta_update:5g} {growth:4g} {row['score']:.4f} {row['final']:.4f} {row['worst_step']:11.4f}"
              f" {row['rises']:6.1%}", flush=True)
    best = min(rows, key=lambda r: r["score"])
    print(f"best: --beta {best['beta']:g} --beta-update {best['beta_update']:g} --growth {best['growth']:g}"
          f" (score {best['score']:.4f})")
    if args.json:
        with open(args.json, "w") as f:
            f.write(strict_json.dumps({"grid": GRID, "rows": rows, "best": best}, indent=1))


if __name__ == "__main__":
    main()
