"""The finite-temperature sweep's numeric limits: which grids float64 can run (:func:`range_problem`)."""

from __future__ import annotations

import math

import numpy as np

#: float64's largest finite value and the smallest normal one.
FLOAT64_MAX = float(np.finfo(np.float64).max)
FLOAT64_TINY = float(np.finfo(np.float64).tiny)


def size_problem(d_max: int, n_max: int) -> str | None:
    """Why the largest cell's data, ``n`` points in ``d`` dimensions of float64, cannot be held, or ``None``.

    Its array alone is a lower bound on what a cell needs; beyond physical memory (or beyond what numpy can
    index, where the system does not say) numpy would fail with "Maximum allowed dimension exceeded" in a cell.
    """
    from analysis.data import physical_memory

    need = 8 * d_max * n_max
    have = physical_memory() or 2**63 - 1
    if need > have:
        return (f"d = {d_max} and n = {n_max} are too large: one problem's data alone (n d float64 numbers) needs"
                f" {need / 2**30:.3g} GiB, more than this machine's {have / 2**30:.3g} GiB of memory")
    return None


def range_problem(beta_max: float, scale_max: float, scale_min: float, d_max: int, n_max: int) -> str | None:
    """Why float64 (or memory, :func:`size_problem`) cannot run some cell of a grid with these extremes, or ``None``.

    The data lie in ``[0, scale]^d``, so a squared distance is at most ``d scale^2`` and the k-means objective,
    a sum of ``n`` of them, at most ``n d scale^2``: it must stay finite (else the gap is NaN). The soft
    algorithm's stiffness acts on user squared distances; the circuit's unit frame multiplies it by the squared
    encoder radius ``S^2 <= d scale^2``, and that unit stiffness must stay within the soft head's
    :data:`circuits.variants.soft.MAX_STIFFNESS` (its scores, up to 4 times it, must stay finite). At the small end, squared distances of order ``scale^2`` must be normal
    float64 numbers with all their digits, ``scale^2 >= tiny / eps``: below that they round to subnormals or 0
    and every objective (and gap) is 0, which would read as "the circuit is Lloyd's".
    """
    from circuits.variants.soft import MAX_STIFFNESS

    reason = size_problem(d_max, n_max)
    if reason:
        return reason
    eps = float(np.finfo(np.float64).eps)
    if math.log10(n_max * d_max) + 2 * math.log10(scale_max) >= math.log10(FLOAT64_MAX):
        return (f"scale {scale_max:g} is too large for float64: the k-means objective of {n_max} points in"
                f" [0, {scale_max:g}]^{d_max} reaches n d scale^2 = 1e{math.log10(n_max * d_max) + 2 * math.log10(scale_max):.1f}"
                f" > {FLOAT64_MAX:.3g}")
    peak = math.log10(beta_max) + math.log10(d_max) + 2 * math.log10(scale_max)
    if peak > math.log10(MAX_STIFFNESS):
        return (f"beta {beta_max:g} at scale {scale_max:g} (d = {d_max}) needs a unit-frame stiffness up to"
                f" beta d scale^2 = 1e{peak:.1f} > {MAX_STIFFNESS:g}, whose scores overflow float64; lower the betas"
                f" or the scale")
    if 2 * math.log10(scale_min) < math.log10(FLOAT64_TINY / eps):
        return (f"scale {scale_min:g} is too small for float64: squared distances of order scale^2 ="
                f" 1e{2 * math.log10(scale_min):.1f} fall below {FLOAT64_TINY / eps:.3g} (the smallest normal float64"
                f" over its precision), so objectives and gaps would round to 0")
    return None
