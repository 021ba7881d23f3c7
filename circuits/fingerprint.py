"""The bits of tensors, kept to tell later whether any of them changed, however it was changed.

torch's version counter sees an in-place edit under ``torch.no_grad()`` but not one through ``.data``, which
interpretability code uses to ablate or rescale a weight; the bits see both, and a tensor swapped for another.
:func:`fingerprint` is the bits themselves (a copy: for what is small and compared often, a structured plan's
parameters); :func:`digest` is a BLAKE2b digest of them (32 bytes: for a circuit's weights as built, which a
report compares with the weights that ran).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

import numpy as np
import torch
from torch import Tensor

#: Integers of each float width: a float tensor is read as these, so its bytes are its bits.
_INTEGERS = {8: torch.int64, 4: torch.int32, 2: torch.int16, 1: torch.uint8}


def _bits(t: Tensor) -> np.ndarray:
    """``t``'s elements as integers of their width, on the CPU (numpy has no bfloat16; ``-0.0`` is not ``0.0``)."""
    t = t.detach()
    return np.ascontiguousarray((t.view(_INTEGERS[t.element_size()]) if t.is_floating_point() else t).cpu().numpy())


def fingerprint(tensors: Iterable[Tensor]) -> tuple:
    """Each tensor's dtype, device, shape and bytes, in order: equal exactly when every tensor holds the same bits
    (a NaN is itself)."""
    return tuple((t.dtype, t.device, tuple(t.shape), _bits(t).tobytes()) for t in tensors)


def digest(t: Tensor) -> bytes:
    """A BLAKE2b digest of ``t``'s dtype, shape and bits: equal for the same bits, and different for different ones
    but with probability 2^-256."""
    h = hashlib.blake2b(repr((t.dtype, tuple(t.shape))).encode(), digest_size=32)
    h.update(_bits(t).data)
    return h.digest()
