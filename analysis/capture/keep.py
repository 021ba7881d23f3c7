"""What a capture keeps of each layer, declared by whoever reads it: as ``run_with_cache(names_filter=...)`` keeps
the activations its caller names, :func:`analysis.capture.capture` keeps the parts of each layer a :class:`Keep`
names. The verification declares what it reads (:func:`analysis.verify.reads`); reports and views read everything.

The parts that can be left out are the ones that grow with the points: an attention head's point x centroid scores
and pattern (``n k`` numbers per layer: 5 GB at a million points, ten clusters, ten iterations), a query's chosen
key and observed leak, and a one-hot ``Y`` as an ``n x k`` matrix (held as its labels instead). What every check
needs (the decoded states, each head's certificate: margins and leak bounds) is always kept.
"""

from __future__ import annotations

from dataclasses import dataclass


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

    @property
    def everything(self) -> bool:
        return self == EVERYTHING


#: What reports and views read.
EVERYTHING = Keep()
