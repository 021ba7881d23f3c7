"""The learned safeguarded swap's checkpoint: its trained factors as a small JSON file, read as untrusted input.

A checkpoint is one JSON object::

    {"format": "kmeans-circuits/learned", "version": 1, "candidate": "lloyd-after-extrapolation",
     "alphas": [a_0, ..., a_{p-1}], "training": {...}}

``alphas`` (1 to :data:`MAX_ALPHAS` finite numbers in ``[0, MAX_ALPHA]``) are the per-step extrapolation factors
of :mod:`circuits.learned.reference`; ``training`` is a free-form record of how they were found (command, tasks,
scores), kept for the reader and never executed. :func:`load` rejects anything else with a ``ValueError`` naming
the field at fault (no pickle, no code, a size cap before parsing, and :mod:`circuits.untrusted_json`'s limits on
depth and number size while parsing).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from circuits.files import write_text_atomic
from circuits.strict_json import dumps
from circuits.untrusted_json import loads

FORMAT = "kmeans-circuits/learned"
VERSION = 1
CANDIDATE = "lloyd-after-extrapolation"
MAX_ALPHAS = 64
MAX_ALPHA = 16.0
MAX_BYTES = 1 << 20
#: The checkpoint shipped in the repository.
DEFAULT_PATH = Path(__file__).resolve().parents[2] / "checkpoints" / "learned" / "learned.json"


@dataclass
class LearnedCheckpoint:
    """Trained factors (``alphas[t]`` for step ``t``, the last for every later step) and their training record."""

    alphas: np.ndarray
    training: dict = field(default_factory=dict)


def validate(obj: object) -> LearnedCheckpoint:
    """The checkpoint in a parsed JSON value, or ``ValueError`` saying what is wrong."""
    if not isinstance(obj, dict):
        raise ValueError("a learned checkpoint must be a JSON object")
    if obj.get("format") != FORMAT:
        raise ValueError(f"format: not a learned checkpoint ({FORMAT!r} expected, got {_shown(obj.get('format'))})")
    # type(...) is int: JSON's true is Python's True, which equals 1.
    if type(obj.get("version")) is not int or obj["version"] != VERSION:
        raise ValueError(f"version: {VERSION} (an integer) expected, got {_shown(obj.get('version'))}")
    if obj.get("candidate") != CANDIDATE:
        raise ValueError(f"candidate: unknown learned candidate {_shown(obj.get('candidate'))}"
                         f" (expected {CANDIDATE!r})")
    alphas = obj.get("alphas")
    if not isinstance(alphas, list) or not 1 <= len(alphas) <= MAX_ALPHAS:
        raise ValueError(f"alphas must be a list of 1 to {MAX_ALPHAS} numbers")
    for i, a in enumerate(alphas):
        if isinstance(a, bool) or not isinstance(a, (int, float)) or not math.isfinite(a) or not 0 <= a <= MAX_ALPHA:
            raise ValueError(f"alphas must be finite numbers in [0, {MAX_ALPHA}]: alphas[{i}] is {_shown(a)}")
    training = obj.get("training", {})
    if not isinstance(training, dict):
        raise ValueError("training must be a JSON object")
    return LearnedCheckpoint(np.array(alphas, dtype=np.float64), training)


def _shown(value) -> str:
    text = json.dumps(value, default=repr)
    return text if len(text) <= 40 else text[:37] + "..."


def load(path: str | Path = DEFAULT_PATH) -> LearnedCheckpoint:
    """Read and validate a checkpoint file (``ValueError`` on anything that is not one)."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"no learned checkpoint at {path}")
    if path.stat().st_size > MAX_BYTES:
        raise ValueError(f"{path} is larger than a learned checkpoint can be ({MAX_BYTES} bytes)")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"{path} is not valid JSON: not UTF-8 text") from None
    except OSError as err:
        raise ValueError(f"{path} cannot be read ({err.strerror or err})") from None
    obj = loads(text, str(path))  # UntrustedJSONError is a ValueError naming the field
    try:
        return validate(obj)
    except ValueError as err:
        raise ValueError(f"{path}: {err}") from None


def save(checkpoint: LearnedCheckpoint, path: str | Path) -> Path:
    """Write ``checkpoint`` (validated first) as JSON."""
    obj = {"format": FORMAT, "version": VERSION, "candidate": CANDIDATE,
           "alphas": [float(a) for a in checkpoint.alphas], "training": checkpoint.training}
    validate(loads(dumps(obj), str(path)))
    return write_text_atomic(path, dumps(obj, indent=1) + "\n")
