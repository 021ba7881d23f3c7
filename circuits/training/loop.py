"""The training loop: Adam on batches of random tasks, held-out validation against Lloyd's, resumable checkpoints.

Each optimiser step draws batch ``step`` of the training stream (so a run is a deterministic function of its
config, and a resumed run continues exactly where it stopped), applies the model for ``train_iterations`` steps
and minimises the soft-min objective of the final centroids (:mod:`circuits.training.loss`). Every
``val_every`` steps the model is applied for ``eval_iterations`` steps to the validation tasks (a separate stream)
and its k-means objective is compared with Lloyd's from the same initial centroids (:mod:`circuits.reference`):
the *validation ratio* is the mean over tasks of model / Lloyd's. The log records it with the training loss,
the drift of every block's weights from their initial values, and the stiffness the model actually applies at
each step (its ``BETA`` read from the residual stream).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from collections.abc import Callable

import numpy as np
import torch

from circuits import reference
from circuits.blocks import ASSIGN, UPDATE
from circuits.training.checkpoint import load_training_state, read_config, read_log, save_checkpoint
from circuits.training.construction import InitSharpness
from circuits.training.loss import GAMMA_L, kmeans_objective, soft_min_objective
from circuits.training.model import DTYPES, ModelConfig, RecurrentKMeans, unit_to_task
from circuits.training.tasks import TRAIN, VALIDATION, TaskBatch, make_tasks, task_stream


@dataclass
class TrainConfig:
    d: int = 32
    k: int = 10
    n: int = 512
    steps: int = 1000
    batch: int = 8
    lr: float = 1e-3
    clip: float = 1.0
    gamma: float = GAMMA_L
    train_iterations: int = 20
    eval_iterations: int = 20
    val_tasks: int = 64
    val_every: int = 50
    seed: int = 0
    init: str = "exact"
    sharpness: dict[str, float] = field(default_factory=lambda: InitSharpness().to_dict())
    reembed: bool = True
    d_head: int | None = None
    dtype: str = "float32"
    keep_best: bool = True

    def __post_init__(self) -> None:
        for name in ("d", "k", "steps", "batch", "train_iterations", "eval_iterations", "val_tasks", "val_every"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.n < self.k:
            raise ValueError(f"n must be >= k, got n={self.n}, k={self.k}")
        for name in ("lr", "gamma", "clip"):
            if not 0 < getattr(self, name) < float("inf"):
                raise ValueError(f"{name} must be positive and finite, got {getattr(self, name)}")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {', '.join(DTYPES)}")
        self.model_config()  # validates init, sharpness, d_head

    def model_config(self) -> ModelConfig:
        return ModelConfig(self.d, self.k, self.init, dict(self.sharpness), self.d_head, self.reembed, self.seed)

    def to_dict(self) -> dict:
        return asdict(self)


def lloyd_objectives(tasks: TaskBatch, iterations: int) -> np.ndarray:
    """Lloyd's objective after ``iterations`` steps from each task's initial centroids (numpy reference)."""
    return np.array([reference.objective(x, reference.lloyd(x, c, iterations).final_centroids)
                     for x, c in zip(tasks.X, tasks.C0)])


@dataclass
class Validator:
    """Fixed held-out tasks and Lloyd's objectives on them, evaluated in chunks to bound memory."""

    tasks: TaskBatch
    lloyd: np.ndarray
    iterations: int
    chunk: int = 16

    @classmethod
    def make(cls, cfg: TrainConfig) -> "Validator":
        tasks = task_stream(cfg.batch, cfg.n, cfg.d, cfg.k, cfg.val_tasks, cfg.seed, VALIDATION)
        return cls(tasks, lloyd_objectives(tasks, cfg.eval_iterations), cfg.eval_iterations)

    def __call__(self, model: RecurrentKMeans) -> dict:
        objectives, stiffness = [], []
        with torch.no_grad():
            for start in range(0, self.tasks.batch, self.chunk):
                part = self.tasks.subset(slice(start, start + self.chunk))
                enc = model.encode(part.X, part.C0)
                betas = []
                seq = enc.sequence
                resid = model.run(enc.resid, self.iterations, part.n,
                                  observe=lambda t, r: betas.append(float(r[:, seq.points, model.layout["BETA"]].mean())))[-1]
                C = unit_to_task(resid[:, seq.centroids, model.layout["C"]], enc)
                objectives.append(kmeans_objective(torch.as_tensor(part.X, dtype=C.dtype), C).double().numpy())
                stiffness.append(betas)
        obj = np.concatenate(objectives)
        ratio = obj / self.lloyd
        return {"val_ratio": float(ratio.mean()), "val_ratio_median": float(np.median(ratio)),
                "val_objective": float(obj.mean()), "lloyd_objective": float(self.lloyd.mean()),
                "val_beta_per_step": np.mean(stiffness, axis=0).tolist()}


def drift_from(model: RecurrentKMeans, initial: RecurrentKMeans) -> dict:
    """Relative Frobenius distance ``|W - W0| / |W0|`` of every block's ``W_QK``, ``W_OV`` and MLP coefficients."""
    out = {}
    with torch.no_grad():
        for kind in (UPDATE, ASSIGN):
            rec = {}
            for name, now, then in zip(("qk", "ov"), model.circuits(kind), initial.circuits(kind)):
                rec[name] = float((now - then).norm() / then.norm().clamp_min(1e-30))
            now_mlp = torch.cat([model.weight(kind, f"mlp_{v}").flatten() for v in ("gate", "linear", "out")])
            then_mlp = torch.cat([initial.weight(kind, f"mlp_{v}").flatten() for v in ("gate", "linear", "out")])
            rec["mlp"] = float((now_mlp - then_mlp).norm() / then_mlp.norm().clamp_min(1e-30))
            out[kind] = rec
    return out


def train(out: str | Path, cfg: TrainConfig, resume: bool = False,
          progress: Callable[[int, int, dict], None] | None = None) -> dict:
    """Train (or resume) into checkpoint folder ``out``; returns the last log record.

    ``progress(step, total, info)`` is called after every optimiser step (``info`` holds the running loss and the
    latest validation ratio) so the command line can draw a bar.
    """
    out = Path(out)
    dtype = DTYPES[cfg.dtype]
    model = RecurrentKMeans(cfg.model_config(), dtype=dtype)
    initial = RecurrentKMeans(cfg.model_config(), dtype=dtype)
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    log: list[dict] = []
    start, best, best_state = 0, None, None
    elapsed_wall, elapsed_cpu = 0.0, 0.0
    if resume:
        saved = read_config(out)
        differ = sorted(key for key, value in cfg.to_dict().items()
                        if key != "steps" and saved.get("training", {}).get(key) != value)
        if differ:
            raise ValueError(f"--resume needs the checkpoint's training options (only --steps may change);"
                             f" these differ: {', '.join(differ)}")
        load_training_state(out, model, optimizer)
        log = read_log(out)
        prog = saved.get("progress", {})
        start = int(prog.get("step", 0))
        best = prog.get("best_val_ratio")
        elapsed_wall, elapsed_cpu = float(prog.get("wall_s", 0.0)), float(prog.get("cpu_s", 0.0))
        if cfg.keep_best and best is not None:
            from circuits.training.checkpoint import load_model

            best_state = {name: t.clone() for name, t in load_model(out)[0].state_dict().items()}
    validate = Validator.make(cfg)
    t_wall, t_cpu = time.perf_counter(), time.process_time()
    last_val = log[-1]["val_ratio"] if log else None
    running: list[float] = []

    def config_doc(step: int) -> dict:
        return {
            "model": cfg.model_config().to_dict(), "dtype": cfg.dtype, "training": cfg.to_dict(),
            "progress": {"step": step, "best_val_ratio": best, "best_step": best_step(log),
                         "wall_s": elapsed_wall + time.perf_counter() - t_wall,
                         "cpu_s": elapsed_cpu + time.process_time() - t_cpu},
            "files": {"model.safetensors": "best validation weights" if cfg.keep_best else "last weights",
                      "state.safetensors": "last weights and Adam moments (resume)",
                      "log.jsonl": "one record per validation"},
        }

    if not log:
        rec = {"step": 0, "loss": None, **validate(model), "drift": drift_from(model, initial),
               "knobs": model.knobs(), "wall_s": 0.0, "cpu_s": 0.0}
        log.append(rec)
        last_val = rec["val_ratio"]
        if np.isfinite(rec["val_ratio"]):
            best, best_state = rec["val_ratio"], {n: t.clone() for n, t in model.state_dict().items()}
    for step in range(start, cfg.steps):
        tasks = make_tasks(cfg.batch, cfg.n, cfg.d, cfg.k, cfg.seed, TRAIN, step)
        enc = model.encode(tasks.X, tasks.C0)
        C = unit_to_task(model.centroids_after(enc.resid, cfg.train_iterations, cfg.n), enc)
        loss = soft_min_objective(torch.as_tensor(tasks.X, dtype=dtype), C, cfg.gamma).mean()
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.clip)
        optimizer.step()
        running.append(float(loss.detach()))
        done = step + 1
        if done % cfg.val_every == 0 or done == cfg.steps:
            rec = {"step": done, "loss": float(np.mean(running)), **validate(model),
                   "drift": drift_from(model, initial), "knobs": model.knobs(),
                   "wall_s": elapsed_wall + time.perf_counter() - t_wall,
                   "cpu_s": elapsed_cpu + time.process_time() - t_cpu}
            running = []
            log.append(rec)
            last_val = rec["val_ratio"]
            if np.isfinite(rec["val_ratio"]) and (best is None or rec["val_ratio"] < best):
                best, best_state = rec["val_ratio"], {n: t.clone() for n, t in model.state_dict().items()}
            save_checkpoint(out, model, config_doc(done), best_model=best_state if cfg.keep_best else None,
                            optimizer=optimizer, log=log)
        if progress is not None:
            validated = done % cfg.val_every == 0 or done == cfg.steps
            progress(done, cfg.steps, {"loss": float(loss.detach()), "val_ratio": last_val, "best": best,
                                       "validated": log[-1] if validated else None})
    if start >= cfg.steps:
        save_checkpoint(out, model, config_doc(cfg.steps), best_model=best_state if cfg.keep_best else None,
                        optimizer=optimizer, log=log)
    return log[-1]


def best_step(log: list[dict]) -> int | None:
    finite = [r for r in log if r.get("val_ratio") is not None and np.isfinite(r["val_ratio"])]
    return min(finite, key=lambda r: r["val_ratio"])["step"] if finite else None
