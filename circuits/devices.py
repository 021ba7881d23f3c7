"""Which torch device a run uses: ``"cpu"``, ``"cuda"`` (``"cuda:1"``...) or ``"auto"`` (cuda where present).

Every tensor the circuits and analyses create follows the device of their inputs (the circuit's weights, the
encoded residual stream); this is only where a caller's choice is turned into a ``torch.device``, and where a run
sets how many CPU threads torch uses (:func:`torch_threads`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

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
    if device.type not in ("cpu", "cuda"):
        # A device torch knows but the circuits do not run on: 'meta' holds no values, and others are untested.
        raise ValueError(f"device {str(device)!r}: the circuits run on cpu or cuda")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {str(device)!r}: no CUDA device is available (use cpu)")
    return device


@contextmanager
def torch_threads(n: int | None) -> Iterator[None]:
    """Run the block with ``n`` torch intra-op threads (``None``, or the current number: left alone), restoring
    the setting afterwards.

    The circuits' runs are many small float64 products (``d_model`` is tens): splitting each over threads costs
    more than it saves, and on a busy machine it is ruinous (the iris layer x position patching sweep, 23 x 7
    cells, on the 2-core development machine under load: 21 s with 2 threads, 0.6 s with 1)."""
    before = torch.get_num_threads()
    if n is None or n == before:
        yield
        return
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)
