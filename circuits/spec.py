"""What a circuit computes, declared once per variant: :class:`VariantSpec`, and Lloyd's own, :data:`LLOYD`.

A circuit is Lloyd's construction, or Lloyd's with one recognisable change (a variant, :mod:`circuits.variants`).
Each variant is one :class:`VariantSpec`, declared once in its own module: its name and texts (the algorithm it
realises, the architectural alteration, what is exact), its parameters (:class:`Param`: default, type, bounds),
its builder and its reference algorithm (:class:`circuits.reference.Reference` or a subclass), how the circuit
reads and writes the residual stream where that differs from Lloyd's (points projected onto the unit sphere before
encoding; labels read as the argmax of soft responsibilities; centroids read up to a positive scale), and what the
prover and the sharpness bound cover. The same object, with parameters bound, is what a spec string such as
``soft:beta=100`` selects (:func:`circuits.variants.get_variant`) and, as built, what ``KMeansCircuit.spec`` holds.

Proof support is named here, not implemented: ``circuits/`` never imports ``analysis/``. A variant names an
:class:`ObligationSet` that :mod:`analysis.proof.registry` maps to its prover, or says why it has none
(:class:`NoObligations`).

:data:`LLOYD` is the exact construction itself: no change, Lloyd's reference. :mod:`circuits.build` builds it and
uses it as every circuit's default spec; :mod:`circuits.variants.lloyd` lists it in the registry with its builder.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import Enum
from collections.abc import Callable

import numpy as np
from jaxtyping import Float

from circuits.reference import Reference, labels_of, unit_rows


class ObligationSet(Enum):
    """The obligation sets of the prover (:mod:`analysis.proof.registry` maps each to its implementation)."""

    LLOYD = "lloyd"
    DAMPED = "damped"
    TRIMMED = "trimmed"


#: Why a soft variant has no obligations (after a few words of its own, :meth:`NoObligations.soft_by_design`).
SOFT_BY_DESIGN = ("soft by design, so there is no hardmax theorem to prove (its attention is a finite-temperature"
                  " softmax, transcendental, outside exact rational arithmetic); the circuit is held to its own"
                  " reference within float64 rounding by `kmeans-circuits cluster --variant {name}`, block by block")


@dataclass(frozen=True)
class NoObligations:
    """A variant without an obligation set: soft by design (``N/A``, no hardmax theorem to prove), or claimed exact
    but not covered by the prover (``NOT PROVEN``, which fails: exactness is a claim that needs a certificate)."""

    reason: str
    exact: bool

    @classmethod
    def soft_by_design(cls, name: str, what: str) -> NoObligations:
        """``what`` (the algorithm's softness in a few words), then the common reason for soft variants."""
        return cls(f"{what}; " + SOFT_BY_DESIGN.format(name=name), exact=False)


@dataclass(frozen=True)
class Param:
    """A tunable parameter: its default (whose type, ``int`` or ``float``, is the parameter's type) and the interval
    it must lie in, ``low .. high`` with each end open or closed (builders check again)."""

    name: str
    default: float | int
    low: float
    high: float
    low_inclusive: bool = True
    high_inclusive: bool = True

    @property
    def integral(self) -> bool:
        return isinstance(self.default, int)

    @property
    def interval(self) -> str:
        return (f"{'[' if self.low_inclusive else '('}{self.low:g}, {self.high:g}"
                f"{']' if self.high_inclusive else ')'}")

    def contains(self, value: float) -> bool:
        above = self.low <= value if self.low_inclusive else self.low < value
        below = value <= self.high if self.high_inclusive else value < self.high
        return above and below


#: ``(params with defaults filled in, iterations) -> message or None``: a limit that involves several parameters
#: and the number of iterations, which no per-parameter bound can express.
JointLimit = Callable[[dict, int], "str | None"]
#: ``(scale, tie_break_abs, problem) -> Reference``: the reference in the *user's* units for a problem whose encoder
#: scale is ``scale`` (unit distances are user distances divided by ``scale``); bound by the builder.
ReferenceFactory = Callable[[float, float, int], Reference]


@dataclass
class VariantSpec:
    """A variant, declared once; with its parameters bound by a spec; or as built, in ``KMeansCircuit.spec``.

    Declared: ``params`` is empty and ``reference_factory`` unset. ``with_params`` binds a spec's parameters
    (``build`` passes them to the builder); ``built`` records what a builder made: the parameters as built
    (distances unit-scaled, derived ones included, e.g. trimmed's ``theta``), the reference bound to them and, for
    a sink, its logit.
    """

    name: str
    #: The algorithm the circuit realises, the architectural change from Lloyd's, and what is exact (one line each).
    algorithm: str
    alteration: str
    exactness: str
    #: ``builder(d, k, iterations, sharpness=..., dtype=..., device=..., **params) -> KMeansCircuit``.
    builder: Callable | None = field(default=None, repr=False)
    #: The reference algorithm's class (the builder binds its parameters: ``reference_factory``).
    reference_class: type[Reference] = field(default=Reference, repr=False)
    parameters: tuple[Param, ...] = ()
    joint_limit: JointLimit | None = field(default=None, repr=False)
    #: What the prover covers: an obligation set, or why there is none.
    proof: ObligationSet | NoObligations = field(default=None, repr=False)
    #: The finite-sharpness bound (:mod:`analysis.proof.bound`) is derived for this circuit.
    bounded: bool = False
    #: The assign head is Lloyd's distance head (scores ``-beta |x - c_j|^2`` with the tie-break): its knobs are
    #: chosen from the data like Lloyd's. Other heads tie other quantities to beta and keep their defaults.
    distance_head: bool = False
    #: Exactness knobs (:class:`circuits.sharpness.Sharpness` fields) whose role this variant's own parameters take:
    #: the builder overrides them, so a command refuses them rather than ignoring them (soft's ``beta`` is a
    #: stiffness, not Lloyd's sharpness).
    replaced_knobs: tuple[str, ...] = ()
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
    #: Parameters bound: by a spec (``soft:beta=100``), or as built.
    params: dict[str, float] = field(default_factory=dict)
    reference_factory: ReferenceFactory | None = field(default=None, repr=False)
    #: Assignment scores may go to the attention sink (``use_attention_sinks``) with this logit (unit-scaled).
    sink_logit: float | None = None
    #: The exact construction itself, no alteration (:data:`LLOYD` only): its reference is Lloyd's, its problems
    #: are encoded with Lloyd's scaling, and reports name it "Lloyd's algorithm" rather than a variant.
    unaltered: bool = False

    @property
    def defaults(self) -> dict[str, float]:
        """``{parameter: default}`` in declaration order."""
        return {p.name: p.default for p in self.parameters}

    @property
    def spec(self) -> str:
        """The spec string that selects this variant with its bound parameters, e.g. ``gumbel:seed=4,gamma=1``."""
        if not self.params:
            return self.name
        # Integers in full: ``:g`` would print a seed of 2**40 as 1.09951e+12, which names another seed.
        return self.name + ":" + ",".join(f"{key}={value}" if isinstance(value, int) else f"{key}={value:g}"
                                          for key, value in self.params.items())

    def with_params(self, params: dict[str, float]) -> VariantSpec:
        return replace(self, params=dict(params)) if params else self

    def build(self, d: int, k: int, iterations: int, **kwargs):
        """The circuit of this variant with its bound parameters, the declared defaults for the others
        (``kwargs``: sharpness, dtype, device)."""
        return self.builder(d, k, iterations, **{**self.defaults, **self.params, **kwargs})

    def built(self, params: dict[str, float], reference_factory: ReferenceFactory,
              sink_logit: float | None = None) -> VariantSpec:
        """This variant as a builder made it: ``params`` as built and the reference bound to them."""
        return replace(self, params=params, reference_factory=reference_factory, sink_logit=sink_logit)

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
    algorithm="Lloyd's k-means (hard assignment, mean update)",
    alteration="none: the exact construction",
    exactness="exact",
    proof=ObligationSet.LLOYD,
    bounded=True,
    distance_head=True,
    unaltered=True,
    reference_factory=lambda scale, tie_break_abs, problem: Reference(tie_break=tie_break_abs),
)
