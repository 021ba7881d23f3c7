"""Export parity: does the exported ``HookedTransformer`` compute what a trained model's training-time forward
pass computes? This is the ``"verified"`` of a trained checkpoint (``cluster --checkpoint``), and nothing more.

What it certifies: on one encoded problem, after every step ``0..T``, the centroid coordinates (the residual's
``C`` subspace, unit coordinates) of the exported model (:meth:`~circuits.training.model.RecurrentKMeans.hooked_transformer`,
run by :func:`circuits.training.hooked.run_hooked`) and of :meth:`~circuits.training.model.RecurrentKMeans.run`
differ by at most :func:`export_tolerance`, a first-order bound on the rounding of two evaluations of the same
weights in the model's dtype. A model that passes is, as a TransformerLens model, the model that was trained and
evaluated.

What it does not certify: that the model computes Lloyd's algorithm, a variant, or any reference (a trained model
is meant to beat Lloyd's, not to match it: :mod:`analysis.evaluation` compares the two), nor anything about other
problems. The other meanings of "verified" are other reports: a constructed circuit against its reference
algorithm, layer by layer (:mod:`analysis.verify`), and the swap construction against its numpy reference
(:func:`analysis.verify.swap.verify_swap`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from circuits.encoding import EncodedBatch
from circuits.training.model import RecurrentKMeans


@dataclass(frozen=True)
class ExportParity:
    """The export check of one problem: the largest centroid difference, the bound it is held to, the path the
    exported model ran on (``"masked"`` or ``"dense"``, :func:`run_export`)."""

    error: float
    tolerance: float
    path: str

    @property
    def verified(self) -> bool:
        return self.error <= self.tolerance


@dataclass
class ExportRun:
    """Both forward passes of one problem (residuals after steps ``0..T``, batch of one) and their parity."""

    hooked: list[torch.Tensor]
    fast: list[torch.Tensor]
    parity: ExportParity


def export_tolerance(dtype: torch.dtype, n_tokens: int, d_model: int, steps: int, magnitude: float) -> float:
    """Largest centroid difference, in unit coordinates (relative to the data scale), allowed between the exported
    ``HookedTransformer`` and the training-time forward pass: both evaluate the same weights in ``dtype``, in a
    different order of operations.

    Derivation (first order, ``u = eps / 2`` the dtype's unit roundoff, ``M`` = ``magnitude`` the largest
    ``|entry|`` of any residual of the run, ~1 in unit coordinates). A step writes each centroid coordinate from an
    attention average over ``n_tokens`` values (weights summing to 1), each value a ``d_model``-term dot product
    of the residual with the weights; Higham's bound for such sums gives one evaluation within
    ``(n_tokens + d_model) u M`` of the exact step, so two evaluations differ by at most
    ``(n_tokens + d_model) eps M``; over ``steps`` steps these add up. The bound assumes a step passes an input
    difference on without amplifying it (an average is non-expansive in its values; the softmax's sensitivity
    to the scores' rounding is not included): a run that amplifies more is reported as not reproduced, with the
    measured difference. The comparison is made in unit coordinates and the centroids are decoded to the data's
    units in float64, so the data's offset and scale (``|offset| / scale`` of 5e3 multiplied float32's decode
    rounding to 1.1e-4 before) add nothing to it.
    """
    eps = float(torch.finfo(dtype).eps)
    return eps * (n_tokens + d_model) * max(steps, 1) * max(magnitude, 1.0)


def run_export(ht, model: RecurrentKMeans, enc: EncodedBatch, iterations: int, n: int) -> tuple[list[torch.Tensor], str]:
    """The exported ``HookedTransformer`` on one encoded problem, every step: on the masked path
    (:mod:`circuits.training.masked`: the same weights, the point x point block proved to weigh exactly 0 and
    skipped, ``O(n k)``), or densely where that proof fails; and which path ran."""
    from circuits.structured import StructuredPathUnavailable
    from circuits.training.hooked import run_hooked

    try:
        return run_hooked(ht, model.layout, enc.resid, iterations, model.config.reembed, keep=True, n=n), "masked"
    except StructuredPathUnavailable as exc:
        from analysis.capture.run import DENSE_MAX_TOKENS

        if enc.resid.shape[1] > DENSE_MAX_TOKENS:
            from circuits.training.schema import CheckpointError

            raise CheckpointError(f"{exc}; and {enc.resid.shape[1]} tokens is above the dense forward's limit of"
                                  f" {DENSE_MAX_TOKENS}") from None
        return run_hooked(ht, model.layout, enc.resid, iterations, model.config.reembed, keep=True), "dense"


def check_export(ht, model: RecurrentKMeans, enc: EncodedBatch, iterations: int, n: int) -> ExportRun:
    """Run one encoded problem of ``n`` points through ``ht``, the model's exported ``HookedTransformer``
    (:func:`run_export`), and through the training forward pass, ``iterations`` steps, and hold their centroids to
    :func:`export_tolerance`. (One problem's products are small: callers run this with one torch thread.)"""
    with torch.no_grad():
        hooked, path = run_export(ht, model, enc, iterations, n)
        fast = model.run(enc.resid, iterations, n, keep=True)
    C, seq = model.layout["C"], enc.sequence
    error = float(max(float((h[:, seq.centroids, C] - f[:, seq.centroids, C]).abs().max()) for h, f in zip(hooked, fast)))
    tolerance = export_tolerance(model.dtype, seq.n_tokens, model.layout.d_model, iterations,
                                 max(float(r.abs().max()) for r in fast))
    return ExportRun(hooked, fast, ExportParity(error, tolerance, path))
