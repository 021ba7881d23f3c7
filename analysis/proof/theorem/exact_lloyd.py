"""Lloyd's algorithm in exact rational arithmetic: the twin of :mod:`circuits.reference` that the theorem's
examples compare the hardmax circuit with, layer by layer.

The rules are the reference's, not restated here: the assignment is :func:`circuits.reference.assign` (argmin of
``V_j = |x - c_j|^2 + t_j``, ties to the lowest index through the tie-breaks ``t_j``) and the update is
:func:`circuits.reference.update` (means; an empty cluster keeps its centroid; label -1 counts nowhere), with the
damped and trimmed variants of :mod:`circuits.variants.damped` and :mod:`circuits.variants.trimmed`
(``DampedKMeans``: ``c + eta (mean - c)``; ``TrimmedKMeans``: a point with ``min_j V_j > theta`` is an outlier). What differs is the arithmetic: Fractions,
so distances compare exactly, and a point with two minimisers (which hardmax would split, outside the theorem)
is detected rather than broken by rounding.
"""

from __future__ import annotations

from fractions import Fraction

#: A point or centroid as exact coordinates.
Vector = list[Fraction]


def exact_assign(X: list[Vector], C: list[Vector], t: list[Fraction], theta: Fraction | None = None) -> list[int] | None:
    """Labels (``-1``: an outlier beyond ``theta``), or ``None`` when a point has two minimisers (a split point)."""
    labels = []
    for x in X:
        V = [sum(((a - b) ** 2 for a, b in zip(x, c)), Fraction(0)) + t[j] for j, c in enumerate(C)]
        best = min(V)
        if V.count(best) > 1 or best == theta:
            return None
        labels.append(-1 if theta is not None and best > theta else V.index(best))
    return labels


def exact_update(X: list[Vector], labels: list[int], C: list[Vector], eta: Fraction = Fraction(1)) -> list[Vector]:
    """Each centroid moves a fraction ``eta`` of the way to its members' mean; an empty cluster keeps its centroid."""
    new = []
    for j, c in enumerate(C):
        members = [x for x, lab in zip(X, labels) if lab == j]
        mean = [sum(col, Fraction(0)) / len(members) for col in zip(*members)] if members else list(c)
        new.append([a + eta * (m - a) for a, m in zip(c, mean)])
    return new


def exact_lloyd(X: list[Vector], C0: list[Vector], iterations: int, t: list[Fraction],
                eta: Fraction = Fraction(1), theta: Fraction | None = None):
    """``(centroids, assignments)`` recorded as :class:`circuits.reference` records them (``centroids[0]`` is the
    initialisation, ``assignments[t]`` the labels for ``centroids[t]``), or ``None`` if a point is ever split."""
    C = [list(c) for c in C0]
    cents, labs = [C], []
    for it in range(iterations + 1):
        labels = exact_assign(X, C, t, theta)
        if labels is None:
            return None
        labs.append(labels)
        if it < iterations:
            C = exact_update(X, labels, C, eta)
            cents.append(C)
    return cents, labs
