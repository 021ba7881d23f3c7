"""What a circuit computes and how to read and check it: the spec every :class:`~circuits.build.KMeansCircuit` has.

A circuit is Lloyd's construction, or Lloyd's with one recognisable change (a variant, :mod:`circuits.variants`).
:class:`VariantSpec` records what was changed and which algorithm the result realises (a reference object,
:class:`circuits.reference.Reference` or a subclass), and how the circuit reads and writes the residual stream
where that differs from Lloyd's (points projected onto the unit sphere before encoding; labels read as the argmax
of soft responsibilities; centroids read up to a positive scale). :data:`LLOYD` is the spec of the exact
construction itself: no change, Lloyd's reference.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable

import numpy as np
from jaxtyping import Float

from circuits.reference import Reference, labels_of, unit_rows


@dataclass
class VariantSpec:
    """A variant: its name and parameters (as built: distances unit-scaled), and how to check and read it.

    ``reference_factory(scale, tie_break_abs, problem)`` returns the reference algorithm in the *user's* units for
    a problem whose encoder scale is ``scale`` (unit distances are user distances divided by ``scale``).
    """

    name: str
    params: dict[str, float]
    algorithm: str
    alteration: str
    exactness: str
    reference_factory: Callable[[float, float, int], Reference] = field(repr=False, default=None)
    #: "sphere": the points (and initial centroids) are projected onto the unit sphere about the origin before
    #: encoding, with no centring or scaling; ``None``: the standard encoding.
    input_map: str | None = None
    #: Responsibilities are soft: labels are the argmax of a row that holds mass (not "a bit above 1/2").
    soft_assignments: bool = False
    #: ``C`` holds the centroid up to a positive scale; the readout normalises it.
    normalise_centroids: bool = False
    #: The update head's pattern is not a softmax of membership scores (a hook swaps the normalisation), so the
    #: membership certificate of the Lloyd update head does not apply; its pattern is checked against the
    #: reference's weights instead.
    swapped_update_normalisation: bool = False
    #: Assignment scores may go to the attention sink (``use_attention_sinks``) with this logit (unit-scaled).
    sink_logit: float | None = None

    def reference(self, scale: float, tie_break_abs: float, problem: int = 0) -> Reference:
        return self.reference_factory(scale, tie_break_abs, problem)

    def prepare(self, X: Float[np.ndarray, "batch n d"], C0: Float[np.ndarray, "batch k d"]):
        """The points and initial centroids the circuit actually receives, and the scaling to encode them with
        (``None``: the standard centring and scaling)."""
        if self.input_map is None:
            return X, C0, None
        if self.input_map == "sphere":
            from circuits.encoding import UnitScaling

            X = np.stack([unit_rows(x, "points") for x in X])
            C0 = np.stack([unit_rows(c, "initial centroids") for c in C0])
            batch, _, d = X.shape
            # Already in the unit ball: no centring (cosines are taken about the origin), no scaling.
            return X, C0, UnitScaling(np.zeros((batch, d)), np.ones(batch))
        raise ValueError(f"unknown input map {self.input_map!r}")

    def readout(self, state):
        """A :class:`~circuits.encoding.DecodedState` as the algorithm means it (``unit_*`` keep the raw reading)."""
        changes = {}
        if self.soft_assignments:
            changes["labels"] = np.stack([labels_of(Y) for Y in state.assignments])
        if self.normalise_centroids:
            C = state.centroids
            norms = np.linalg.norm(C, axis=-1, keepdims=True)
            with np.errstate(invalid="ignore", divide="ignore"):
                changes["centroids"] = np.where(norms > 0, C / norms, C)
        return replace(state, **changes) if changes else state




LLOYD = VariantSpec(
    name="lloyd",
    params={},
    algorithm="Lloyd's k-means (hard assignment, mean update)",
    alteration="none: the exact construction",
    exactness="exact",
    reference_factory=lambda scale, tie_break_abs, problem: Reference(tie_break=tie_break_abs),
)
