"""The safeguarded-swap circuit's exactness knobs, with their safe ranges (refused outside them).

All knobs act on unit-scaled coordinates (:mod:`circuits.encoding`: every point and centroid in the unit ball,
every squared distance in [0, 4]), so they mean the same for every problem.

* ``sharpness`` (:class:`circuits.sharpness.Sharpness`): ``beta``, ``tie_break``, ``mask`` and ``beta_update``
  act as in the Lloyd circuit for every assignment head (nearest and second-nearest centroid of each group),
  for the argmin over removal costs and for the argmax over the points' nearest distances (the point index
  ``i / n`` carries the tie-break there). Here the tie-breaks must be hard: ``beta * tie_break > 745.2``
  (float64's underflow) and ``beta_update >= 1600``; the rest of the ranges are :class:`Sharpness`'s.
* ``beta_select`` (default 1e200, safe range [1e20, 1e290]): sharpness of the candidate choice. A candidate's key
  scores ``-beta_select * objective / n``; a candidate whose (margin-adjusted) objective exceeds the best one's by
  more than ``745 / beta_select`` gets exactly zero weight. No large term is added to these scores, so the
  comparison is as exact as the objectives' floating-point values; the cap keeps the mask score
  ``16 * beta_select`` far inside float64.
* ``select_margin`` (default 1e-10, safe range [0, 1e-6]): the relative tie-order margin of
  :func:`circuits.swap.reference.select`. It should exceed the relative rounding of the circuit's objectives
  (about ``(d + log2 n) * 2**-53``), so that candidates with equal objectives are kept in tie order rather than by
  rounding; the objective is then never above Lloyd's by more than a factor ``1 + 2 * select_margin``.
* An absolute floor ``SELECT_FLOOR / beta_select * rank`` is added to each candidate's key as well, so that exact
  ties at objective 0 (every point on a centroid) also follow the tie order.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from circuits.sharpness import FLOAT64_UNDERFLOW, MAX_UNIT_SQ_DISTANCE, Sharpness

#: ``beta_select`` times the absolute tie-order floor: above float64's underflow, so the floor decides hard.
SELECT_FLOOR = 1000.0
BETA_SELECT_RANGE = (1e20, 1e290)
SELECT_MARGIN_MAX = 1e-6
#: Smallest ``beta_update`` accepted: exact means for up to a billion tokens (:mod:`circuits.sharpness`).
BETA_UPDATE_MIN = 1600.0


@dataclass(frozen=True)
class SwapKnobs:
    sharpness: Sharpness = field(default_factory=Sharpness)
    beta_select: float = 1e200
    select_margin: float = 1e-10

    def __post_init__(self) -> None:
        s = self.sharpness
        if not s.tie_break > 0 or not s.beta * s.tie_break > FLOAT64_UNDERFLOW:
            raise ValueError(f"beta * tie_break must exceed {FLOAT64_UNDERFLOW} (hard tie-breaks), got beta={s.beta:g},"
                             f" tie_break={s.tie_break:g}")
        if not s.beta_update >= BETA_UPDATE_MIN:
            raise ValueError(f"beta_update must be >= {BETA_UPDATE_MIN:g} (exact means), got {s.beta_update:g}")
        lo, hi = BETA_SELECT_RANGE
        if not (math.isfinite(self.beta_select) and lo <= self.beta_select <= hi):
            raise ValueError(f"beta_select must lie in [{lo:g}, {hi:g}], got {self.beta_select:g}")
        if not (math.isfinite(self.select_margin) and 0 <= self.select_margin <= SELECT_MARGIN_MAX):
            raise ValueError(f"select_margin must lie in [0, {SELECT_MARGIN_MAX:g}], got {self.select_margin:g}")

    @property
    def big(self) -> float:
        """The big-M score of the structural masks: ``beta * mask`` (beats every unit squared distance)."""
        return self.sharpness.beta * self.sharpness.mask

    @property
    def select_mask(self) -> float:
        """Score pushing non-candidate keys below every candidate key of the choice head."""
        return 4 * MAX_UNIT_SQ_DISTANCE * self.beta_select

    @property
    def select_floor(self) -> float:
        return SELECT_FLOOR / self.beta_select

    def to_dict(self) -> dict[str, float]:
        return {**self.sharpness.to_dict(), "beta_select": self.beta_select, "select_margin": self.select_margin}
