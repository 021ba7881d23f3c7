"""Checkpoints: safetensors for tensors, JSON for everything else; loading never unpickles.

A checkpoint is a folder:

* ``config.json`` — format tag, the model's architecture (:class:`~circuits.training.model.ModelConfig`), dtype,
  the training configuration and progress (step, best validation), and what the files hold;
* ``model.safetensors`` — the weights the checkpoint stands for (the best validation step, or the last);
* ``state.safetensors`` — the last weights and the Adam moments, to resume training exactly;
* ``log.jsonl`` — one JSON record per validation (losses, validation ratio, drift from the initial weights, time).

A save writes the whole folder into a temporary sibling and swaps it in one step
(:func:`circuits.files.write_folder_atomic`), so an interrupted save leaves the previous checkpoint intact.
"""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, save_file

from circuits.blocks import ASSIGN
from circuits.files import write_folder_atomic
from circuits.strict_json import dumps
from circuits.training.construction import trainable_layout
from circuits.training.model import DTYPES, ModelConfig, RecurrentKMeans
from circuits.training.schema import CONFIG, FORMAT, LOG, MODEL, STATE, CheckpointError, read_config, resolve


def tensors_writer(tensors: dict[str, torch.Tensor], metadata: dict[str, str] | None = None):
    """A function writing ``tensors`` as a safetensors file at the path it is given."""
    plain = {name: t.detach().contiguous().cpu() for name, t in tensors.items()}
    return lambda path: save_file(plain, path, metadata=metadata)


#: Adam's per-parameter state, as torch names it.
ADAM_KEYS = ("exp_avg", "exp_avg_sq", "step")


def optimizer_tensors(model: RecurrentKMeans, optimizer: torch.optim.Optimizer) -> dict[str, torch.Tensor]:
    """Adam's moments keyed by parameter name (``NAME.exp_avg``, ``NAME.exp_avg_sq``, ``NAME.step``)."""
    out = {}
    for name, param in model.named_parameters():
        state = optimizer.state.get(param, {})
        for key in ADAM_KEYS:
            if key in state:
                value = state[key]
                out[f"{name}.{key}"] = value if torch.is_tensor(value) else torch.tensor(float(value))
    return out


def load_optimizer_tensors(model: RecurrentKMeans, optimizer: torch.optim.Optimizer, tensors: dict[str, torch.Tensor]) -> None:
    for name, param in model.named_parameters():
        keys = [f"{name}.{key}" for key in ADAM_KEYS]
        if not all(key in tensors for key in keys):
            continue
        optimizer.state[param] = {key.rsplit(".", 1)[1]: tensors[key].clone() for key in keys}


def save_checkpoint(folder: str | Path, model: RecurrentKMeans, config: dict, *, best_model: dict | None = None,
                    optimizer: torch.optim.Optimizer | None = None, log: list[dict] | None = None) -> None:
    """Write (or update) a checkpoint folder. ``best_model`` (a state dict) becomes ``model.safetensors``."""
    meta = {"format": FORMAT}
    weights = best_model if best_model is not None else model.state_dict()
    files = {MODEL: tensors_writer(weights, meta)}
    if optimizer is not None:
        state = {f"model.{name}": t for name, t in model.state_dict().items()}
        state.update({f"adam.{name}": t for name, t in optimizer_tensors(model, optimizer).items()})
        files[STATE] = tensors_writer(state, meta)
    if log is not None:
        files[LOG] = "".join(dumps(r) + "\n" for r in log)
    files[CONFIG] = dumps({"format": FORMAT, **config}, indent=1) + "\n"
    # One step for the whole set: a save killed part-way leaves the previous checkpoint, never weights of one step
    # beside the config of another.
    write_folder_atomic(folder, files)


def _read_tensors(path: Path) -> dict[str, torch.Tensor]:
    if not path.is_file():
        raise CheckpointError(f"checkpoint file {str(path)!r} is {'not a file' if path.exists() else 'missing'}")
    try:
        return load_file(str(path))
    except (SafetensorError, OSError, ValueError) as exc:
        raise CheckpointError(f"{path}: not a readable safetensors file ({exc})") from None


def _check_size(config: dict, path: Path, prefix: str = "") -> None:
    """Compare the config's sizes with the file's header before building anything from them.

    Building the model allocates ``d_model^2``-sized matrices, so ``d: 1000000000`` in a hand-edited config
    would exhaust memory before the tensors are ever compared with it.
    """
    if not path.is_file():
        raise CheckpointError(f"checkpoint file {str(path)!r} is {'not a file' if path.exists() else 'missing'}")
    name = f"{prefix}{ASSIGN}_W_Q"
    try:
        with safe_open(str(path), framework="pt") as f:
            shape = tuple(f.get_slice(name).get_shape()) if name in f.keys() else None
    except (SafetensorError, OSError, ValueError) as exc:
        raise CheckpointError(f"{path}: not a readable safetensors file ({exc})") from None
    model = config["model"]
    d_model = trainable_layout(model["d"], model["k"]).d_model
    if shape is None or len(shape) != 2 or shape[0] != d_model or model["d_head"] not in (None, shape[1]):
        raise CheckpointError(f"{path}: {name} has shape {shape}, but d={model['d']}, k={model['k']},"
                              f" d_head={model['d_head']} in {CONFIG} need ({d_model}, {model['d_head'] or 'd_head'})")


def build_from_config(config: dict) -> RecurrentKMeans:
    """The architecture ``config`` (validated by :func:`read_config`) describes, with its initial weights."""
    try:
        return RecurrentKMeans(ModelConfig(**config["model"]), dtype=DTYPES[config.get("dtype", "float32")])
    except ValueError as exc:  # e.g. an exact init with a d_head below the construction's
        raise CheckpointError(f"{CONFIG}: the model section does not describe a model ({exc})") from None


def _first_difference(value: torch.Tensor, expected: torch.Tensor) -> str:
    where = tuple(int(i) for i in (value != expected).nonzero()[0])
    return (f"entry {where if len(where) != 1 else where[0]} is {value[where].item()}, the config's is"
            f" {expected[where].item()}")


def _check_finite(name: str, value: torch.Tensor, where: str) -> None:
    if value.is_floating_point() and not torch.isfinite(value).all():
        raise CheckpointError(f"{where}: {name} holds NaN or inf")


def _load_into(model: RecurrentKMeans, tensors: dict[str, torch.Tensor], where: str) -> None:
    expected = model.state_dict()
    if set(tensors) != set(expected):
        missing, extra = sorted(set(expected) - set(tensors)), sorted(set(tensors) - set(expected))
        raise CheckpointError(f"{where}: tensors do not match the config (missing {missing[:3]}, unexpected {extra[:3]})")
    trained = dict(model.named_parameters())
    for name, value in tensors.items():
        if value.shape != expected[name].shape or value.dtype != expected[name].dtype:
            raise CheckpointError(f"{where}: {name} has shape {tuple(value.shape)} {value.dtype}, the config needs"
                                  f" {tuple(expected[name].shape)} {expected[name].dtype}")
        _check_finite(name, value, where)
        # Buffers (MLP wiring indices and masks, preconditioning scales, the structural channel) are architecture:
        # the config determines them. A different one would silently rewire the model (a negative index reads
        # another dimension) or crash it (an index past d_model), so it must be the config's exactly.
        if name not in trained and not torch.equal(value, expected[name]):
            raise CheckpointError(f"{where}: {name} is fixed by the architecture in {CONFIG} and differs from it"
                                  f" ({_first_difference(value, expected[name])})")
    for name in trained:
        # The model uses each parameter times its preconditioning scale: that product must be finite too.
        scale = tensors.get(f"{name}_scale")
        if scale is not None and not torch.isfinite(tensors[name] * scale).all():
            raise CheckpointError(f"{where}: {name} times {name}_scale overflows {tensors[name].dtype}"
                                  f" (largest |{name}| {float(tensors[name].abs().max()):.3g})")
    model.load_state_dict(tensors, strict=True)


def _check_adam(model: RecurrentKMeans, tensors: dict[str, torch.Tensor], where: str) -> None:
    """Adam's moments must belong to the model's parameters, with their shapes, finite, and a count for a step."""
    params = dict(model.named_parameters())
    keys = {f"{name}.{key}": (name, key) for name in params for key in ADAM_KEYS}
    unexpected = sorted(set(tensors) - set(keys))
    if unexpected:
        raise CheckpointError(f"{where}: unexpected optimiser tensor adam.{unexpected[0]}")
    for name, param in params.items():
        present = [key for key in ADAM_KEYS if f"{name}.{key}" in tensors]
        if present and len(present) != len(ADAM_KEYS):
            raise CheckpointError(f"{where}: the optimiser state of {name} is incomplete (has only {', '.join(present)})")
    for full, value in tensors.items():
        name, key = keys[full]
        shape = () if key == "step" else tuple(params[name].shape)
        if tuple(value.shape) != shape or not value.is_floating_point():
            raise CheckpointError(f"{where}: adam.{full} has shape {tuple(value.shape)} {value.dtype},"
                                  f" needs {shape} floating point")
        _check_finite(f"adam.{full}", value, where)
        if key != "exp_avg" and (value < 0).any():
            raise CheckpointError(f"{where}: adam.{full} must be >= 0")


def load_model(path: str | Path) -> tuple[RecurrentKMeans, dict]:
    """The model a checkpoint stands for (``model.safetensors``) and its config; raises :class:`CheckpointError`."""
    folder = resolve(path)
    config = read_config(folder)
    _check_size(config, folder / MODEL)
    model = build_from_config(config)
    _load_into(model, _read_tensors(folder / MODEL), str(folder / MODEL))
    model.eval()
    return model, config


def load_training_state(path: str | Path, model: RecurrentKMeans, optimizer: torch.optim.Optimizer) -> None:
    """Restore the last weights and Adam's moments from ``state.safetensors``."""
    folder = resolve(path)
    _check_size(read_config(folder), folder / STATE, prefix="model.")
    tensors = _read_tensors(folder / STATE)
    other = sorted(name for name in tensors if not name.startswith(("model.", "adam.")))
    if other:
        raise CheckpointError(f"{folder / STATE}: unexpected tensor {other[0]}")
    weights = {name[len("model."):]: t for name, t in tensors.items() if name.startswith("model.")}
    adam = {name[len("adam."):]: t for name, t in tensors.items() if name.startswith("adam.")}
    _load_into(model, weights, str(folder / STATE))
    _check_adam(model, adam, str(folder / STATE))
    load_optimizer_tensors(model, optimizer, adam)


