"""The circuit's ``HookedTransformer``: a model whose input is the residual stream, not tokens.

The k-means circuit has no vocabulary and no positional information: a problem enters as residual vectors
(:func:`circuits.encoding.encode`), one per BOS sink, point and centroid, and the blocks run from layer 0.
:class:`CircuitTransformer` is a ``HookedTransformer`` that says so:

* ``model(resid)``, ``model.run_with_cache(resid)`` and ``model.run_with_hooks(resid, ...)`` take a float
  ``(batch, pos, d_model)`` residual input and run every block, as ``start_at_layer=0`` does (which still works);
* the input is copied first, as an embedding makes a fresh tensor, so a hook that writes in place (the patching
  helpers do) never changes the caller's tensor;
* token input (integer tensors, strings) is refused with a ``TypeError`` that says what to pass instead, rather
  than being embedded by a placeholder embedding into garbage;
* there is no token or positional embedding at all (``embed`` and ``pos_embed`` refuse to run and hold no
  weights); the config says ``d_vocab = 0`` (no vocabulary) and ``n_ctx = sys.maxsize`` (no length limit:
  positions carry no information and the residual path takes any number of tokens).

``transformer_lens.patching``'s helpers size their position axis from the input's last dimension, which for
tokens is the sequence length. Wrap a residual input in :class:`ResidualInput` to give them that: its ``shape``
is ``(batch, pos)``, and the model unwraps it::

    patching.get_act_patch_resid_pre(model, ResidualInput(corrupted.resid), clean_cache, metric)
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import torch
from jaxtyping import Float
from transformer_lens import HookedTransformer, HookedTransformerConfig

#: What to pass instead of tokens, for the error messages.
_WHAT_TO_PASS = ("the k-means circuit has no token vocabulary: pass its residual input, a float tensor"
                 " (batch, pos, d_model) such as circuits.encoding.encode(layout, X, C0).resid")


@dataclass(frozen=True)
class ResidualInput:
    """A residual-stream input that looks like a token batch to code that sizes positions from ``shape[-1]``.

    ``shape`` is ``(batch, pos)``, as for tokens; :class:`CircuitTransformer` runs ``resid`` itself.
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


class _NoTokens(torch.nn.Module):
    """Stands where a token or positional embedding would be; the circuit has none, so calling it is an error."""

    def forward(self, *args, **kwargs):
        raise TypeError(_WHAT_TO_PASS)


class CircuitTransformer(HookedTransformer):
    """A ``HookedTransformer`` fed with residual vectors (see the module docstring)."""

    def __init__(self, cfg: HookedTransformerConfig):
        if cfg.d_vocab != 0:
            raise ValueError(f"a CircuitTransformer has no vocabulary (d_vocab=0), got d_vocab={cfg.d_vocab}")
        # HookedTransformer allocates a (n_ctx, d_model) positional table before we replace it: build with a
        # context of one, then record the real (unlimited) one.
        cfg.n_ctx = 1
        super().__init__(cfg)
        self.embed = _NoTokens()
        self.pos_embed = _NoTokens()
        self.cfg.n_ctx = sys.maxsize

    @staticmethod
    def residual_of(input, d_model: int) -> Float[torch.Tensor, "batch pos d_model"]:
        """``input`` as a residual tensor, or a ``TypeError`` / ``ValueError`` saying what is wrong with it."""
        if isinstance(input, ResidualInput):
            input = input.resid
        if isinstance(input, (str, list, tuple)):
            raise TypeError("text input: " + _WHAT_TO_PASS)
        if not isinstance(input, torch.Tensor):
            raise TypeError(f"input of type {type(input).__name__}: " + _WHAT_TO_PASS)
        if not input.is_floating_point():
            raise TypeError(f"token input ({input.dtype} tensor of shape {tuple(input.shape)}): " + _WHAT_TO_PASS)
        if input.ndim != 3 or input.shape[-1] != d_model:
            raise ValueError(f"the residual input must have shape (batch, pos, {d_model}), got {tuple(input.shape)}")
        return input

    def forward(self, input, *args, start_at_layer: int | None = None, tokens=None, **kwargs):
        """``HookedTransformer.forward`` on residual input: ``start_at_layer`` defaults to 0, not to embedding.

        A later ``start_at_layer`` takes the residual stream before that layer, as in TransformerLens. ``tokens``
        (used there only for a language-model loss) is refused: the circuit has no next-token loss.
        """
        if tokens is not None:
            raise TypeError("tokens=: " + _WHAT_TO_PASS)
        # A copy, as an embedding would make: hooks on the first resid_pre may write in place (transformer_lens'
        # patching helpers do), and must not change the caller's input.
        resid = self.residual_of(input, self.cfg.d_model).clone()
        return super().forward(resid, *args, start_at_layer=0 if start_at_layer is None else start_at_layer,
                               **kwargs)
