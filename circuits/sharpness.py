"""Exactness knobs of the k-means circuit, with their safe ranges.

All knobs act on *unit-scaled* coordinates: the encoder centres the data and divides by the largest distance
of a point from the mean, so every point and every centroid lies in the unit ball and every squared distance
lies in [0, 4]. The knobs are therefore independent of the user's units; :meth:`Sharpness.in_user_units`
reports what they mean for a given problem.

Why each default is safe (float64):

* ``beta`` (assignment sharpness, default 1e14). A point's attention on its second-nearest centroid is
  ``exp(-beta * gap)`` times that on the nearest, where ``gap`` is the difference of the two squared distances.
  Below ``exp(-745)`` the weight underflows to exactly 0, so every point with ``gap > 745 / beta`` (7.5e-12 of the
  squared data scale) is assigned by an *exactly* one-hot pattern. The only upper limit is float64's range:
  scores reach ``beta * mask``, far below 1e308 for any beta up to 1e250.
* ``tie_break`` (default 1e-11). The key of centroid j carries an extra ``-beta * tie_break * j``, so when two
  centroids are equally near the lower index wins, as in scikit-learn and in our reference. It must exceed the
  rounding of the scores (about ``4 d eps`` = 6e-14 at d=64) and ``beta * tie_break`` must exceed ~745 for the
  tie-break itself to be hard. Price: a point whose true gap is below ``tie_break * (j2 - j1)`` goes to the lower
  index even when the higher one is nearer; the verifier reports such points as ties, not as errors.
* ``mask`` (big-M, default 16). Point and BOS keys get score ``-beta * mask`` from point queries, while every
  centroid scores at least ``-4 beta``; the masked keys lose by ``beta * (mask - 4)``. Needs ``mask > 4``.
* ``beta_update`` (update sharpness, default 4000). A centroid query scores ``beta_update`` on each of its
  members, ``beta_update / 2`` on its own key and 0 elsewhere; it averages its members, or keeps itself when
  it has none. Non-members and its own key weigh ``exp(-beta_update / 2)``, exactly 0 in float64 once
  ``beta_update / 2 > 745 + ln(n + k + 1)``; ``beta_update >= 1600`` covers a billion tokens.

float32 cannot hold ``beta * score`` to the precision these margins need (scores of 1e14 carry absolute
rounding of ~1e7): a float32 circuit is an explicit approximation and is reported as such.

Resolution, and knobs chosen from the data (:func:`for_problem`, what the command line and the estimator use
unless a knob is given). What float64 resolves depends on the magnitudes encoded, not on the unit ball alone: a
far outlier, or a far initial centroid, makes the scale ``s`` large and the rest of the data small in unit
coordinates. The derivation, in unit coordinates (``u = 2**-53``, the unit roundoff):

* A point query and a centroid key form the score ``2 x.c_j - |c_j|^2 - t j`` from ``d_model``-term products
  (query and key projections, then their dot product) and the ``N`` slot, itself a ``2d``-term MLP sum. Each
  step rounds relative to the sum of the absolute terms, so the computed score is off by at most
  ``gamma * m_ij`` with ``m_ij = 2 |x_i| |c_j| + |c_j|^2 + t j`` and ``gamma = 2 (3 d_model + 2 d + 8) u``
  (the standard ``n u`` dot-product bound per stage, doubled for safety; multiplying by ``beta`` adds ``u``).
  Two centroids whose squared distances to a point differ by less than ``gamma (m_ij1 + m_ij2)`` are ordered
  by rounding: that, and only that, is a tie of the circuit's computation (:mod:`analysis.verify` adds the
  rounding of the user-unit representation and of its own distance computation).
* An exact tie needs the tie-break to beat that rounding: ``t > gamma (m_ij1 + m_ij2)``. Two centroids tied at
  a point are equally far from it, so ``|c_j| <= |x_i| + dist(x_i, nearest centroid)``. After the first update
  every centroid is a mean of points, within ``R`` of the centre (``R`` the largest ``|x_i|``), or an initial
  centroid that never had members, which can be a point's nearest only if ``|c0_j| <= 3 R``; the first
  assignment is known exactly, and points that nearly tie there count with their own magnitudes. With ``Q``
  the largest of these, ``m <= 3 Q^2 + t k``, and :func:`for_problem` takes ``t = 24 gamma Q^2``. Only points count in ``Q``, so a
  far *initial centroid* that stays empty does not coarsen the tie-break. Nor does a far *point*: ``Q`` counts
  the bulk (all but the farthest 1 %, at least the farthest point; Lloyd's circuit also centres on the median,
  so the bulk sits near 0). A left-out point's exact ties are covered where they can be known, at the first
  assignment; a later exact tie there (two centroids exactly equidistant from an outlier) is split softly and
  the verifier says NOT VERIFIED. The alternative, a tie-break as coarse as the outlier's rounding, would
  swallow gaps that float64 resolves for every other point (measured: 440 wrong assignments on issue 12's
  example).
* ``beta = 8 * 745 / t`` makes every gap above ``9/8 t`` exactly hard (``beta * (gap - t) > 745``), so the
  circuit departs from Lloyd's only where a gap lies within about ``t * |j1 - j2|`` (user units ``t s^2``):
  the verifier reports any such point, and calls it a tie only where float64 cannot order the two distances.
  ``beta`` is capped at 1e250 (and ``t`` floored accordingly), far above what any data set in float64 needs.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from circuits.reference import sq_distances

#: log of the smallest positive float64 (subnormal): exp(-x) is exactly 0 beyond this.
FLOAT64_UNDERFLOW = 745.2
FLOAT32_UNDERFLOW = 103.98
#: Unit roundoff of float64 (half its machine epsilon).
UNIT_ROUNDOFF = 2.0**-53
#: Largest tie-break :func:`for_problem` chooses (unit-scaled squared distance).
TIE_BREAK_CAP = 1e-4
#: Largest beta the circuit accepts (scores beta * mask must stay far below float64's 1.8e308).
MAX_BETA = 1e250
#: Largest squared distance between two points of the unit ball.
MAX_UNIT_SQ_DISTANCE = 4.0


@dataclass(frozen=True)
class Sharpness:
    """The circuit's exactness knobs (see the module docstring for the safe ranges)."""

    beta: float = 1e14
    beta_update: float = 4000.0
    mask: float = 16.0
    tie_break: float = 1e-11

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if not math.isfinite(value):
                raise ValueError(f"{name} must be finite, got {value}")
        if not 0 < self.beta <= MAX_BETA:
            raise ValueError(f"beta must lie in (0, {MAX_BETA:g}], got {self.beta}")
        if not self.beta_update > 0:
            raise ValueError(f"beta_update must be positive, got {self.beta_update}")
        if not self.mask > MAX_UNIT_SQ_DISTANCE:
            raise ValueError(f"mask must exceed {MAX_UNIT_SQ_DISTANCE} (the largest unit squared distance), got {self.mask}")
        if not 0 <= self.tie_break < 1e-3:
            raise ValueError(f"tie_break must lie in [0, 1e-3), got {self.tie_break}")
        if self.beta * self.mask > 1e300:
            raise ValueError(f"beta * mask = {self.beta * self.mask:.3g} overflows float64 scores")

    def warnings(self, n_tokens: int | None = None) -> list[str]:
        """Knob settings that are legal but forfeit exactness, in words."""
        out = []
        if self.tie_break > 0 and self.beta * self.tie_break < FLOAT64_UNDERFLOW:
            out.append(
                f"beta * tie_break = {self.beta * self.tie_break:.3g} < {FLOAT64_UNDERFLOW}: ties are split softly,"
                " not given to the lowest index"
            )
        if self.beta * (self.mask - MAX_UNIT_SQ_DISTANCE) < FLOAT64_UNDERFLOW:
            out.append("beta * (mask - 4) is below the float64 underflow: masked keys can leak weight")
        needed = 2 * (FLOAT64_UNDERFLOW + math.log(n_tokens if n_tokens else 1e9))
        if self.beta_update < needed:
            out.append(
                f"beta_update = {self.beta_update:.3g} < {needed:.0f}: centroid updates are soft averages, not exact means"
            )
        return out

    def in_user_units(self, scale: float) -> dict[str, float]:
        """The knobs for data whose unit-scaling divided by ``scale``: beta acts on squared user distances / scale^2."""
        return {
            "beta_per_user_sq_distance": self.beta / scale**2,
            "tie_break_user_sq_distance": self.tie_break * scale**2,
            "exact_gap_threshold_user_sq_distance": FLOAT64_UNDERFLOW / self.beta * scale**2,
        }

    def to_dict(self) -> dict[str, float]:
        return asdict(self)


def score_rounding(d: int, d_model: int, unit_roundoff: float = UNIT_ROUNDOFF) -> float:
    """``gamma``: a computed assign score is within ``gamma * m_ij`` of its exact value (module docstring)."""
    return 2.0 * (3 * d_model + 2 * d + 8) * unit_roundoff


#: Share of the points, farthest from the centre first, that ``Q`` may leave out (see :func:`tie_magnitude`).
FAR_SHARE = 0.01


def tie_magnitude(unit_X: np.ndarray, unit_C0: np.ndarray, gamma: float) -> float:
    """``Q``: a bound on ``|c_j|`` for the centroids that can tie at a point (module docstring).

    After the first update a centroid is a mean of points (``|c| <= R``, all points lie within ``R`` of the centre)
    or an initial centroid that never had members, which can still be a point's nearest only if
    ``|c0_j| <= 3 R`` (farther than ``2 R`` from every point, it loses to any mean). The first assignment is known
    exactly: points whose two nearest initial centroids nearly tie count with their own magnitudes.

    ``R`` counts the bulk of the points: all but the farthest ``FAR_SHARE`` of them (at least the farthest one,
    never all). A far point would otherwise make the tie-break as coarse as its own rounding for everyone;
    its first-assignment ties are covered, and a later exact tie there is left to the verifier, which reports
    a soft or different assignment as a failure.
    """
    unit_X, unit_C0 = np.asarray(unit_X, dtype=np.float64), np.asarray(unit_C0, dtype=np.float64)
    if not unit_X.size:
        return 0.0
    radius = np.linalg.norm(unit_X, axis=-1)
    drop = min(len(radius) - 1, max(1, int(FAR_SHARE * len(radius))))
    R = float(np.sort(radius)[len(radius) - 1 - drop])
    c_norm = np.linalg.norm(unit_C0, axis=-1)
    reachable = c_norm[c_norm <= 3.0 * R]
    Q = max(R, float(reachable.max()) if reachable.size else 0.0)
    if unit_C0.shape[0] > 1:
        D = sq_distances(unit_X, unit_C0)
        two = np.argsort(D, axis=1, kind="stable")[:, :2]
        rows = np.arange(len(unit_X))
        own = np.maximum(radius, np.maximum(c_norm[two[:, 0]], c_norm[two[:, 1]]))
        near = D[rows, two[:, 1]] - D[rows, two[:, 0]] <= 48.0 * gamma * own**2
        if near.any():
            Q = max(Q, float(own[near].max()))
    return Q


@dataclass(frozen=True)
class Resolution:
    """How the tie-break and beta were chosen for a problem (unit-scaled squared distances)."""

    gamma: float
    Q: float
    tie_break: float
    beta: float
    #: Knobs the user gave, kept as given.
    given: tuple[str, ...] = ()

    def in_user_units(self, scale: float) -> dict[str, float]:
        return {
            "tie_break_user_sq_distance": self.tie_break * scale**2,
            "hard_gap_user_sq_distance": FLOAT64_UNDERFLOW / self.beta * scale**2,
            "rounding_per_unit_magnitude_user_sq_distance": self.gamma * scale**2,
        }

    def to_dict(self) -> dict:
        return {"gamma": self.gamma, "Q": self.Q, "tie_break": self.tie_break, "beta": self.beta,
                "given": list(self.given)}


def for_problem(unit_problems: list[tuple[np.ndarray, np.ndarray]], d: int, d_model: int,
                given: dict[str, float] | None = None, unit_roundoff: float = UNIT_ROUNDOFF,
                underflow: float = FLOAT64_UNDERFLOW) -> tuple[Sharpness, Resolution]:
    """Sharpness for the given unit-scaled problems ``[(X, C0), ...]`` (all run by one circuit).

    ``t = 24 gamma Q^2`` with the largest ``Q`` of the problems (every exact tie goes to the lower index), and
    ``beta = 8 * 745 / t`` with the smallest ``t`` (every gap the tie-break does not swallow is exactly hard).
    Knobs in ``given`` are kept as they are; the others are derived, or defaulted where nothing depends on data.
    ``unit_roundoff`` and ``underflow`` are the circuit dtype's (float32: ``2**-24`` and 103.98, an approximation).
    """
    given = dict(given or {})
    gamma = score_rounding(d, d_model, unit_roundoff)
    Q = max(tie_magnitude(X, C0, gamma) for X, C0 in unit_problems)
    # A floor keeps beta = 8 * 745 / t within MAX_BETA; it binds only for problems whose points all coincide.
    floor = 8 * underflow / MAX_BETA
    # The cap binds only in float32 (whose bound reaches ~2e-3 at Q = 3): a tie-break that coarse would distort
    # real gaps, and float32 is reported as an approximation whatever the knobs.
    t = given.get("tie_break", min(max(24.0 * gamma * Q**2, floor), TIE_BREAK_CAP))
    beta = given.get("beta", min(8 * underflow / max(t, floor), MAX_BETA))
    knobs = {**given, "tie_break": t, "beta": beta}
    return Sharpness(**knobs), Resolution(gamma, Q, t, beta, tuple(sorted(given)))
