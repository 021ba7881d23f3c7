"""Lloyd's circuit with distractors: components that carry weight and, on every input, no effect on the output.

A benchmark of circuit discovery needs edges that the weights connect but the task does not use; in Lloyd's
circuit every weight-connected edge whose source varies with the data matters for some input, so a method that
reads only the weights looks perfect. This variant computes exactly Lloyd's algorithm (same reference, same
hard attention) with four kinds of distractor added to its blocks:

* **echo, then erased**: the update head also writes the members' mean of ``X`` into a subspace ``ECHO``
  (nonzero at the centroid tokens, data-dependent); the next assign MLP erases it
  (``ECHO -= relu(ECHO) - relu(-ECHO)``) and nothing else reads it;
* **scratch, then erased**: the update MLP writes ``relu(C_stage)`` into ``SCRATCH``; the next assign MLP erases
  it (``SCRATCH >= 0``: ``SCRATCH -= relu(SCRATCH)``) and nothing else reads it;
* **a cancelling pair**: two identical assign-MLP units read ``C`` on the centroid tokens and write ``+`` and
  ``-`` the same amount into ``Y``, which the readout and every update head read: their sum is exactly 0 (each
  other unit writes exactly 0 into ``Y`` at a centroid token, so no rounding is left);
* **units that never fire**: an assign-MLP unit per coordinate with gate ``X_m - 2`` (at most -1 on the unit
  ball every encoder maps the points into) writing into ``Y``.

The edges these add (the update heads and MLPs into every later assign MLP, the input into every assign MLP)
carry weight, and the patched runs of the first two differ at the erasers' inputs, but removing any of them
changes no label and no centroid; :mod:`analysis.discovery.truth` proves it from the weights. With a zero
ablation the never-firing units lose their ``-2`` (it comes from the input's ``ONE``) and do fire: that edge is
inert for ``resample`` and ``mean`` only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from circuits.blocks import ASSIGN, UPDATE, assign_head, assign_mlp, update_head, update_mlp
from circuits.layout import ResidualLayout
from circuits.reference import Reference
from circuits.sharpness import Sharpness
from circuits.spec import NoObligations, VariantSpec
from circuits.variants.base import assemble, unit_sharpness
from circuits.weights import BlockWeights

if TYPE_CHECKING:
    import torch

    from circuits.build import KMeansCircuit


def distractor_layout(d: int, k: int) -> ResidualLayout:
    return ResidualLayout(d, k, extra=(("ECHO", d), ("SCRATCH", d)))


def build_distractor_circuit(d: int, k: int, iterations: int = 10, sharpness: Sharpness | None = None,
                             dtype: torch.dtype | None = None, device: str = "cpu") -> KMeansCircuit:
    """Lloyd's circuit with the distractors of the module docstring."""
    sharp = unit_sharpness(sharpness)
    layout = distractor_layout(d, k)
    head = update_head(layout, sharp)
    mlp = update_mlp(layout)
    for m in range(d):
        head.ov({("X", m): 1.0}, {("ECHO", m): 1.0})
        mlp.unit(gate={("C_stage", m): 1.0}, linear={("ONE", 0): 1.0}, output={("SCRATCH", m): 1.0})
    update = BlockWeights(UPDATE, head.build(), mlp.build(), notes={"beta_update": sharp.beta_update})
    erase = assign_mlp(layout)
    for m in range(d):
        erase.unit(gate={("ECHO", m): 1.0}, linear={("ONE", 0): 1.0}, output={("ECHO", m): -1.0})
        erase.unit(gate={("ECHO", m): -1.0}, linear={("ONE", 0): 1.0}, output={("ECHO", m): 1.0})
        erase.unit(gate={("SCRATCH", m): 1.0}, linear={("ONE", 0): 1.0}, output={("SCRATCH", m): -1.0})
        erase.unit(gate={("X", m): 1.0, ("ONE", 0): -2.0}, linear={("ONE", 0): 1.0}, output={("Y", m % k): 1.0})
    for sign in (1.0, -1.0):
        erase.unit(gate={("C", 0): 1.0}, linear={("IS_CENTROID", 0): 1.0}, output={("Y", 0): sign})
    assign = BlockWeights(ASSIGN, assign_head(layout, sharp).build(), erase.build(),
                          notes={"beta": sharp.beta, "mask": sharp.mask, "tie_break": sharp.tie_break})

    def reference(scale: float, tie_break_abs: float, problem: int = 0) -> Reference:
        return Reference(tie_break=tie_break_abs)

    spec = DISTRACTOR.built({}, reference)
    return assemble(spec, layout, [update, assign] * (iterations + 1), iterations, sharp, dtype=dtype,
                    device=device)


DISTRACTOR = VariantSpec(
    name="distractor",
    algorithm="Lloyd's k-means (hard assignment, mean update)",
    alteration="distractors with weight but no effect: an echo of the members' mean and a scratch copy of the"
               " staged centroid, each erased by the next assign MLP; a cancelling unit pair and units that never"
               " fire writing into Y",
    exactness="exact (hard attention, float64), as Lloyd's circuit",
    builder=build_distractor_circuit,
    proof=NoObligations("its distractor units are outside Lloyd's obligation set (the assign MLP writes Y from C"
                        " and X, the blocks write subspaces Lloyd's spec does not name); the verifier checks it"
                        " against Lloyd's reference run by run", exact=True),
    distance_head=True,
)
