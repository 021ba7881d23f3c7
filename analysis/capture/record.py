"""The record of a circuit's run that the analyses read (:class:`Capture`): each layer's input and output decoded in
the named basis (:class:`LayerCapture`), the attention summaries and their certificates, which execution path ran
it (:class:`ExecutionPath`) and what of it was kept. :mod:`analysis.capture.run` makes it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

import numpy as np
from jaxtyping import Float, Int

from analysis.capture.keep import EVERYTHING, Keep
from analysis.capture.sampled import SampledRows
from analysis.capture.summaries import AssignAttention, UpdateAttention
from circuits.build import KMeansCircuit
from circuits.encoding import DecodedState, EncodedBatch


class ExecutionPath(str, Enum):
    """How a circuit is run. A ``str`` enum: compares and serialises as its name (``"dense"``)."""

    DENSE = "dense"  #: the HookedTransformer forward with TransformerLens hooks
    STRUCTURED = "structured"  #: circuits.structured: the same weights, attention on groups of identical q/k
    AUTO = "auto"  #: structured when the run is structured, else dense (the reason recorded)

    def __str__(self) -> str:
        return self.value


PATHS = tuple(p.value for p in ExecutionPath)


@dataclass
class LayerCapture:
    layer: int
    kind: str
    pre: DecodedState
    post: DecodedState
    attention: AssignAttention | UpdateAttention | None


@dataclass
class Capture:
    """Decoded states and attention summaries of one run of a circuit on a batch of problems."""

    circuit: KMeansCircuit
    encoded: EncodedBatch
    layers: list[LayerCapture]
    logits: Float[np.ndarray, "batch n k"]
    cache: object = field(default=None, repr=False)
    #: Which execution path ran: dense (the HookedTransformer forward) or structured (circuits.structured).
    path: ExecutionPath = ExecutionPath.DENSE
    #: Why the dense path ran when the structured one was asked for (``path="auto"``); empty otherwise.
    path_note: str = ""
    #: What the capture kept of each layer (:mod:`analysis.capture.keep`): everything, or what its reader declared
    #: (a lean capture: then no report or attention view can be drawn from it).
    kept: Keep = EVERYTHING
    #: Read from a user's run (:func:`analysis.pipeline.capture_from_cache`): ``cache`` is that run as it ran, hooks
    #: and all, so a re-run (:func:`analysis.capture.run.stream_activations`, which knows none of its hooks) is not
    #: that run.
    from_user_cache: bool = False
    #: ``{layer: query rows}`` whose attention pattern a hook of the user's run replaced (it is not the block's own
    #: function of its scores): :func:`analysis.capture.hooked.certify_hooked_patterns`.
    hooked_patterns: dict = field(default_factory=dict)
    #: A lean capture's rows of the points its :class:`Keep` sampled (:mod:`analysis.capture.sampled`), else ``None``.
    sampled: SampledRows | None = None
    #: The parameters whose bits in what ran differ from the weights as built (``KMeansCircuit.weight_edits``), read
    #: as the capture is made, after its run.
    weight_edits: list[str] = field(init=False, default_factory=list)
    #: The model's modules carrying hooks beyond the circuit's own (``KMeansCircuit.added_hooks``), read likewise.
    added_hooks: list[str] = field(init=False, default_factory=list)

    def __post_init__(self) -> None:
        self.weight_edits, self.added_hooks = self.circuit.weight_edits(), self.circuit.added_hooks()

    def centroids(self, t: int) -> Float[np.ndarray, "batch k d"]:
        """Centroids after ``t`` iterations, read from ``C`` after the ``t``-th update layer."""
        return self.layers[self.circuit.centroid_layers[t]].post.centroids

    def assignments(self, t: int) -> Int[np.ndarray, "batch n"]:
        """Labels with respect to the centroids of iteration ``t``, read from ``Y`` after the assign layer."""
        return self.layers[self.circuit.assignment_layers[t]].post.labels

    def assign_attention(self, t: int) -> AssignAttention:
        return self.layers[self.circuit.assignment_layers[t]].attention

    @property
    def final(self) -> DecodedState:
        return self.layers[-1].post

    @property
    def lean(self) -> bool:
        """Whether the capture left out any per-point part of a layer (:attr:`kept`)."""
        return not self.kept.everything
