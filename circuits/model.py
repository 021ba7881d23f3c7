"""The circuit's model: a ``HookedTransformer`` (TransformerLens 3.x) whose input is the residual stream, not tokens.

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

On TransformerLens 4.x, which has no ``HookedTransformer``, ``CircuitTransformer`` is
:class:`circuits.hooked.model.HookedCircuit`: a ``HookedRootModule`` with the same hook names, cache keys, state-dict
keys, methods and numbers (bit for bit), and the same residual-input behaviour.
"""

from __future__ import annotations

import sys

from circuits import tl
from circuits.hooked.inputs import WHAT_TO_PASS, NoTokens, ResidualInput, residual_of

__all__ = ["CircuitTransformer", "ResidualInput"]

if tl.TL_MAJOR >= 4:
    # TransformerLens 4 has no HookedTransformer: the circuit is our HookedRootModule with its surface.
    from circuits.hooked.model import HookedCircuit as CircuitTransformer
else:
    class CircuitTransformer(tl.HookedTransformer):
        """A ``HookedTransformer`` fed with residual vectors (see the module docstring)."""

        def __init__(self, cfg):
            if cfg.d_vocab != 0:
                raise ValueError(f"a CircuitTransformer has no vocabulary (d_vocab=0), got d_vocab={cfg.d_vocab}")
            # HookedTransformer allocates a (n_ctx, d_model) positional table before we replace it: build with a
            # context of one, then record the real (unlimited) one.
            cfg.n_ctx = 1
            super().__init__(cfg)
            self.embed = NoTokens()
            self.pos_embed = NoTokens()
            self.cfg.n_ctx = sys.maxsize

        @staticmethod
        def residual_of(input, d_model: int):
            """``input`` as a residual tensor, or a ``TypeError`` / ``ValueError`` saying what is wrong with it."""
            return residual_of(input, d_model)

        def forward(self, input, *args, start_at_layer: int | None = None, tokens=None, **kwargs):
            """``HookedTransformer.forward`` on residual input: ``start_at_layer`` defaults to 0, not to embedding.

            A later ``start_at_layer`` takes the residual stream before that layer, as in TransformerLens. ``tokens``
            (used there only for a language-model loss) is refused: the circuit has no next-token loss.
            """
            if tokens is not None:
                raise TypeError("tokens=: " + WHAT_TO_PASS)
            # A copy, as an embedding would make: hooks on the first resid_pre may write in place (transformer_lens'
            # patching helpers do), and must not change the caller's input.
            resid = residual_of(input, self.cfg.d_model).clone()
            return super().forward(resid, *args, start_at_layer=0 if start_at_layer is None else start_at_layer,
                                   **kwargs)
