"""Checkpoints: safetensors for tensors, JSON for everything else; loading never unpickles.

A checkpoint is a folder:

* ``config.json`` — format tag, the model's architecture (:class:`~circuits.training.model.ModelConfig`), dtype,
  the training configuration and progress (step, best validation), and what the files hold;
* ``model.safetensors`` — the weights the checkpoint stands for (the best validation step, or the last);
* ``state.safetensors`` — the last weights and the Adam moments, to resume training exactly;
* ``log.jsonl`` — one JSON record per validation (losses, validation ratio, drift from the initial weights, time).

Everything is written to temporary files and renamed into place, so an interrupted save leaves the previous
checkpoint intact.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from circuits.files import write_file_atomic
from circuits.training.model import DTYPES, ModelConfig, RecurrentKMeans

FORMAT = "kmeans-circuits/recurrent-v1"
CONFIG, MODEL, STATE, LOG = "config.json", "model.safetensors", "state.safetensors", "log.jsonl"


class CheckpointError(ValueError):
    """A checkpoint that cannot be read: missing files, wrong format, or tensors that do not fit the config."""


def write_json(path: Path, obj) -> None:
    write_file_atomic(path, lambda tmp: Path(tmp).write_text(json.dumps(obj, indent=1) + "\n"))


def write_tensors(path: Path, tensors: dict[str, torch.Tensor], metadata: dict[str, str] | None = None) -> None:
    plain = {name: t.detach().contiguous().cpu() for name, t in tensors.items()}
    write_file_atomic(path, lambda tmp: save_file(plain, tmp, metadata=metadata))


def optimizer_tensors(model: RecurrentKMeans, optimizer: torch.optim.Optimizer) -> dict[str, torch.Tensor]:
    """Adam's moments keyed by parameter name (``NAME.exp_avg``, ``NAME.exp_avg_sq``, ``NAME.step``)."""
    out = {}
    for name, param in model.named_parameters():
        state = optimizer.state.get(param, {})
        for key in ("exp_avg", "exp_avg_sq", "step"):
            if key in state:
                value = state[key]
                out[f"{name}.{key}"] = value if torch.is_tensor(value) else torch.tensor(float(value))
    return out


def load_optimizer_tensors(model: RecurrentKMeans, optimizer: torch.optim.Optimizer, tensors: dict[str, torch.Tensor]) -> None:
    for name, param in model.named_parameters():
        keys = [f"{name}.{key}" for key in ("exp_avg", "exp_avg_sq", "step")]
        if not all(key in tensors for key in keys):
            continue
        optimizer.state[param] = {key.rsplit(".", 1)[1]: tensors[key].clone() for key in keys}


def save_checkpoint(folder: str | Path, model: RecurrentKMeans, config: dict, *, best_model: dict | None = None,
                    optimizer: torch.optim.Optimizer | None = None, log: list[dict] | None = None) -> None:
    """Write (or update) a checkpoint folder. ``best_model`` (a state dict) becomes ``model.safetensors``."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    meta = {"format": FORMAT}
    weights = best_model if best_model is not None else model.state_dict()
    write_tensors(folder / MODEL, weights, meta)
    if optimizer is not None:
        state = {f"model.{name}": t for name, t in model.state_dict().items()}
        state.update({f"adam.{name}": t for name, t in optimizer_tensors(model, optimizer).items()})
        write_tensors(folder / STATE, state, meta)
    if log is not None:
        write_file_atomic(folder / LOG, lambda tmp: Path(tmp).write_text("".join(json.dumps(r) + "\n" for r in log)))
    write_json(folder / CONFIG, {"format": FORMAT, **config})


def resolve(path: str | Path) -> Path:
    """A checkpoint folder from a folder, or from its ``model.safetensors`` / ``config.json``."""
    path = Path(path)
    folder = path.parent if path.is_file() else path
    if not (folder / CONFIG).is_file():
        raise CheckpointError(f"{str(path)!r} is not a checkpoint: no {CONFIG} in {str(folder)!r}")
    return folder


def read_config(path: str | Path) -> dict:
    folder = resolve(path)
    try:
        config = json.loads((folder / CONFIG).read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CheckpointError(f"{folder / CONFIG}: not valid JSON ({exc})") from None
    if not isinstance(config, dict) or config.get("format") != FORMAT:
        raise CheckpointError(f"{folder / CONFIG}: not a {FORMAT} checkpoint")
    return config


def _read_tensors(path: Path) -> dict[str, torch.Tensor]:
    if not path.is_file():
        raise CheckpointError(f"checkpoint file {str(path)!r} is missing")
    try:
        return load_file(str(path))
    except (SafetensorError, OSError, ValueError) as exc:
        raise CheckpointError(f"{path}: not a readable safetensors file ({exc})") from None


def build_from_config(config: dict) -> RecurrentKMeans:
    try:
        model_config = ModelConfig(**config["model"])
        dtype = DTYPES[config.get("dtype", "float32")]
    except (KeyError, TypeError, ValueError) as exc:
        raise CheckpointError(f"checkpoint config does not describe a model ({exc})") from None
    return RecurrentKMeans(model_config, dtype=dtype)


def _load_into(model: RecurrentKMeans, tensors: dict[str, torch.Tensor], where: str) -> None:
    expected = model.state_dict()
    if set(tensors) != set(expected):
        missing, extra = sorted(set(expected) - set(tensors)), sorted(set(tensors) - set(expected))
        raise CheckpointError(f"{where}: tensors do not match the config (missing {missing[:3]}, unexpected {extra[:3]})")
    for name, value in tensors.items():
        if value.shape != expected[name].shape or value.dtype != expected[name].dtype:
            raise CheckpointError(f"{where}: {name} has shape {tuple(value.shape)} {value.dtype}, the config needs"
                                  f" {tuple(expected[name].shape)} {expected[name].dtype}")
    model.load_state_dict(tensors, strict=True)
    for name, param in model.named_parameters():
        if not torch.isfinite(param).all():
            raise CheckpointError(f"{where}: {name} holds NaN or inf")


def load_model(path: str | Path) -> tuple[RecurrentKMeans, dict]:
    """The model a checkpoint stands for (``model.safetensors``) and its config; raises :class:`CheckpointError`."""
    folder = resolve(path)
    config = read_config(folder)
    model = build_from_config(config)
    _load_into(model, _read_tensors(folder / MODEL), str(folder / MODEL))
    model.eval()
    return model, config


def load_training_state(path: str | Path, model: RecurrentKMeans, optimizer: torch.optim.Optimizer) -> None:
    """Restore the last weights and Adam's moments from ``state.safetensors``."""
    folder = resolve(path)
    tensors = _read_tensors(folder / STATE)
    weights = {name[len("model."):]: t for name, t in tensors.items() if name.startswith("model.")}
    _load_into(model, weights, str(folder / STATE))
    load_optimizer_tensors(model, optimizer, {name[len("adam."):]: t for name, t in tensors.items() if name.startswith("adam.")})


def read_log(path: str | Path) -> list[dict]:
    folder = resolve(path)
    if not (folder / LOG).is_file():
        return []
    return [json.loads(line) for line in (folder / LOG).read_text().splitlines() if line.strip()]
