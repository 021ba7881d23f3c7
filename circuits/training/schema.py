"""What a checkpoint's ``config.json`` and ``log.jsonl`` must hold, checked before anything is built from them.

A checkpoint is untrusted input: a folder someone sent, edited or truncated. Every field the code reads is checked
here for presence, type and range, and the model and training sections for agreement, so that a bad file is one
:class:`CheckpointError` naming the field instead of a crash (or, worse, a model built from a float ``d``).
Nothing here imports torch: the command line validates a checkpoint before loading its weights.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from circuits.untrusted_json import UntrustedJSONError, loads

#: Written by this version. v2 adds the model's ``general`` flag (``d`` and ``k`` are then a capacity: any
#: ``d' <= d``, ``k' <= k``) and the training options of a general run; v1 checkpoints (fixed d, k) still load.
FORMAT = "kmeans-circuits/recurrent-v2"
FORMAT_V1 = "kmeans-circuits/recurrent-v1"
FORMATS = (FORMAT_V1, FORMAT)
CONFIG, MODEL, STATE, LOG = "config.json", "model.safetensors", "state.safetensors", "log.jsonl"

#: Model inits and dtypes (``circuits.training.model.INITS`` / ``DTYPES``, which import torch; a test keeps them equal).
INITS = ("exact", "random")
DTYPE_NAMES = ("float32", "float64")
#: Fields of ``circuits.training.construction.InitSharpness`` (a test keeps them equal).
SHARPNESS_FIELDS = ("beta", "growth", "beta_update", "self_weight", "sink", "tie_break")
#: Sizes and counts above this are not a model anyone trained; they only make arithmetic on them overflow.
MAX_COUNT = 2**31 - 1
#: Adam's first-moment decay (``torch.optim.Adam``'s default, which the training loop keeps): Adam's first step moves
#: a weight by ``lr / (1 - ADAM_BETA1)``, a number the model's dtype must hold (torch refuses it otherwise).
ADAM_BETA1 = 0.9


def max_lr(dtype: str) -> float:
    """The largest learning rate whose first Adam step is a finite ``dtype`` number (``dtype``: a ``DTYPE_NAMES``)."""
    import numpy as np

    return float(np.finfo(dtype).max) * (1 - ADAM_BETA1)


#: Seeds are numpy seeds (tasks) and torch seeds (random init): numpy takes [0, 2**32).
SEED_LIMIT = 2**32


class CheckpointError(ValueError):
    """A checkpoint that cannot be read: missing files, wrong format, or content that does not fit the config."""


# ------------------------------------------------------------------------------------------------ field checks
def _integer(value, where: str, low: int = 1, high: int = MAX_COUNT) -> int:
    # bool is an int subclass, and 2.0 is what a hand edit produces: neither is the integer the writer wrote.
    if type(value) is not int:
        raise CheckpointError(f"{where} must be an integer, got {json.dumps(value)}")
    if not low <= value <= high:
        raise CheckpointError(f"{where} must be in [{low}, {high}], got {value}")
    return value


def _number(value, where: str, positive: bool = False, nonnegative: bool = False) -> float:
    if type(value) not in (int, float):
        raise CheckpointError(f"{where} must be a number, got {json.dumps(value)}")
    # json reads 1e400 as inf and accepts NaN; int() of a 400-digit integer is fine but float() of it is not.
    try:
        number = float(value)
    except OverflowError:
        raise CheckpointError(f"{where} is out of range: {value}") from None
    if not math.isfinite(number):
        raise CheckpointError(f"{where} must be finite, got {value}")
    if positive and not number > 0:
        raise CheckpointError(f"{where} must be positive, got {value}")
    if nonnegative and not number >= 0:
        raise CheckpointError(f"{where} must be >= 0, got {value}")
    return number


def _choice(value, where: str, choices: tuple[str, ...]) -> str:
    if value not in choices or not isinstance(value, str):
        raise CheckpointError(f"{where} must be one of {', '.join(choices)}, got {json.dumps(value)}")
    return value


def _bool(value, where: str) -> bool:
    if type(value) is not bool:
        raise CheckpointError(f"{where} must be true or false, got {json.dumps(value)}")
    return value


def _section(parent: dict, key: str, where: str, required: bool = True) -> dict | None:
    if key not in parent:
        if required:
            raise CheckpointError(f"{where}: the {key!r} section is missing")
        return None
    if not isinstance(parent[key], dict):
        raise CheckpointError(f"{where}: {key} must be an object, got {json.dumps(parent[key])[:40]}")
    return parent[key]


def _keys(section: dict, where: str, required: tuple[str, ...], optional: tuple[str, ...] = ()) -> None:
    missing = [key for key in required if key not in section]
    if missing:
        raise CheckpointError(f"{where} is missing {', '.join(missing)}")
    unknown = [key for key in section if key not in required + optional]
    if unknown:
        raise CheckpointError(f"{where} has unknown field {unknown[0]!r}")


def _sharpness(value, where: str) -> None:
    if not isinstance(value, dict):
        raise CheckpointError(f"{where} must be an object, got {json.dumps(value)[:40]}")
    _keys(value, where, SHARPNESS_FIELDS)
    for name in SHARPNESS_FIELDS:
        _number(value[name], f"{where}.{name}", positive=name in ("beta", "beta_update"), nonnegative=name == "growth")


#: ``ModelConfig``'s fields (a test keeps them equal); the writer always writes all of them (v1: without ``general``).
MODEL_FIELDS = ("d", "k", "init", "sharpness", "d_head", "reembed", "seed", "general")
MODEL_FIELDS_V1 = MODEL_FIELDS[:-1]


def _model(model: dict, where: str, fields: tuple[str, ...] = MODEL_FIELDS) -> None:
    _keys(model, where, fields)
    if "general" in fields:
        _bool(model["general"], f"{where}.general")
    _integer(model["d"], f"{where}.d")
    _integer(model["k"], f"{where}.k")
    _choice(model["init"], f"{where}.init", INITS)
    _sharpness(model["sharpness"], f"{where}.sharpness")
    if model["d_head"] is not None:
        _integer(model["d_head"], f"{where}.d_head")
    _bool(model["reembed"], f"{where}.reembed")
    _integer(model["seed"], f"{where}.seed", 0, SEED_LIMIT - 1)


#: ``TrainConfig``'s fields (a test keeps them equal) and how each is checked.
TRAINING_COUNTS = ("d", "k", "n", "steps", "batch", "train_iterations", "eval_iterations", "val_tasks", "val_every")
TRAINING_POSITIVE = ("lr", "clip", "gamma")
TRAINING_FIELDS_V1 = TRAINING_COUNTS + TRAINING_POSITIVE + ("seed", "init", "sharpness", "reembed", "d_head", "dtype",
                                                            "keep_best")
#: Added in v2: the general family, the loss (``circuits.training.loop.LOSSES``) and its weights.
TRAINING_FIELDS = TRAINING_FIELDS_V1 + ("general", "loss", "hinge", "rise", "support")
LOSSES = ("final", "anytime")
SUPPORTS = ("dense", "construction")


def _training(training: dict, where: str, fields: tuple[str, ...] = TRAINING_FIELDS) -> None:
    _keys(training, where, fields)
    if "general" in fields:
        _bool(training["general"], f"{where}.general")
        _choice(training["loss"], f"{where}.loss", LOSSES)
        _choice(training["support"], f"{where}.support", SUPPORTS)
        for name in ("hinge", "rise"):
            _number(training[name], f"{where}.{name}", nonnegative=True)
    for name in TRAINING_COUNTS:
        _integer(training[name], f"{where}.{name}")
    if training["n"] < training["k"]:
        raise CheckpointError(f"{where}.n must be >= k, got n={training['n']}, k={training['k']}")
    for name in TRAINING_POSITIVE:
        _number(training[name], f"{where}.{name}", positive=True)
    _integer(training["seed"], f"{where}.seed", 0, SEED_LIMIT - 1)
    _choice(training["init"], f"{where}.init", INITS)
    _sharpness(training["sharpness"], f"{where}.sharpness")
    _bool(training["reembed"], f"{where}.reembed")
    if training["d_head"] is not None:
        _integer(training["d_head"], f"{where}.d_head")
    _choice(training["dtype"], f"{where}.dtype", DTYPE_NAMES)
    _bool(training["keep_best"], f"{where}.keep_best")


def _progress(progress: dict, where: str) -> None:
    if "step" in progress:
        _integer(progress["step"], f"{where}.step", 0)
    if progress.get("best_step") is not None:
        _integer(progress["best_step"], f"{where}.best_step", 0)
    if progress.get("best_val_ratio") is not None:
        _number(progress["best_val_ratio"], f"{where}.best_val_ratio", nonnegative=True)
    for name in ("wall_s", "cpu_s"):
        if name in progress:
            _number(progress[name], f"{where}.{name}", nonnegative=True)


def validate_config(config, where: str) -> dict:
    """``config`` if it is a complete, consistent checkpoint config; else :class:`CheckpointError` naming the field."""
    if not isinstance(config, dict) or config.get("format") not in FORMATS:
        raise CheckpointError(f"{where}: not a {FORMAT} (or {FORMAT_V1}) checkpoint")
    v1 = config["format"] == FORMAT_V1
    model = _section(config, "model", where)
    _model(model, f"{where}: model", MODEL_FIELDS_V1 if v1 else MODEL_FIELDS)
    dtype = _choice(config.get("dtype", "float32"), f"{where}: dtype", DTYPE_NAMES)
    training = _section(config, "training", where)
    _training(training, f"{where}: training", TRAINING_FIELDS_V1 if v1 else TRAINING_FIELDS)
    # The model section is the training options' model (TrainConfig.model_config), written at the same time.
    for name in (MODEL_FIELDS_V1 if v1 else MODEL_FIELDS):
        if model[name] != training[name]:
            raise CheckpointError(f"{where}: model.{name} ({json.dumps(model[name])}) and training.{name}"
                                  f" ({json.dumps(training[name])}) disagree")
    if training["dtype"] != dtype:
        raise CheckpointError(f"{where}: dtype {dtype} and training.dtype {training['dtype']} disagree")
    progress = _section(config, "progress", where, required=False)
    if progress is not None:
        _progress(progress, f"{where}: progress")
    return config


def load_json(text: str, where: str, nonfinite: bool = False):
    """The JSON value in ``text`` within :mod:`circuits.untrusted_json`'s limits (depth, number size, finite
    numbers unless ``nonfinite``); :class:`CheckpointError` naming the field otherwise."""
    try:
        return loads(text, where, nonfinite=nonfinite)
    except UntrustedJSONError as exc:
        raise CheckpointError(str(exc)) from None


# ------------------------------------------------------------------------------------------------ files
def resolve(path: str | Path) -> Path:
    """A checkpoint folder from a folder, or from its ``model.safetensors`` / ``config.json``."""
    path = Path(path)
    folder = path.parent if path.is_file() else path
    if not (folder / CONFIG).is_file():
        raise CheckpointError(f"{str(path)!r} is not a checkpoint: no {CONFIG} in {str(folder)!r}")
    return folder


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise CheckpointError(f"{path}: not a text file") from None
    except OSError as exc:
        raise CheckpointError(f"{path}: cannot be read ({exc.strerror or exc})") from None


def read_config(path: str | Path) -> dict:
    """The validated ``config.json`` of a checkpoint; raises :class:`CheckpointError` naming what is wrong."""
    folder = resolve(path)
    where = str(folder / CONFIG)
    return validate_config(load_json(_read_text(folder / CONFIG), where), where)


#: What a log record's drift holds (``circuits.training.loop.drift_from``), and the knobs the drift history plots.
DRIFT_BLOCKS = ("update", "assign")
DRIFT_PARTS = ("qk", "ov", "mlp")
LOG_KNOBS = ("assign_stiffness", "update_member_score", "update_self_score", "schedule_growth")


def _log_record(record, where: str) -> dict:
    if not isinstance(record, dict):
        raise CheckpointError(f"{where}: a record must be a JSON object")
    if "step" not in record:
        raise CheckpointError(f"{where}: the record has no step")
    _integer(record["step"], f"{where}: step", 0)
    for name in ("val_ratio", "loss"):
        # null is what a diverged validation writes (NaN in logs written before strict JSON); anything but a number
        # is not.
        value = record.get(name)
        if value is not None and type(value) not in (int, float):
            raise CheckpointError(f"{where}: {name} must be a number, got {json.dumps(value)[:40]}")
    drift = record.get("drift")
    if drift is not None:
        if not isinstance(drift, dict) or not all(isinstance(v, dict) for v in drift.values()):
            raise CheckpointError(f"{where}: drift must map each block to its parts")
        for kind, parts in drift.items():
            for part, value in parts.items():
                if value is not None:  # null: not finite (a diverged validation)
                    _number(value, f"{where}: drift.{kind}.{part}")
        if drift:
            # The history plots each block's parts against the validation ratio of the same record.
            missing = [f"drift.{kind}.{part}" for kind in DRIFT_BLOCKS for part in DRIFT_PARTS
                       if part not in drift.get(kind, {})] + (["val_ratio"] if "val_ratio" not in record else [])
            if missing:
                raise CheckpointError(f"{where}: a record with drift needs {', '.join(missing)}")
    knobs = record.get("knobs")
    if knobs is not None:
        if not isinstance(knobs, dict):
            raise CheckpointError(f"{where}: knobs must be an object")
        missing = [name for name in LOG_KNOBS if name not in knobs]
        if missing:
            raise CheckpointError(f"{where}: knobs is missing {', '.join(missing)}")
        for name, value in knobs.items():
            if value is not None and type(value) not in (int, float):
                raise CheckpointError(f"{where}: knobs.{name} must be a number, got {json.dumps(value)[:40]}")
    return record


def read_log(path: str | Path) -> list[dict]:
    """The training log, one validated record per non-empty line (``[]`` when the checkpoint has none)."""
    folder = resolve(path)
    if not (folder / LOG).is_file():
        return []
    records = []
    for number, line in enumerate(_read_text(folder / LOG).splitlines(), start=1):
        if line.strip():
            where = f"{folder / LOG} line {number}"
            records.append(_log_record(load_json(line, where, nonfinite=True), where))
    return records
