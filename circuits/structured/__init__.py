"""A structured execution path: the same HookedTransformer weights, attention in O(n k d) instead of O(n^2).

Dense attention scores every query against every key: ``(n + k + 1)^2`` per layer. In the constructed circuits
most of those scores are repeats. In an assign head every point *key* is the same vector (a point has no ``C``,
``N`` or ``ID``, so its key is just the mask term); in an update head every point *query* is the same vector (it
only asks for the sink), and points with the same assignment have the same key. Identical queries give identical
attention rows; identical keys give identical scores, so a group of ``c`` equal keys enters the softmax as one
score with multiplicity ``c`` and contributes ``p * (sum of the group's values)``.

This package computes attention on those groups — an exact rewriting, nothing is dropped: each score that the
dense path would compute is computed once per (query group, key group) pair and used with its multiplicity. The
groups are found on the actual projected ``q`` and ``k`` vectors of the run (hash by a projection, then *verified*
vector by vector for exact equality), so the rewriting holds for the weights and token flags at hand and no
assumption about the construction is trusted. A head run again (a later iteration) starts from its last grouping,
taken only where ``unique`` of this run's hashes would give exactly it, and verified the same way.

The weight matrices of the constructed circuits are almost all zeros; every linear map is applied to a
feature-major copy of the residual stream (``d_model x pos``) and only the residual rows it writes are computed
and updated. Exactly-zero terms change no sum, so the only difference from the dense forward is the order of
floating-point summation (relative 1e-16); the tests hold it to 1e-12 of the data scale.

When the groups are not few on at least one side — a trained model whose queries and keys all differ, say — the
cost would be quadratic again: :func:`structured_forward` refuses with :class:`StructuredPathUnavailable` and says
why, and the caller falls back to the dense forward. It also refuses configurations whose attention it does not
reproduce (causal masks, rotary or ALiBi positions, grouped-query attention, attention hooks without a grouped
counterpart). Attention sinks, qk-norm and the variants' score hooks (linear attention, sparsemax, Gumbel-max; see
:mod:`circuits.variants.attention`) are reproduced.

The package, in the order its modules build on each other: :mod:`~circuits.structured.plans` (each block's linear
maps restricted to what they read and write, and the feature-major stream they act on),
:mod:`~circuits.structured.groups` (identical vectors found exactly), :mod:`~circuits.structured.attention` (one
head on groups, whole or a chunk of positions at a time) and :mod:`~circuits.structured.forward` (the model, block
by block). What other modules use is imported here and listed in ``__all__``; the rest is the package's own.
"""

from circuits.structured.attention import (
    PAIR_BUDGET, STREAM_CHUNK, GroupedAttention, ScoreGroups, StructuredPathUnavailable, chunked_block,
    grouped_attention, pattern_of,
)
from circuits.structured.forward import (
    KEEP_ALL, LayerRecord, OwnedStreams, Recording, check_supported, feature_major_copies, forward_hook_counts,
    structured_forward,
)
from circuits.structured.groups import (
    Groups, columns_match, group_identical_columns, group_identical_rows, hash_groups, identity_groups,
)
from circuits.structured.plans import CHUNK, AttentionPlan, MLPPlan, RestrictedMap, SparseTerms, cached_plan

__all__ = [
    "CHUNK", "KEEP_ALL", "PAIR_BUDGET", "STREAM_CHUNK", "AttentionPlan", "GroupedAttention", "Groups",
    "LayerRecord", "MLPPlan", "OwnedStreams", "Recording", "RestrictedMap", "ScoreGroups", "SparseTerms",
    "StructuredPathUnavailable", "cached_plan", "check_supported", "chunked_block", "columns_match",
    "feature_major_copies", "forward_hook_counts", "group_identical_columns", "group_identical_rows",
    "grouped_attention", "hash_groups", "identity_groups", "pattern_of", "structured_forward",
]
