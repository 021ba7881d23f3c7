"""A task in the trainable model's coordinates and back: a batch of problems encoded as the exact circuit encodes
them and prepared as the recurrent model reads them (:func:`encode_for`, any ``d' <= d`` and ``k' <= k`` of a general
model's capacity), the token positions of a residual (:func:`sequence_of`), and unit-scaled centroids back in the
task's units (:func:`unit_to_task`). Shared by the model (:mod:`circuits.training.model`), its training loop and the
evaluations of a trained model.
"""

from __future__ import annotations

import numpy as np
import torch

from circuits.encoding import EncodedBatch, as_batch, encode, fit_unit_scaling
from circuits.layout import ResidualLayout, SequenceLayout
from circuits.training.construction import prepare_input


def sequence_of(resid: torch.Tensor, n: int) -> SequenceLayout:
    """Token positions of a residual with ``n`` points: the centroid tokens are the rest after BOS and points."""
    return SequenceLayout(n, resid.shape[1] - n - 1)


def encode_for(layout: ResidualLayout, X: np.ndarray, C0: np.ndarray, dtype: torch.dtype,
               device: torch.device | str = "cpu") -> EncodedBatch:
    """:func:`circuits.encoding.encode` (unit scaling, token order) followed by ``prepare_input``.

    Points of ``d < layout.d`` coordinates go in the first ``d`` (zero padding changes no distance and no unit
    scaling); ``k < layout.k`` initial centroids make ``k`` centroid tokens with the first ``k`` identities. The
    returned batch keeps the caller's ``X`` and ``C0`` (``d`` wide); its scaling's offset is ``layout.d`` wide.
    """
    X, C0 = as_batch(X, "X"), as_batch(C0, "C0")
    d, k = X.shape[2], C0.shape[1]
    if d > layout.d or C0.shape[2] != d or k > layout.k:
        raise ValueError(f"the model holds d <= {layout.d}, k <= {layout.k}; got points of d={d}, centroids"
                         f" of shape {C0.shape[1:]}")
    pad = ((0, 0), (0, 0), (0, layout.d - d))
    Xp, Cp = np.pad(X, pad), np.pad(C0, pad)
    if k == layout.k:
        enc = encode(layout, Xp, Cp, dtype=torch.float64)
    else:
        # Only the first k centroid tokens: encode against the full K (padding with copies of a centroid) and cut.
        full = np.concatenate([Cp, np.repeat(Cp[:, :1], layout.k - k, axis=1)], axis=1)
        enc = encode(layout, Xp, full, dtype=torch.float64, scaling=fit_unit_scaling(Xp, Cp))
        enc.resid = enc.resid[:, : 1 + X.shape[1] + k]
        enc.sequence = SequenceLayout(X.shape[1], k)
    resid = prepare_input(layout, enc.resid.numpy(), enc.n)
    return EncodedBatch(torch.as_tensor(resid, dtype=dtype, device=device), layout, enc.sequence, enc.scaling, X, C0)


def unit_to_task(unit: torch.Tensor, encoded: EncodedBatch) -> torch.Tensor:
    """Unit-scaled coordinates back to the task's units (differentiable), the task's ``d`` coordinates only."""
    d = encoded.X.shape[-1]
    offset = torch.as_tensor(encoded.scaling.offset[:, :d], dtype=unit.dtype, device=unit.device)
    scale = torch.as_tensor(encoded.scaling.scale, dtype=unit.dtype, device=unit.device)
    return unit[..., :d] * scale[:, None, None] + offset[:, None, :]
