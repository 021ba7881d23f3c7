"""What every variant circuit shares: its spec (parameters, reference, input map, readout) and its assembly.

A variant is the Lloyd circuit with one recognisable change. :class:`VariantSpec` records what was changed and
which algorithm the result realises (a :mod:`circuits.variants.references` object), and how the variant reads
and writes the residual stream where that differs from Lloyd's (points projected onto the unit sphere before
encoding; labels read as the argmax of soft responsibilities; centroids read up to a positive scale).
:func:`assemble` turns a list of blocks into a :class:`~circuits.build.KMeansCircuit`, installing the variant's
permanent hooks: they are part of the architecture, like a choice of attention normalisation, and they survive
``run_with_cache`` and ``model.hooks()`` (which only remove non-permanent hooks).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable

import numpy as np
import torch
from jaxtyping import Float

from circuits.blocks import lloyd_schedule, unembed_matrix
from circuits.build import KMeansCircuit, build_model
from circuits.layout import ResidualLayout
from circuits.sharpness import Sharpness
from circuits.variants.references import Reference, labels_of, unit_rows
from circuits.weights import BlockWeights, MLPBuilder

#: Subspace holding |x|^2 on point tokens, for variants whose scores need the full squared distance.
NX = ("NX", 1)


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


def nx_units(mlp: MLPBuilder) -> None:
    """``NX <- |X|^2`` on every token (0 off points): gated units square exactly, ``relu(NX)`` erases the old value."""
    d = mlp.layout.d
    for m in range(d):
        mlp.unit(gate={("X", m): 1.0}, linear={("X", m): 1.0}, output={("NX", 0): 1.0})
        mlp.unit(gate={("X", m): -1.0}, linear={("X", m): -1.0}, output={("NX", 0): 1.0})
    mlp.unit(gate={("NX", 0): 1.0}, linear={("ONE", 0): 1.0}, output={("NX", 0): -1.0})


def unit_sharpness(sharpness: Sharpness | None, **changes) -> Sharpness:
    base = sharpness if sharpness is not None else Sharpness()
    return replace(base, **changes) if changes else base


def assemble(spec: VariantSpec, layout: ResidualLayout, blocks: list[BlockWeights], iterations: int,
             sharpness: Sharpness, dtype: torch.dtype = torch.float64, device: str = "cpu",
             hooks: dict[int, tuple[str, Callable, str]] | None = None, **cfg_overrides) -> KMeansCircuit:
    """Build the ``HookedTransformer`` of ``blocks`` (schedule ``U A ... U A``) and install permanent hooks.

    ``hooks[layer] = (hook name, function, description)``.
    """
    schedule = lloyd_schedule(iterations)
    if [b.kind for b in blocks] != schedule:
        raise ValueError(f"blocks {[b.kind for b in blocks]} do not follow the schedule {schedule}")
    model = build_model(blocks, unembed_matrix(layout), layout, dtype=dtype, device=device, **cfg_overrides)
    described, score_hooks = [], {}
    for layer, (name, fn, description) in sorted((hooks or {}).items()):
        model.add_hook(name, fn, is_permanent=True)
        described.append((name, description))
        score_hooks[layer] = fn
    return KMeansCircuit(model, layout, schedule, sharpness, iterations, spec.name, blocks, spec=spec, hooks=described,
                         score_hooks=score_hooks)
