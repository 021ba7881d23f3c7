"""The rows a lean capture keeps of a sample of points, for the report of a run at scale.

A lean capture (:mod:`analysis.capture.keep`) leaves out what grows with the points: each assign head's point x
centroid scores and pattern, each update head's scores and pattern over every point key, the residual stream. A
report draws a few hundred points per figure, so a capture whose :class:`~analysis.capture.Keep` names a ``sample``
keeps exactly those points' parts, taken from the same grouped attention and the same residual as the run's own
certificates, as each block finishes:

* an assign head's query rows of the sampled points: scores, pattern, chosen key, observed leak (and sink mass),
  as :func:`~analysis.capture.summaries.summarise_assign_grouped` computes them for every point;
* an update head's centroid query rows over the keys of BOS, the sampled points and the centroids
  (:func:`~analysis.capture.summaries.update_rows_grouped` restricted to those columns);
* the residual of the same tokens entering the first block and after every block (the lean forward updates each
  block in place: there is no residual between its attention and its MLP to keep).

Each equals the full capture's rows for those points, bit for bit (tests/unit/test_capture_sampled.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
from jaxtyping import Float, Int

from analysis.capture.summaries import AssignAttention, UpdateAttention, summarise_assign_grouped, update_rows_grouped
from circuits.encoding import EncodedBatch
from circuits.structured import GroupedAttention, identity_groups


@dataclass
class SampledRows:
    """What a lean capture kept of its sampled points (module docstring)."""

    #: The sampled points, ascending indices into the problem's points.
    points: Int[np.ndarray, " m"]
    #: The token positions whose residual (and update key columns) are kept: BOS, the sampled points, the centroids.
    positions: Int[np.ndarray, " tokens"]
    #: ``{layer: attention rows}``: an assign head's :class:`AssignAttention` over the sampled points (``[batch, m,
    #: k]``; its margin and leak bound are the certificate's), an update head's :class:`UpdateAttention` whose
    #: ``scores`` and ``pattern`` are ``[batch, k, tokens]`` over :attr:`positions`.
    attention: dict[int, AssignAttention | UpdateAttention] = field(default_factory=dict)
    #: ``{hook name: residual [batch, tokens, d_model]}`` at ``resid_pre`` of block 0 and ``resid_post`` of each.
    resid: dict[str, Float[np.ndarray, "batch tokens d_model"]] = field(default_factory=dict)

    @classmethod
    def of(cls, encoded: EncodedBatch, points) -> SampledRows:
        seq = encoded.sequence
        points = np.asarray(points, dtype=np.int64)
        positions = np.concatenate([[seq.bos], seq.points.start + points, np.arange(seq.centroids.start,
                                                                                    seq.centroids.stop)])
        return cls(points, positions.astype(np.int64))

    @property
    def point_positions(self) -> Int[np.ndarray, " m"]:
        """Where the sampled points sit in :attr:`positions`."""
        return np.arange(1, 1 + len(self.points))

    def keep_resid(self, name: str, resid: Float[torch.Tensor, "batch pos d_model"]) -> None:
        """Keep the sampled tokens' rows of a residual stream (a gather: a copy of those rows alone)."""
        self.resid[name] = resid[:, torch.from_numpy(self.positions).to(resid.device)].detach().cpu().to(
            torch.float64).numpy()

    def keep_assign(self, layer: int, groups: list[GroupedAttention], encoded: EncodedBatch, with_sink: bool,
                    certificate: AssignAttention) -> None:
        """Keep the sampled query rows of an assign head (``groups``: its grouped attention, one per problem);
        ``certificate``: what the capture kept of every point (the rows' margins and leak bounds are its)."""
        rows = [_point_rows(g, encoded.sequence.points.start + self.points) for g in groups]
        att = summarise_assign_grouped(rows, encoded, with_sink, queries=slice(0, len(self.points)))
        att.margin, att.leak_bound = certificate.margin[:, self.points], certificate.leak_bound[:, self.points]
        self.attention[layer] = att

    def keep_update(self, layer: int, groups: list[GroupedAttention], encoded: EncodedBatch) -> None:
        """Keep an update head's centroid query rows over the sampled tokens' keys."""
        self.attention[layer] = update_rows_grouped(groups, encoded, keys=self.positions)


def _point_rows(g: GroupedAttention, positions: Int[np.ndarray, " m"]) -> GroupedAttention:
    """``g`` restricted to the query ``positions``, each its own group; a pattern the forward did not keep is made
    again from their scores as :func:`~circuits.structured.pattern_of` makes it (each query's softmax
    over the key groups, then each key's weight)."""
    rows = torch.from_numpy(positions) if g.queries.is_identity else g.queries.inverse[torch.from_numpy(positions)]
    rows = rows.to(g.scores.device)
    return GroupedAttention(identity_groups(len(positions), g.scores.device), g.keys, g.scores[rows],
                            None if g.pattern is None else g.pattern[rows],
                            chunk=0 if g.pattern is not None else max(g.chunk, len(positions)))
