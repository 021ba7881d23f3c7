"""A circuit's run kept for the analyses: residual streams decoded layer by layer and what each attention head did.

:mod:`~analysis.capture.run` runs the circuit (the dense ``HookedTransformer`` forward with TransformerLens hooks,
or the structured path on the same weights) and decodes each layer into the record the analyses read
(:mod:`~analysis.capture.record`); :mod:`~analysis.capture.summaries` computes,
inside the hooks, the attention summaries and their certificates (margins, leak bounds) that the verification reads.
"""

from analysis.capture.keep import EVERYTHING, Keep
from analysis.capture.record import PATHS, Capture, ExecutionPath, LayerCapture
from analysis.capture.run import (
    DENSE_MAX_TOKENS, PathUnavailable, capture, decoded_capture, on_device, reencode, stream_activations,
)
from analysis.capture.summaries import AssignAttention, UpdateAttention, summarise_head, to_numpy

__all__ = [
    "DENSE_MAX_TOKENS", "EVERYTHING", "Keep", "PATHS", "AssignAttention", "Capture", "ExecutionPath", "LayerCapture",
    "PathUnavailable", "UpdateAttention", "capture", "decoded_capture", "on_device", "reencode", "stream_activations",
    "summarise_head", "to_numpy",
]
