"""Which torch device a run uses: ``"cpu"``, ``"cuda"`` (``"cuda:1"``...) or ``"auto"`` (cuda where present).

Every tensor the circuits and analyses create follows the device of their inputs (the circuit's weights, the
encoded residual stream); this is only where a caller's choice is turned into a ``torch.device``.
"""

from __future__ import annotations

import torch

#: The choices of the command line's ``--device``.
CHOICES = ("auto", "cpu", "cuda")


def resolve(device: str | torch.device | None) -> torch.device:
    """``device`` as a ``torch.device``: ``None`` and ``"auto"`` mean cuda when torch sees one, else the CPU.
    Raises ``ValueError`` for a device torch does not know or a cuda device where there is none."""
    if device is None or (isinstance(device, str) and device == "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise ValueError(f"unknown device {device!r}: expected cpu, cuda or auto") from exc
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {str(device)!r}: no CUDA device is available (use cpu)")
    return device
