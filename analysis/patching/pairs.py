"""Clean/corrupted problem pairs for activation patching, and the one scaling both runs share.

Activation patching copies activations of a *clean* run into a *corrupted* run and asks how much of the clean
behaviour comes back. For that the two runs must be comparable coordinate by coordinate:

* **Same token positions.** Both runs use one :class:`~circuits.layout.SequenceLayout`, so position ``p`` is the
  same token (BOS, point ``i`` or centroid ``j``) in both. A corruption that adds a point (:func:`add_outlier`)
  would change ``n``; instead the clean run carries a *placeholder* in the outlier's slot: a copy of the BOS sink
  (``ONE`` and ``IS_BOS`` set, everything else 0). The construction makes such a token inert: point queries push
  every ``IS_BOS`` key ``beta * mask`` down, centroid queries score it 0 (its ``Y`` and ``ID`` are 0) against
  ``beta_update`` on members, and the BOS-attending queries split their weight between two identical sinks whose
  values are both 0. So the clean run with the placeholder computes exactly the clean problem, and patching the
  slot means "replace the outlier by nothing".
* **Same units.** Both runs are encoded with one :class:`~circuits.encoding.UnitScaling` (centred on the mean of
  the clean points, scaled so that every point and initial centroid of *both* runs lies in the unit ball).
  Encoding each run with its own scaling would make ``X[0] = 0.3`` mean different places in the two runs, and a
  patched coordinate would silently move.

Constructors (all deterministic; each returns a :class:`PatchingPair`): :func:`move_centroid`,
:func:`move_point`, :func:`swap_centroids`, :func:`add_outlier`; :data:`CORRUPTIONS` names them for the command
line. This module is numpy only, so the command line can validate a corruption before importing torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from collections.abc import Callable

import numpy as np
from jaxtyping import Float, Int

from circuits import reference


@dataclass(frozen=True)
class PatchingPair:
    """Two k-means problems whose runs are patched into each other.

    ``X_clean`` holds only the real clean points; when ``placeholder`` is set the clean run has an inert sink in
    point slot ``placeholder`` (see the module docstring), so both runs have ``n_points`` point tokens.
    """

    kind: str
    description: str
    X_clean: Float[np.ndarray, "n_clean d"]
    C0_clean: Float[np.ndarray, "k d"]
    X_corrupted: Float[np.ndarray, "n d"]
    C0_corrupted: Float[np.ndarray, "k d"]
    placeholder: int | None = None
    details: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        n_clean, n = len(self.X_clean), len(self.X_corrupted)
        expected = n - 1 if self.placeholder is not None else n
        if n_clean != expected:
            raise ValueError(f"clean run has {n_clean} points, corrupted {n}, placeholder {self.placeholder}")
        if self.placeholder is not None and not 0 <= self.placeholder < n:
            raise ValueError(f"placeholder slot {self.placeholder} outside {n} point slots")
        if self.C0_clean.shape != self.C0_corrupted.shape:
            raise ValueError(f"initial centroids differ in shape: {self.C0_clean.shape} vs {self.C0_corrupted.shape}")
        if self.X_clean.shape[1] != self.X_corrupted.shape[1] or self.C0_clean.shape[1] != self.X_clean.shape[1]:
            raise ValueError("clean and corrupted problems have different dimensions")
        self._check_range()

    def _check_range(self) -> None:
        """Both runs must be computable in float64 in the one scaling they share.

        Every point and initial centroid of either run lies within the shared radius ``R`` of the clean mean, so
        a squared distance is at most ``(2 R)^2`` and a k-means objective, a sum of ``n`` of them, at most
        ``n (2 R)^2``: that must stay below float64's largest value, else the reference's objectives and the
        circuit's ``N = |c|^2`` slots overflow and the run goes on with NaN centroids. A corruption farther out
        (``--to 1e300,...``, ``--outlier-distance 1e300``) is refused with the farthest position that fits.
        """
        fmax = float(np.finfo(np.float64).max)
        offset = self.X_clean.mean(axis=0)
        every = np.concatenate([self.X_clean, self.X_corrupted, self.C0_clean, self.C0_corrupted])
        with np.errstate(over="ignore", invalid="ignore"):
            spread = every - offset
            biggest = float(np.abs(spread).max())
            radius = biggest * float(np.linalg.norm(spread / biggest, axis=1).max()) if biggest > 0 else 0.0
        limit = 0.5 * float(np.sqrt(fmax / self.n_points))
        if not radius <= limit:
            raise ValueError(f"the corrupted problem reaches {radius:.3g} from the mean of the"
                             f" clean points; squared distances up to (2 R)^2 summed over {self.n_points} points"
                             f" overflow float64 (largest {fmax:.3g}) beyond R = {limit:.3g}: keep every point and"
                             f" centroid within that")

    @property
    def n_points(self) -> int:
        """Point slots of both runs (the placeholder included)."""
        return len(self.X_corrupted)

    @property
    def k(self) -> int:
        return self.C0_clean.shape[0]

    @property
    def d(self) -> int:
        return self.X_clean.shape[1]

    @property
    def compared_points(self) -> Int[np.ndarray, " m"]:
        """Point slots that hold a real point in both runs: label metrics are taken over these."""
        slots = np.arange(self.n_points)
        return slots if self.placeholder is None else slots[slots != self.placeholder]

    def clean_slots(self) -> Float[np.ndarray, "n d"]:
        """Coordinates per point slot of the clean run; the placeholder slot (if any) holds NaN."""
        out = np.full((self.n_points, self.d), np.nan)
        out[self.compared_points] = self.X_clean
        return out

    def shared_scale(self) -> tuple[Float[np.ndarray, " d"], float]:
        """``(offset, scale)`` of the one unit scaling both runs are encoded with.

        Centred on the mean of the clean points; ``scale`` is the largest distance from it of any point or
        initial centroid of either run (1 if they all coincide), so both runs lie in the unit ball.
        """
        offset = self.X_clean.mean(axis=0)
        every = np.concatenate([self.X_clean, self.X_corrupted, self.C0_clean, self.C0_corrupted])
        radius = float(np.linalg.norm(every - offset, axis=1).max())
        return offset, (radius if radius > 0 else 1.0)

    def to_dict(self) -> dict:
        return {"kind": self.kind, "description": self.description, "n_points": self.n_points, "k": self.k,
                "d": self.d, "placeholder": self.placeholder, "details": _jsonable(self.details)}


def _jsonable(obj):
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, (np.integer, np.floating)):
        return obj.item()
    if isinstance(obj, dict):
        return {k: _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    return obj


def _check(X, C0) -> tuple[np.ndarray, np.ndarray]:
    X, C0 = np.asarray(X, dtype=np.float64), np.asarray(C0, dtype=np.float64)
    if X.ndim != 2 or C0.ndim != 2 or X.shape[1] != C0.shape[1] or len(X) == 0 or len(C0) == 0:
        raise ValueError(f"need points (n, d) and initial centroids (k, d), got {X.shape} and {C0.shape}")
    if not (np.isfinite(X).all() and np.isfinite(C0).all()):
        raise ValueError("points and initial centroids must be finite")
    return X, C0


def _index(value: int, size: int, what: str) -> int:
    if not isinstance(value, (int, np.integer)) or not 0 <= value < size:
        raise ValueError(f"{what} {value!r} out of range: there are {size}")
    return int(value)


def _fmt(v: np.ndarray) -> str:
    return "(" + ", ".join(f"{x:.4g}" for x in v) + ")"


def move_centroid(X, C0, centroid: int = 0, to=None) -> PatchingPair:
    """Corrupt one initial centroid: ``centroid`` starts at ``to`` instead.

    Default ``to``: the data point farthest from every initial centroid (where a farthest-point initialisation
    would put a new centroid), so the corrupted run starts from a genuinely different, legal initialisation.
    """
    X, C0 = _check(X, C0)
    j = _index(centroid, len(C0), "centroid")
    if to is None:
        D = reference.sq_distances(X, C0)
        to = X[int(np.argmax(D.min(axis=1)))]
    to = np.asarray(to, dtype=np.float64)
    if to.shape != (X.shape[1],) or not np.isfinite(to).all():
        raise ValueError(f"the new position must be {X.shape[1]} finite numbers, got {to.shape}")
    if np.array_equal(to, C0[j]):
        raise ValueError(f"centroid {j} is already at {_fmt(to)}: moving it there corrupts nothing")
    C1 = C0.copy()
    C1[j] = to
    return PatchingPair("move-centroid", f"initial centroid {j} moved from {_fmt(C0[j])} to {_fmt(to)}",
                        X, C0, X.copy(), C1, details={"centroid": j, "from": C0[j], "to": to})


def move_point(X, C0, point: int | None = None, margin: float = 0.5) -> PatchingPair:
    """Corrupt one point: move it across the boundary between its nearest initial centroid ``a`` and the next ``b``.

    The point moves along ``u = (c_b - c_a) / |c_b - c_a|`` only, to signed distance ``margin * |c_b - c_a| / 2``
    past the bisector, so afterwards ``|x - c_a|^2 - |x - c_b|^2 = margin * |c_b - c_a|^2``: it is nearer ``c_b``
    by a clear gap (it may be nearer still to a third centroid; its first assignment changes either way).
    Default ``point``: the one nearest to a decision boundary (smallest gap between its two nearest initial
    centroids), skipping ties (gap below 1e-9 of the squared data scale), so the corruption is the smallest move.
    """
    X, C0 = _check(X, C0)
    if len(C0) < 2:
        raise ValueError("moving a point across a decision boundary needs k >= 2")
    if not 0 < margin <= 2:
        raise ValueError(f"margin must lie in (0, 2], got {margin}")
    D = reference.sq_distances(X, C0)
    gap = reference.gaps(D)
    if point is None:
        candidates = np.flatnonzero(gap > 1e-9 * reference.data_scale(X, C0) ** 2)
        if len(candidates) == 0:
            raise ValueError("every point is tied between its two nearest initial centroids; name one with point=")
        point = int(candidates[np.argmin(gap[candidates])])
    i = _index(point, len(X), "point")
    a, b = (int(v) for v in np.argsort(D[i], kind="stable")[:2])
    u = (C0[b] - C0[a]) / np.linalg.norm(C0[b] - C0[a])
    mid = (C0[a] + C0[b]) / 2
    target = margin * np.linalg.norm(C0[b] - C0[a]) / 2
    moved = X[i] + (target - (X[i] - mid) @ u) * u
    X1 = X.copy()
    X1[i] = moved
    new_label = int(reference.assign(moved[None], C0)[0])
    if new_label == a:
        raise ValueError(f"moving point {i} did not change its nearest initial centroid")
    return PatchingPair("move-point", f"point {i} moved from {_fmt(X[i])} to {_fmt(moved)}, across the boundary"
                        f" between initial centroids {a} and {b}", X, C0, X1, C0.copy(),
                        details={"point": i, "from": X[i], "to": moved, "nearest": a, "crossed_to": new_label})


def swap_centroids(X, C0, a: int = 0, b: int = 1) -> PatchingPair:
    """Corrupt the order of the initial centroids: ``a`` and ``b`` trade places.

    The corrupted run computes the same clustering with clusters ``a`` and ``b`` renamed, so every index-level
    readout (labels, the ``C`` of a centroid token) differs while the partition does not.
    """
    X, C0 = _check(X, C0)
    a, b = _index(a, len(C0), "centroid"), _index(b, len(C0), "centroid")
    if a == b:
        raise ValueError("swap needs two different centroids")
    if np.array_equal(C0[a], C0[b]):
        raise ValueError(f"initial centroids {a} and {b} coincide: swapping them corrupts nothing")
    C1 = C0.copy()
    C1[[a, b]] = C0[[b, a]]
    return PatchingPair("swap-centroids", f"initial centroids {a} and {b} swapped", X, C0, X.copy(), C1,
                        details={"a": a, "b": b})


def add_outlier(X, C0, at=None, distance: float = 3.0) -> PatchingPair:
    """Corrupt the data with one extra point, placed in the last point slot (the clean run holds a placeholder there).

    Default ``at``: the mean of the points plus ``distance`` times the offset of the point farthest from the mean,
    i.e. ``distance`` times farther out than any real point, on the data's own longest axis.
    """
    X, C0 = _check(X, C0)
    if at is None:
        if not distance > 1:
            raise ValueError(f"distance must exceed 1 (beyond the farthest point), got {distance}")
        mu = X.mean(axis=0)
        far = X[int(np.argmax(np.linalg.norm(X - mu, axis=1)))]
        if np.array_equal(far, mu):
            raise ValueError("all points coincide: there is no direction to put an outlier in; give at=")
        at = mu + distance * (far - mu)
    at = np.asarray(at, dtype=np.float64)
    if at.shape != (X.shape[1],) or not np.isfinite(at).all():
        raise ValueError(f"the outlier must be {X.shape[1]} finite numbers, got {at.shape}")
    X1 = np.concatenate([X, at[None]])
    return PatchingPair("add-outlier", f"outlier added at {_fmt(at)} (point slot {len(X)}; a placeholder sink in the"
                        " clean run)", X, C0, X1, C0.copy(), placeholder=len(X), details={"point": len(X), "at": at})


#: Corruption kinds by command-line name.
CORRUPTIONS: dict[str, Callable[..., PatchingPair]] = {
    "move-centroid": move_centroid,
    "move-point": move_point,
    "swap-centroids": swap_centroids,
    "add-outlier": add_outlier,
}


def make_pair(kind: str, X, C0, **options) -> PatchingPair:
    """The pair of corruption ``kind`` (a key of :data:`CORRUPTIONS`); ``options`` go to its constructor."""
    try:
        build = CORRUPTIONS[kind]
    except KeyError:
        raise ValueError(f"unknown corruption {kind!r}; choose one of {', '.join(CORRUPTIONS)}") from None
    return build(X, C0, **options)
