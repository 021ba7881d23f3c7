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
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

#: log of the smallest positive float64 (subnormal): exp(-x) is exactly 0 beyond this.
FLOAT64_UNDERFLOW = 745.2
FLOAT32_UNDERFLOW = 103.98
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
        if not 0 < self.beta <= 1e250:
            raise ValueError(f"beta must lie in (0, 1e250], got {self.beta}")
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
