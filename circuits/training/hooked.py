"""The exported two-layer ``HookedTransformer`` of a trained model, stepped as the recurrent model steps
(:meth:`circuits.training.model.RecurrentKMeans.run`): what the export's verification
(:mod:`analysis.verify.export`) and circuit discovery's trained model (:mod:`analysis.discovery.headline`) run.
"""

from __future__ import annotations

import torch

from circuits.layout import ResidualLayout
from circuits.training.construction import CONSTANT_SUBSPACES, STAGING_SUBSPACES


def run_hooked(model, layout: ResidualLayout, encoded_resid: torch.Tensor, steps: int, reembed: bool,
               keep: bool = False, n: int | None = None) -> list[torch.Tensor]:
    """Apply the two-layer ``HookedTransformer`` recurrently, as :meth:`RecurrentKMeans.run` does: step 0 is
    ``model(resid, start_at_layer=1, stop_at_layer=2)`` (the assign block), later steps re-embed and run both.

    With ``n`` (the number of points) the blocks run on the masked path (:func:`circuits.training.masked.
    masked_blocks`: the same weights, the point x point block proved to weigh exactly 0 and skipped), which raises
    :class:`~circuits.structured.StructuredPathUnavailable` where that proof fails."""
    const = torch.as_tensor(layout.mask(CONSTANT_SUBSPACES), dtype=encoded_resid.dtype)
    staging = torch.as_tensor(layout.mask(STAGING_SUBSPACES), dtype=encoded_resid.dtype)
    resid, out = encoded_resid, []
    if n is not None:
        from circuits.training.masked import masked_blocks
    with torch.no_grad():
        for t in range(steps + 1):
            if t and reembed:
                resid = resid * (1 - const - staging) + encoded_resid * const
            if n is not None:
                resid = masked_blocks(model, resid, n, start=1 if t == 0 else 0)
            else:
                resid = model(resid, start_at_layer=1 if t == 0 else 0, stop_at_layer=model.cfg.n_layers)
            if keep or t == steps:
                out.append(resid)
    return out
