"""Groups of identical query or key vectors, found exactly: the partitions the structured path computes attention
on (:mod:`circuits.structured.attention`).

Vectors are hashed by a fixed random projection, then every vector is compared with its group's representative
(a collision falls back to an exact column-wise ``unique``), so a grouping is a fact about the run's vectors, never
an assumption. Every tensor made here is on the device of the vectors grouped.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import numpy as np
import torch
from jaxtyping import Float, Int
from torch import Tensor

from circuits.structured.plans import CHUNK


@dataclass
class Groups:
    """A partition of token positions into groups of identical vectors."""

    representative: Int[Tensor, " m"]  # one position per group (the lowest)
    inverse: Int[Tensor, " pos"]  # group of each position
    counts: Int[Tensor, " m"]
    #: Every position its own group, groups in position order (so group tensors are position tensors).
    is_identity: bool = False
    #: What is derived from the groups once and read again (``weights`` by dtype, ``spread``); only read.
    _derived: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    @property
    def size(self) -> int:
        return int(self.representative.shape[0])

    def weights(self, dtype: torch.dtype) -> Tensor:
        """``counts`` as ``dtype`` (each group's multiplicity in the softmax), converted once: the forward and the
        capture summaries both read it. Only read: it is shared."""
        weights = self._derived.get(dtype)
        if weights is None:
            weights = self._derived[dtype] = self.counts.to(dtype)
        return weights

    @property
    def spread(self) -> Int[Tensor, " pos"]:
        """``representative[inverse]``: the representative position of each position's group. Only read."""
        spread = self._derived.get("spread")
        if spread is None:
            spread = self._derived["spread"] = self.representative[self.inverse]
        return spread

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``representative``, ``inverse`` and ``counts`` as numpy (on the CPU), made once. Only read."""
        arrays = self._derived.get("numpy")
        if arrays is None:
            arrays = self._derived["numpy"] = tuple(t.cpu().numpy() for t in (self.representative, self.inverse,
                                                                               self.counts))
        return arrays

    def as_hash_groups(self, hashes: Float[Tensor, " pos"]) -> "Groups | None":
        """What ``torch.unique(hashes, return_inverse=True, return_counts=True)`` groups as, when it is this partition
        of the positions (in the order of the hashes, which may differ from this one's); ``None`` when it is not.

        It is this partition when every position's hash equals its representative's and the representatives'
        hashes all differ: then they are the distinct values, ``unique`` numbers the groups in increasing hash order,
        and counts and lowest positions follow. False on any NaN (NaN equals nothing). Checked in numpy, a
        microsecond a step on CPU tensors where a torch operation costs several; other devices answer ``None``.
        """
        if not hashes.is_cpu or self.is_identity or hashes.shape != self.inverse.shape:
            return None
        h = hashes.numpy()
        representative, inverse, counts = self.arrays()
        distinct = h[representative]
        if not (h == distinct[inverse]).all():
            return None
        increasing = distinct[1:] > distinct[:-1]
        if increasing.all():
            return self
        order = np.argsort(distinct, kind="stable")
        ranked = distinct[order]
        if not (ranked[1:] > ranked[:-1]).all():  # two groups with one hash (or a NaN): unique would merge them
            return None
        rank = np.empty_like(order)
        rank[order] = np.arange(order.shape[0])
        groups = Groups(torch.from_numpy(representative[order]), torch.from_numpy(rank[inverse]),
                        torch.from_numpy(counts[order]))
        if "spread" in self._derived:  # the representative of each position's group: the same partition
            groups._derived["spread"] = self._derived["spread"]
        return groups


def identity_groups(pos: int, device: torch.device | str = "cpu") -> Groups:
    """Every position its own group (the side of a head that does not compress), on ``device``. Cached: its
    tensors are only read."""
    return _identity_groups(pos, torch.device(device))


@functools.lru_cache(maxsize=8)
def _identity_groups(pos: int, device: torch.device) -> Groups:
    every = torch.arange(pos, device=device)
    return Groups(every, every, torch.ones(pos, dtype=torch.long, device=device), is_identity=True)


@functools.lru_cache(maxsize=64)
def hash_direction(h: int, dtype: torch.dtype = torch.float64, device: torch.device | None = None
                    ) -> Float[Tensor, " h"]:
    """A fixed random projection of ``h`` features (seeded: runs are reproducible), drawn in float64 on the CPU
    (the same numbers whatever the device) and cast to ``dtype`` on ``device``. Cached: it is only read."""
    drawn = torch.randn(h, generator=torch.Generator().manual_seed(0), dtype=torch.float64, device="cpu")
    return drawn.to(device=device if device is not None else torch.device("cpu"), dtype=dtype)


def group_identical_columns(vectors: Float[Tensor, "h pos"], direction: Float[Tensor, " h"] | None = None,
                            hint: Groups | None = None) -> Groups:
    """Exact grouping of the identical columns of a feature-major ``(h, pos)`` tensor.

    Hash every column by a projection (random unless given), then verify every column against its group's
    representative and fall back to an exact ``unique`` on any collision. ``hint``: the groups of an earlier run
    of the same head (an assign head's keys group alike layer after layer), taken instead of ``torch.unique`` of
    the hashes only where :meth:`Groups.as_hash_groups` shows that ``unique`` would give exactly them; the columns
    are verified the same way either way.
    """
    device = vectors.device
    direction = (hash_direction(vectors.shape[0], vectors.dtype, device) if direction is None
                 else direction.to(device=device, dtype=vectors.dtype))
    groups = hash_groups(direction @ vectors, hint)
    if not groups.is_identity and not columns_match(vectors, groups.spread):
        # Hash collision between different vectors (or NaN): fall back to exact column-wise unique.
        _, inverse, counts = torch.unique(vectors, dim=1, return_inverse=True, return_counts=True)
        groups = _groups_of(inverse, counts)
    return groups


def hash_groups(hashes: Float[Tensor, " pos"], hint: Groups | None = None) -> Groups:
    """The positions grouped by equal ``hashes`` (``hint`` taken where :meth:`Groups.as_hash_groups` shows that
    ``torch.unique`` would give exactly it): a *candidate* grouping of the vectors hashed, which the caller verifies
    column by column (equal vectors have equal hashes, not conversely). All hashes distinct: every position its own
    group, which needs no check."""
    groups = hint.as_hash_groups(hashes) if hint is not None else None
    if groups is None:
        _, inverse, counts = torch.unique(hashes, return_inverse=True, return_counts=True)
        groups = _groups_of(inverse, counts)
    return groups


def _groups_of(inverse: Int[Tensor, " pos"], counts: Int[Tensor, " m"]) -> Groups:
    """The :class:`Groups` of ``unique``'s inverse and counts: each group's lowest position its representative."""
    pos, m, device = inverse.shape[0], counts.shape[0], inverse.device
    if m == pos:
        # All distinct: every position its own group, in position order.
        return identity_groups(pos, device)
    positions = identity_groups(pos, device).representative  # 0 .. pos-1, only read
    representative = torch.full((m,), pos, dtype=torch.long, device=device).scatter_reduce(
        0, inverse, positions, reduce="amin")
    return Groups(representative, inverse, counts)


def columns_match(vectors: Float[Tensor, "h pos"], source: Int[Tensor, " pos"], chunk: int | None = None) -> bool:
    """Whether every column ``j`` of ``vectors`` equals column ``source[j]``, bit for bit (False on any NaN, as
    ``torch.equal`` is). Compared ``chunk`` columns at a time (default :data:`circuits.structured.plans.CHUNK`):
    the gathered copy exists one chunk at a time, not for every position (an ``h x pos`` copy per head)."""
    pos = vectors.shape[1]
    chunk = CHUNK if chunk is None else chunk
    for start in range(0, pos, chunk):
        cols = slice(start, min(pos, start + chunk))
        part = vectors if pos <= chunk else vectors[:, cols]
        if not torch.equal(part, vectors.index_select(1, source[cols])):
            return False
    return True


def group_identical_rows(rows: Float[Tensor, "pos h"], direction: Float[Tensor, " h"] | None = None) -> Groups:
    """:func:`group_identical_columns` of ``rows.T``: exact grouping of identical rows."""
    return group_identical_columns(rows.T, direction)
