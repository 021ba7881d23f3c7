"""The bits of a set of tensors, kept to tell later whether any of them changed, however it was changed.

torch's version counter sees an in-place edit under ``torch.no_grad()`` but not one through ``.data``, which
interpretability code uses to ablate or rescale a weight; a copy of the bits sees both, and a tensor swapped for
another. Whatever is derived from a circuit's weights and kept (a structured plan, a circuit kept for reuse) is
kept with the fingerprint of the weights it was derived from.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import Tensor

#: Integers of each float width: a float tensor is read as these, so its bytes are its bits.
_INTEGERS = {8: torch.int64, 4: torch.int32, 2: torch.int16, 1: torch.uint8}


def fingerprint(tensors: Iterable[Tensor]) -> tuple:
    """Each tensor's dtype, device, shape and bytes, in order: equal exactly when every tensor holds the same bits
    (``-0.0`` is not ``0.0``; a NaN is itself). Floats are read as integers of their width (numpy, which makes the
    bytes, has no bfloat16)."""
    return tuple((t.dtype, t.device, tuple(t.shape),
                  (t.detach().view(_INTEGERS[t.element_size()]) if t.is_floating_point() else t.detach())
                  .cpu().numpy().tobytes()) for t in tensors)
