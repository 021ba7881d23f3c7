"""Exact sums of float64 values by cluster, in integer arithmetic numpy can do: the means of the certified
reference run (:mod:`analysis.verify.fast.certified`) are exact, as :mod:`circuits.precision` defines them.

A finite float64 value with exponent field ``f`` and mantissa field ``q`` is ``s M 2^(f' - 1075)``, with ``M = 2^52
+ q`` and ``f' = f`` for a normal value, ``M = q`` and ``f' = 1`` for a subnormal one (or zero); its half ulp is
``2^(f' - 1076)``. Split ``M = hi 2^26 + lo`` (both below ``2^27``): a sum of fewer than ``2^26`` such halves is an
integer below ``2^53``, which float64 holds exactly, so ``np.bincount`` over (cluster, coordinate, ``f'``) bins adds
them without rounding, and counts the half ulps of each bin. Each bin's total is then shifted into one Python
integer per (cluster, coordinate): the sum is that integer times ``2^-1075`` (the half ulps' times ``2^-1076``).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np

#: The value of exponent bin ``f'`` is ``M 2^(f' + LOWEST)``; its half ulp ``2^(f' + HALF_ULP_LOWEST)``.
LOWEST = -1075
HALF_ULP_LOWEST = -1076
#: Bins per (cluster, coordinate): one per exponent field (0 is unused: subnormals share bin 1).
EXPONENTS = 2047
#: Values summed per pass (their temporaries stay small).
BLOCK = 2**18
#: At most this many values are summed per bin (each half of ``M`` is below ``2^27``; their sum must stay below
#: ``2^53``).
MOST_VALUES = 2**26


@dataclass(frozen=True)
class Split:
    """The signed integer halves of every value of an ``n x d`` array and its (coordinate, exponent) bin: what the
    sums read, made once for the points of a run."""

    hi: np.ndarray
    lo: np.ndarray
    #: ``m * EXPONENTS + f'`` of the value in coordinate ``m``.
    position: np.ndarray

    @classmethod
    def of(cls, V: np.ndarray) -> Split:
        V = np.ascontiguousarray(V, dtype=np.float64)
        if V.shape[0] >= MOST_VALUES:
            raise ValueError(f"exact sums of at most {MOST_VALUES - 1} points")
        bits = V.view(np.int64)
        field = (bits >> 52) & 0x7FF
        M = (bits & ((1 << 52) - 1)) | np.where(field > 0, 1 << 52, 0)
        M = np.where(bits < 0, -M, M)
        hi = M >> 26
        position = (np.maximum(field, 1) + np.arange(V.shape[1]) * EXPONENTS).astype(np.int32)
        return cls(hi.astype(np.float64), (M - (hi << 26)).astype(np.float64), position)


def _binned(split: Split, labels: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per (cluster, coordinate, exponent) bin: the sums of ``hi`` and ``lo`` and the count of values; label -1
    goes to a bin of its own, left out."""
    n, d = split.hi.shape
    size = (k + 1) * d * EXPONENTS
    hi, lo, count = np.zeros(size), np.zeros(size), np.zeros(size)
    for start in range(0, n, BLOCK):
        rows = slice(start, start + BLOCK)
        own = np.where(labels[rows] >= 0, labels[rows], k).astype(np.int64)
        index = (split.position[rows] + (own * (d * EXPONENTS))[:, None]).ravel()
        hi += np.bincount(index, split.hi[rows].ravel(), size)
        lo += np.bincount(index, split.lo[rows].ravel(), size)
        count += np.bincount(index, minlength=size)
    shape = (k + 1, d, EXPONENTS)
    return hi.reshape(shape)[:k], lo.reshape(shape)[:k], count.reshape(shape)[:k]


@dataclass(frozen=True)
class ClusterSums:
    """Exact per-cluster sums: ``values[j][m] * 2^LOWEST`` is the sum of coordinate ``m`` over cluster ``j``'s
    members, ``half_ulps[j][m] * 2^HALF_ULP_LOWEST`` the sum of their half ulps, ``counts[j]`` the members."""

    values: list[list[int]]
    half_ulps: list[list[int]]
    counts: np.ndarray

    def mean(self, j: int) -> np.ndarray:
        """Cluster ``j``'s exact mean (an object row of Fractions)."""
        m = int(self.counts[j])
        return np.array([Fraction(v, m) * Fraction(2) ** LOWEST for v in self.values[j]], dtype=object)

    def mean_half_ulp(self, j: int) -> np.ndarray:
        """Cluster ``j``'s members' mean half ulp per coordinate, exactly: how far its mean may move."""
        m = int(self.counts[j])
        return np.array([Fraction(v, m) * Fraction(2) ** HALF_ULP_LOWEST for v in self.half_ulps[j]], dtype=object)

    def rounded_means(self) -> np.ndarray:
        """Every non-empty cluster's mean correctly rounded to float64 (rows of empty clusters are NaN)."""
        k, d = len(self.values), len(self.values[0]) if self.values else 0
        out = np.full((k, d), np.nan)
        for j in np.flatnonzero(self.counts):
            m = int(self.counts[j])
            # Python's int / int is correctly rounded: the sum is values * 2^LOWEST, a negative power of two.
            out[j] = [v / (m << -LOWEST) for v in self.values[j]]
        return out


def cluster_sums(split: Split, labels: np.ndarray, k: int) -> ClusterSums:
    """The exact sums of the points (``split``) labelled ``j``, for every ``j < k``; label -1 counts nowhere."""
    labels = np.asarray(labels)
    hi, lo, count = _binned(split, labels, k)
    d = hi.shape[1]
    values = [[0] * d for _ in range(k)]
    half = [[0] * d for _ in range(k)]
    for j, m, e in zip(*np.nonzero(hi)):
        values[j][m] += int(hi[j, m, e]) << (26 + int(e))
    for j, m, e in zip(*np.nonzero(lo)):
        values[j][m] += int(lo[j, m, e]) << int(e)
    for j, m, e in zip(*np.nonzero(count)):
        half[j][m] += int(count[j, m, e]) << int(e)
    counts = np.bincount(labels[labels >= 0], minlength=k)[:k]
    return ClusterSums(values, half, counts)
