"""What the circuit takes as input: residual vectors, never tokens (shared by both model classes, no TransformerLens).

``transformer_lens.patching``'s helpers size their position axis from the input's last dimension, which for tokens
is the sequence length. :class:`ResidualInput` wraps a residual input so that its ``shape`` is ``(batch, pos)``, and
the circuit's models unwrap it (:func:`residual_of`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from jaxtyping import Float

#: What to pass instead of tokens, for the error messages.
WHAT_TO_PASS = ("the k-means circuit has no token vocabulary: pass its residual input, a float tensor"
                " (batch, pos, d_model) such as circuits.encoding.encode(layout, X, C0).resid")


@dataclass(frozen=True)
class ResidualInput:
    """A residual-stream input that looks like a token batch to code that sizes positions from ``shape[-1]``.

    ``shape`` is ``(batch, pos)``, as for tokens; :class:`~circuits.model.CircuitTransformer` runs ``resid`` itself.
    """

    resid: Float[torch.Tensor, "batch pos d_model"]

    def __post_init__(self) -> None:
        if not isinstance(self.resid, torch.Tensor) or self.resid.ndim != 3:
            raise TypeError("ResidualInput takes a (batch, pos, d_model) tensor")

    @property
    def shape(self) -> torch.Size:
        return self.resid.shape[:2]

    @property
    def device(self) -> torch.device:
        return self.resid.device


class NoTokens(torch.nn.Module):
    """Stands where a token or positional embedding would be; the circuit has none, so calling it is an error."""

    def forward(self, *args, **kwargs):
        raise TypeError(WHAT_TO_PASS)


def residual_of(input, d_model: int) -> Float[torch.Tensor, "batch pos d_model"]:
    """``input`` as a residual tensor, or a ``TypeError`` / ``ValueError`` saying what is wrong with it."""
    if isinstance(input, ResidualInput):
        input = input.resid
    if isinstance(input, (str, list, tuple)):
        raise TypeError("text input: " + WHAT_TO_PASS)
    if not isinstance(input, torch.Tensor):
        raise TypeError(f"input of type {type(input).__name__}: " + WHAT_TO_PASS)
    if not input.is_floating_point():
        raise TypeError(f"token input ({input.dtype} tensor of shape {tuple(input.shape)}): " + WHAT_TO_PASS)
    if input.ndim != 3 or input.shape[-1] != d_model:
        raise ValueError(f"the residual input must have shape (batch, pos, {d_model}), got {tuple(input.shape)}")
    return input
