"""What "removing an edge" puts in its place, and how the readout's change is measured: each declared once.

**Ablation kinds** (:data:`ABLATIONS`). Removing ``u -> v.port`` gives the port some other value of ``u``'s output
in place of the current one:

* ``resample``: ``u``'s output on the corrupted input of the same pair (ACDC's default, "corrupted activation");
* ``zero``: 0;
* ``mean``: ``u``'s output averaged over a reference distribution (the clean inputs of the run's pairs), position
  by position.

**Metrics** (:data:`METRICS`), of a patched run's readout ``r`` against the clean ``r_clean`` and the readout
``r_abl`` with every edge removed (for ``resample`` the corrupted run):

* ``kl``: ACDC's default, the KL divergence ``KL(p_clean || p)`` of the soft assignments, ``p = softmax`` of the
  circuit's assignment logits (the ``Y`` its unembedding reads at each point; ``CHOICE`` at the swap circuits'
  sink), averaged over positions: 0 on the clean run. It reads labels only: a change of the final centroids that
  moves no label is invisible to it;
* ``l2``: the readout's position between the ablated and the clean run along the line joining them,
  ``<r - r_abl, r_clean - r_abl> / |r_clean - r_abl|^2`` (1 clean, 0 with every edge removed), with ``r`` the
  assignments and the final centroids (unit-scaled): linear in the readout, so first-order methods see it.

ACDC compares ``|metric(new) - metric(current)|`` with its threshold for both.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

#: Ablation kind -> how each source's ablated output ``(B, P, D)`` is made from ``(clean, corrupted, reference)``
#: outputs (each ``{source: (B or R, P, D)}``).
AblationFn = Callable[[dict, dict, dict | None], dict]


def _resample(clean: dict, corrupted: dict, reference: dict | None) -> dict:
    return corrupted


def _zero(clean: dict, corrupted: dict, reference: dict | None) -> dict:
    return {src: torch.zeros_like(out) for src, out in clean.items()}


def _mean(clean: dict, corrupted: dict, reference: dict | None) -> dict:
    reference = reference if reference is not None else clean
    return {src: reference[src].mean(dim=0, keepdim=True).expand_as(clean[src]).contiguous() for src in clean}


ABLATIONS: dict[str, AblationFn] = {"resample": _resample, "zero": _zero, "mean": _mean}
#: ACDC's defaults (Conmy et al., 2023): corrupted activations, KL divergence.
DEFAULT_ABLATION = "resample"
DEFAULT_METRIC = "kl"


def _l2(readout: torch.Tensor, clean: torch.Tensor, ablated: torch.Tensor, labels: tuple[int, int]) -> torch.Tensor:
    direction = clean - ablated
    return ((readout - ablated) * direction).sum(-1) / (direction**2).sum(-1)


def _kl(readout: torch.Tensor, clean: torch.Tensor, ablated: torch.Tensor, labels: tuple[int, int]) -> torch.Tensor:
    """Mean over the label positions of ``KL(softmax(clean) || softmax(readout))``; ``labels = (positions, width)``
    of the assignment logits, the readout's first entries."""
    positions, width = labels
    size = positions * width
    log_p = torch.log_softmax(readout[..., :size].unflatten(-1, (positions, width)), dim=-1)
    log_c = torch.log_softmax(clean[..., :size].unflatten(-1, (positions, width)), dim=-1)
    return (log_c.exp() * (log_c - log_p)).sum(-1).mean(-1)


#: ``metric(readout (R, B, m), clean (B, m), ablated (B, m), (label positions, label width)) -> (R, B)``.
MetricFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, tuple[int, int]], torch.Tensor]
METRICS: dict[str, MetricFn] = {"kl": _kl, "l2": _l2}
#: The metric's value on the clean run.
CLEAN_VALUE: dict[str, float] = {"kl": 0.0, "l2": 1.0}
