"""What a sharpness bound is made of: the problem it is evaluated on and the hard state it advances, its
per-layer records, the hard trajectory, and outward-rounded arithmetic.

Every evaluated bound passes through :func:`round_up` (a relative push of :data:`SLACK`, never below the smallest
positive float64); exponents are evaluated in log space (:func:`logsumexp`, rounded outward).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from jaxtyping import Float

#: float64's unit roundoff.
U = 2.0**-53
#: The smallest positive float64: no bound is reported below it.
TINY = 5e-324
#: Outward rounding applied to every evaluated bound.
SLACK = 1 + 1e-9


def round_up(x: float | np.ndarray):
    """Round a non-negative bound up, and never below the smallest positive float64."""
    return np.maximum(np.asarray(x, dtype=np.float64) * SLACK, TINY)


def round_up_scalar(x) -> float:
    """:func:`round_up` of one number, as a Python float (the same float64 product and maximum, without arrays:
    the per-centroid bounds evaluate thousands of them; NaN stays NaN as ``np.maximum`` keeps it)."""
    return max(float(x) * SLACK, TINY)


def gamma(m: int) -> float:
    """The classical bound ``m u / (1 - m u)`` on the relative rounding of ``m`` float64 operations."""
    return m * U / (1 - m * U)


def logsumexp(a: np.ndarray, axis: int = -1) -> np.ndarray | float:
    """``log sum exp`` along ``axis``, rounded outward."""
    top = np.maximum.reduce(a, axis=axis, keepdims=True)  # np.max's reduction, without its wrapper
    top = np.where(np.isfinite(top), top, 0.0)
    with np.errstate(under="ignore", over="ignore", divide="ignore"):
        out = np.log(np.sum(exp(a - top), axis=axis)) + np.squeeze(top, axis=axis)
    # Outward: a tiny relative and absolute push up covers the float evaluation of the sum.
    return out + 1e-12 * np.abs(out) + 1e-12


def logsumexp_vector(a: np.ndarray) -> float:
    """:func:`logsumexp` of a 1-D array, as a Python float: the same float64 operations in the same order (the
    maximum, the shifted ``exp``, one ``np.sum`` over the array, ``np.log``, the outward push), without the
    ``keepdims`` broadcasting that a 1-D call does not need."""
    top = np.max(a)
    if not np.isfinite(top):
        top = np.float64(0.0)
    with np.errstate(under="ignore", over="ignore"):
        return log_sum_shifted(exp(a - top), top)


def log_sum_shifted(shifted: np.ndarray, top: np.float64) -> float:
    """The end of :func:`logsumexp_vector`: ``shifted`` holds ``exp(a - top)`` (1-D, in ``a``'s order), ``top``
    the maximum of ``a`` (0 where that is not finite); ``log sum exp a``, pushed outward."""
    with np.errstate(divide="ignore"):
        out = np.log(np.sum(shifted)) + top
    return float(out + 1e-12 * np.abs(out) + 1e-12)


#: Below this, float64's ``exp`` is exactly +0: ``e^-746`` is under half the smallest subnormal (``2^-1075``, about
#: ``e^-745.13``), so it rounds to 0.
EXP_ZERO_BELOW = -746.0
#: Arrays from this size on may have :func:`exp` skip their underflowing elements.
_SKIP_FROM = 4096


def exp(a) -> np.ndarray | float:
    """``np.exp`` in float64, without underflow or overflow warnings: the same numbers.

    An element below :data:`EXP_ZERO_BELOW` is exactly +0, and is written so without calling ``exp``, whose
    underflow path is slow (10 ms against 4 ms for 786,432 elements here): a bound's exponents, ``beta`` in the
    10^15s times a gap, are mostly there. Where most elements are above it, every one goes to ``np.exp``, as the
    masking would cost more than it saves. ``exp`` is elementwise, so an element's value does not depend on which
    others are computed with it (tests/unit/test_prove_bound.py holds both ways to ``np.exp`` bit for bit)."""
    a = np.asarray(a, dtype=np.float64)
    with np.errstate(under="ignore", over="ignore"):
        if a.size < _SKIP_FROM:
            return np.exp(a)
        live = ~(a < EXP_ZERO_BELOW)  # NaN stays live: np.exp gives it back
        if 4 * np.count_nonzero(live) > a.size:
            return np.exp(a)
        out = np.zeros(a.shape)
        out[live] = np.exp(a[live])
        return out


@dataclass(frozen=True)
class BoundProblem:
    """What stays fixed along the bound: the unit-scaled points with their norms (rounded up) and largest
    coordinate, the tie-breaks, the knobs, the damped step ``eta`` and the sinks (``sink_terms``: the update heads'
    logit, or empty)."""

    X: np.ndarray
    t: np.ndarray
    beta: float
    beta_update: float
    mask: float
    eta: float
    sink: float | None
    sink_terms: np.ndarray
    r_x: float
    x_inf: np.ndarray


@dataclass
class HardState:
    """The hard trajectory at one iteration: centroids ``C``, their per-coordinate float error ``e``, and ``delta``,
    the bound on each soft centroid's distance from its hard one."""

    C: np.ndarray
    e: np.ndarray
    delta: np.ndarray


@dataclass
class LayerBound:
    """Bound for one layer. ``softmax_l1`` bounds ``sum_keys |softmax - hardmax|`` for every algorithmic query
    (point queries of an assign layer, centroid queries of an update layer)."""

    layer: int
    kind: str
    iteration: int
    softmax_l1: float
    log10_softmax_l1: float
    assignment_l1: float | None = None
    uncertified_labels: int | None = None
    centroid: float | None = None


@dataclass
class SharpnessBound:
    """Per-layer bounds and, per iteration ``t``, the bound on the centroid error in the user's units."""

    scale: float
    certified: bool
    layers: list[LayerBound]
    centroid_user: list[float]
    assumptions: str = ("real-arithmetic bound, valid for circuits whose obligations hold (kmeans-circuits prove);"
                        " float rounding inside the forward pass is covered by the verifier's tolerance, not here")
    notes: list[str] = field(default_factory=list)

    def iteration_bound(self, t: int) -> float:
        """Bound on ``max_j |c_circuit - c_hard|`` after ``t`` iterations, user units."""
        return self.centroid_user[t]

    def layer(self, layer: int) -> LayerBound:
        return next(lb for lb in self.layers if lb.layer == layer)


@dataclass
class HardTrajectory:
    """The hard circuit's trajectory in unit coordinates (float64, with its rounding bounds)."""

    centroids: list[Float[np.ndarray, "k d"]]
    labels: list[np.ndarray]
    certified: list[bool]


def format_bound(x: float | None) -> str:
    """Table text: ``0``, or ``<2.2e-308`` below float64's normal range (an outward-rounded subnormal, not a value)."""
    if x is None:
        return "n/a"
    if x == 0:
        return "0"
    if x < np.finfo(np.float64).tiny:
        return f"<{np.finfo(np.float64).tiny:.1e}"
    return f"{x:.1e}"
