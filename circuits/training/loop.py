"""The training loop: Adam on batches of random tasks, held-out validation against Lloyd's, resumable checkpoints.

Each optimiser step draws batch ``step`` of the training stream (so a run is a deterministic function of its
config, and a resumed run continues exactly where it stopped), applies the model for ``train_iterations`` steps
and minimises the soft-min objective of the final centroids (:mod:`circuits.training.loss`). Every
``val_every`` steps the model is applied for ``eval_iterations`` steps to the validation tasks (a separate stream)
and its k-means objective is compared with Lloyd's from the same initial centroids (:mod:`circuits.reference`):
the *validation ratio* is the mean over tasks of model / Lloyd's. The log records it with the training loss,
the drift of every block's weights from their initial values, and the stiffness the model actually applies at
each step (its ``BETA`` read from the residual stream).

A *general* run (``TrainConfig.general``) draws its batches from :mod:`circuits.training.general_tasks` (any shape
up to the capacity ``(d, k)``, raw units) and usually minimises the anytime loss
(:func:`circuits.training.loss.anytime_loss`: every step against Lloyd's); validation then also records the mean
ratio at every step, how often objectives rise, and the ``val_score`` the best checkpoint is chosen by.
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
from circuits.training.checkpoint import load_training_state, read_config, save_checkpoint
from circuits.training.construction import InitSharpness
from circuits.strict_json import nulled
from circuits.training.schema import ADAM_BETA1, max_lr, read_log
from circuits.training.general_tasks import general_tasks
from circuits.training.loss import GAMMA_L, HINGE, RISE, anytime_loss, soft_min_objective
from circuits.training.encoding import sequence_of, unit_to_task
from circuits.training.model import DTYPES, ModelConfig, RecurrentKMeans
from circuits.training.tasks import TRAIN, VALIDATION, TaskBatch, make_tasks, task_stream

LOSSES = ("final", "anytime")
SUPPORTS = ("dense", "construction")


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
    #: One model for any d' <= d, k' <= k, trained on the general task family (:mod:`circuits.training.general_tasks`).
    general: bool = False
    #: "final": the paper's soft-min objective after ``train_iterations`` steps; "anytime": every step against
    #: Lloyd's (:func:`circuits.training.loss.anytime_loss`; ``gamma`` is then relative to Lloyd's objective).
    loss: str = "final"
    hinge: float = HINGE
    rise: float = RISE
    #: "dense": every head weight trains; "construction": only the head weights the construction sets (non-zero at
    #: the start) — the knobs, per coordinate and identity — and the MLP coefficients.
    support: str = "dense"

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
        if self.lr > max_lr(self.dtype):
            raise ValueError(f"lr {self.lr:g} is above {max_lr(self.dtype):.3g}: Adam's first step, lr / (1 -"
                             f" {ADAM_BETA1:g}), must be a {self.dtype} number")
        if self.support not in SUPPORTS:
            raise ValueError(f"support must be one of {', '.join(SUPPORTS)}, got {self.support!r}")
        if self.loss not in LOSSES:
            raise ValueError(f"loss must be one of {', '.join(LOSSES)}, got {self.loss!r}")
        for name in ("hinge", "rise"):
            if not 0 <= getattr(self, name) < float("inf"):
                raise ValueError(f"{name} must be >= 0 and finite, got {getattr(self, name)}")
        self.model_config()  # validates init, sharpness, d_head

    def model_config(self) -> ModelConfig:
        return ModelConfig(self.d, self.k, self.init, dict(self.sharpness), self.d_head, self.reembed, self.seed,
                           self.general)

    def batch_tasks(self, stream: int, index: int) -> TaskBatch:
        """Batch ``index`` of ``stream``: the paper's family at (d, k), or the general family up to (d, k)."""
        if self.general:
            return general_tasks(self.batch, self.n, self.d, self.k, self.seed, stream, index)
        return make_tasks(self.batch, self.n, self.d, self.k, self.seed, stream, index)

    def to_dict(self) -> dict:
        return asdict(self)


def lloyd_objectives(tasks: TaskBatch, iterations: int) -> np.ndarray:
    """Lloyd's objective after ``iterations`` steps from each task's initial centroids (numpy reference)."""
    return lloyd_per_step(tasks, iterations)[-1]


def lloyd_per_step(tasks: TaskBatch, iterations: int) -> np.ndarray:
    """``[iterations + 1, batch]``: Lloyd's objective after ``0..iterations`` steps (numpy reference, float64)."""
    traces = [reference.lloyd(x, c, iterations) for x, c in zip(tasks.X, tasks.C0)]
    return np.array([[reference.objective(x, tr.centroids[t]) for x, tr in zip(tasks.X, traces)]
                     for t in range(iterations + 1)])


@dataclass
class Validator:
    """Fixed held-out tasks (batches) and Lloyd's objectives on them after every step, evaluated in chunks."""

    batches: list[TaskBatch]
    lloyd: list[np.ndarray]  # per batch: [iterations + 1, batch]
    iterations: int
    hinge: float = HINGE
    select_by: str = "val_ratio"

    @classmethod
    def make(cls, cfg: TrainConfig) -> "Validator":
        if cfg.general:
            count = -(-cfg.val_tasks // cfg.batch)
            batches = [cfg.batch_tasks(VALIDATION, i) for i in range(count)]
        else:
            tasks = task_stream(cfg.batch, cfg.n, cfg.d, cfg.k, cfg.val_tasks, cfg.seed, VALIDATION)
            batches = [tasks.subset(slice(s, s + 16)) for s in range(0, tasks.batch, 16)]
        select = "val_score" if cfg.loss == "anytime" else "val_ratio"
        return cls(batches, [lloyd_per_step(b, cfg.eval_iterations) for b in batches], cfg.eval_iterations,
                   cfg.hinge, select)

    def __call__(self, model: RecurrentKMeans) -> dict:
        objectives, stiffness = [], []
        with torch.no_grad():
            for part in self.batches:
                enc = model.encode(part.X, part.C0)
                betas, per_step = [], []

                def observe(t: int, r: torch.Tensor) -> None:
                    seq = sequence_of(r, part.n)
                    betas.append(float(r[:, seq.points, model.layout["BETA"]].mean()))
                    C = unit_to_task(r[:, seq.centroids, model.layout["C"]], enc).double().cpu().numpy()
                    per_step.append([reference.objective(x, c) for x, c in zip(part.X, C)])

                model.run(enc.resid, self.iterations, part.n, observe=observe)
                objectives.append(np.array(per_step))
                stiffness.append(betas)
        obj = np.concatenate(objectives, axis=1)  # [T+1, tasks]
        lloyd = np.concatenate(self.lloyd, axis=1)
        ratio = obj / lloyd
        per_step = ratio[1:].mean(axis=1)
        rises = float((obj[1:] > obj[:-1] * (1 + 1e-5)).mean())
        score = float(np.mean(per_step + self.hinge * np.maximum(per_step - 1.0, 0.0)))
        return {"val_ratio": float(ratio[-1].mean()), "val_ratio_median": float(np.median(ratio[-1])),
                "val_objective": float(obj[-1].mean()), "lloyd_objective": float(lloyd[-1].mean()),
                "val_beta_per_step": np.mean(stiffness, axis=0).tolist(),
                "val_ratio_per_step": per_step.tolist(), "val_rises": rises, "val_score": score}


def anytime_step_loss(model: RecurrentKMeans, tasks: TaskBatch, cfg: TrainConfig) -> torch.Tensor:
    """The anytime loss of one batch, in the encoder's unit coordinates (scale-free, as the model sees them)."""
    enc = model.encode(tasks.X, tasks.C0)
    d = tasks.d
    resids = model.run(enc.resid, cfg.train_iterations, tasks.n, keep=True)
    seq = enc.sequence
    C = [r[:, seq.centroids, model.layout["C"]][..., :d] for r in resids]
    X = enc.resid[:, seq.points, model.layout["X"]][..., :d]
    # Lloyd's objective in unit coordinates: the same run, divided by the squared scale of each task.
    lloyd = lloyd_per_step(tasks, cfg.train_iterations) / enc.scaling.scale[None, :] ** 2
    loss, _ = anytime_loss(X, C, torch.as_tensor(lloyd, dtype=X.dtype, device=X.device), cfg.gamma, cfg.hinge,
                           cfg.rise)
    return loss


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
          progress: Callable[[int, int, dict], None] | None = None, device: str = "cpu") -> dict:
    """Train (or resume) into checkpoint folder ``out``; returns the last log record.

    ``progress(step, total, info)`` is called after every optimiser step (``info`` holds the running loss and the
    latest validation ratio) so the command line can draw a bar. (Its 67 lines include ``config_doc``, a closure
    over the loop's running state: the checkpoint's header at any step.)
    """
    out = Path(out)
    dtype = DTYPES[cfg.dtype]
    model = RecurrentKMeans(cfg.model_config(), dtype=dtype).to(device)
    initial = RecurrentKMeans(cfg.model_config(), dtype=dtype).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr, betas=(ADAM_BETA1, 0.999))
    # Adam leaves a weight whose gradient is always 0 where it is (both moments stay 0).
    frozen = ({name: (p == 0) for name, p in initial.named_parameters() if not name.split("_", 1)[1].startswith("mlp")}
              if cfg.support == "construction" else {})
    log, start, best, best_state, elapsed_wall, elapsed_cpu = (
        _resumed(out, cfg, model, optimizer) if resume else ([], 0, None, None, 0.0, 0.0))
    validate = Validator.make(cfg)
    t_wall, t_cpu = time.perf_counter(), time.process_time()
    last_val = log[-1]["val_ratio"] if log else None
    running: list[float] = []

    def config_doc(step: int) -> dict:
        return {
            "model": cfg.model_config().to_dict(), "dtype": cfg.dtype, "training": cfg.to_dict(),
            "progress": {"step": step, "best_val_ratio": best, "best_step": best_step(log, validate.select_by),
                         "best_metric": validate.select_by,
                         "wall_s": elapsed_wall + time.perf_counter() - t_wall,
                         "cpu_s": elapsed_cpu + time.process_time() - t_cpu},
            "files": {"model.safetensors": "best validation weights" if cfg.keep_best else "last weights",
                      "state.safetensors": "last weights and Adam moments (resume)",
                      "log.jsonl": "one record per validation"},
        }

    if not log:
        rec = {"step": 0, "loss": None, **validate(model), "drift": drift_from(model, initial),
               "knobs": model.knobs(), "wall_s": 0.0, "cpu_s": 0.0}
        log.append(nulled(rec))  # a diverged validation's numbers are null in the log (strict JSON)
        last_val = rec["val_ratio"]
        if np.isfinite(rec[validate.select_by]):
            best, best_state = rec[validate.select_by], {n: t.clone() for n, t in model.state_dict().items()}
    for step in range(start, cfg.steps):
        loss = _batch_loss(model, cfg.batch_tasks(TRAIN, step), cfg, dtype)
        _optimiser_step(model, optimizer, loss, frozen, cfg.clip)
        running.append(float(loss.detach()))
        done = step + 1
        if done % cfg.val_every == 0 or done == cfg.steps:
            rec = {"step": done, "loss": float(np.mean(running)), **validate(model),
                   "drift": drift_from(model, initial), "knobs": model.knobs(),
                   "wall_s": elapsed_wall + time.perf_counter() - t_wall,
                   "cpu_s": elapsed_cpu + time.process_time() - t_cpu}
            running = []
            log.append(nulled(rec))
            last_val = rec["val_ratio"]
            metric = rec[validate.select_by]
            if np.isfinite(metric) and (best is None or metric < best):
                best, best_state = metric, {n: t.clone() for n, t in model.state_dict().items()}
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



def _resumed(out: Path, cfg: TrainConfig, model: RecurrentKMeans, optimizer) -> tuple:
    """``(log, start step, best metric, best state, wall s, cpu s)`` of the checkpoint in ``out``, whose weights and
    Adam moments are loaded into ``model`` and ``optimizer``; only ``steps`` may differ from its training options."""
    saved = read_config(out)
    differ = sorted(key for key, value in cfg.to_dict().items()
                    if key != "steps" and saved.get("training", {}).get(key) != value)
    if differ:
        raise ValueError(f"resuming needs the checkpoint's training options (only the step count may change);"
                         f" these differ: {', '.join(differ)}")
    load_training_state(out, model, optimizer)
    prog = saved.get("progress", {})
    best, best_state = prog.get("best_val_ratio"), None
    if cfg.keep_best and best is not None:
        from circuits.training.checkpoint import load_model

        best_state = {name: t.clone() for name, t in load_model(out)[0].state_dict().items()}
    return (read_log(out), int(prog.get("step", 0)), best, best_state,
            float(prog.get("wall_s", 0.0)), float(prog.get("cpu_s", 0.0)))


def _batch_loss(model: RecurrentKMeans, tasks, cfg: TrainConfig, dtype: torch.dtype) -> torch.Tensor:
    """The training loss of one batch: the anytime loss, or the soft-min objective after ``train_iterations``."""
    if cfg.loss == "anytime":
        return anytime_step_loss(model, tasks, cfg)
    enc = model.encode(tasks.X, tasks.C0)
    C = unit_to_task(model.centroids_after(enc.resid, cfg.train_iterations, cfg.n), enc)
    return soft_min_objective(torch.as_tensor(tasks.X, dtype=dtype, device=C.device), C, cfg.gamma).mean()


def _optimiser_step(model: RecurrentKMeans, optimizer, loss: torch.Tensor, frozen: dict, clip: float) -> None:
    """One Adam step on ``loss``, with the gradients of ``frozen``'s masked entries zeroed and the norm clipped."""
    optimizer.zero_grad()
    loss.backward()
    for name, p in model.named_parameters():
        if name in frozen and p.grad is not None:
            p.grad.masked_fill_(frozen[name], 0.0)
    torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    optimizer.step()

def best_step(log: list[dict], metric: str = "val_ratio") -> int | None:
    finite = [r for r in log if r.get(metric) is not None and np.isfinite(r[metric])]
    return min(finite, key=lambda r: r[metric])["step"] if finite else None
