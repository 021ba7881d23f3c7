"""What a capture keeps of each layer, declared by whoever reads it: as ``run_with_cache(names_filter=...)`` keeps
the activations its caller names, :func:`analysis.capture.capture` keeps the parts of each layer a :class:`Keep`
names. The verification declares what it reads (:func:`analysis.verify.reads`); reports and views read everything.

The parts that can be left out are the ones that grow with the points: an attention head's point x centroid scores
and pattern (``n k`` numbers per layer: 5 GB at a million points, ten clusters, ten iterations), a query's chosen
key and observed leak, and a one-hot ``Y`` as an ``n x k`` matrix (held as its labels instead). What every check
needs (the decoded states, each head's certificate: margins and leak bounds) is always kept.

A lean capture can still keep those parts for a bounded ``sample`` of points (:attr:`Keep.sample`, chosen before the
run by :func:`prior_sample`): their rows of every head and their residual, so that a report of a run at scale draws
them (:mod:`analysis.capture.sampled`) while the verification reads what it reads without them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from jaxtyping import Int


@dataclass(frozen=True)
class Keep:
    """Which per-point parts of each layer a capture keeps (the module docstring); everything by default."""

    #: An assign head's point x centroid scores and pattern (an attention sink's certificate reads the scores).
    assign_columns: bool = True
    #: An assign head's per-point readouts: the key each query chose, the attention mass observed off it.
    assign_readouts: bool = True
    #: An update head's scores and pattern (a swapped normalisation's check reads the pattern).
    update_columns: bool = True
    #: A ``Y`` that is exactly one-hot held as its labels (:class:`~circuits.onehot.OneHotStack`), not as ``n x k``.
    labels_only: bool = False
    #: Points (indices, ascending) whose per-point parts are kept whole however lean the rest: their query rows of
    #: each assign head, their key columns of each update head and their residual (:mod:`analysis.capture.sampled`).
    sample: tuple[int, ...] = ()

    @property
    def everything(self) -> bool:
        return self == EVERYTHING


#: What reports and views read.
EVERYTHING = Keep()


#: The seed of the sample a report of a run at scale draws (as :func:`analysis.views.point_sample`'s).
SAMPLE_SEED = 0


def prior_sample(n: int, size: int, seed: int = SAMPLE_SEED) -> Int[np.ndarray, " m"]:
    """``size`` of ``n`` points (all of them where ``n <= size``), ascending: a uniform random draw with ``seed``.

    Chosen before the run, from nothing but ``n``: which points a run's report will single out (ties, mismatches,
    the smallest margins: :func:`analysis.views.point_sample`) is known only once it has run, and a lean capture
    cannot go back for their rows."""
    if size < 1:
        raise ValueError(f"a sample needs at least one point, got {size}")
    if n <= size:
        return np.arange(n)
    return np.sort(np.random.default_rng(seed).choice(n, size=size, replace=False))
