"""What a run's attention did, layer by layer: the summaries a :class:`~analysis.capture.Capture` keeps.

Beside :mod:`analysis.capture.run`, which runs the circuit and calls these from its hooks. An assign head keeps, per
point query, its point x centroid scores and pattern and a certificate (chosen key, margin, ``leak_bound``); an
update head keeps its centroid query rows and a certificate against the intended support (:func:`update_certificate`).
Both are computed from the dense attention (:func:`summarise_head`) or from the grouped attention of
:mod:`circuits.structured` (:func:`summarise_assign_grouped`, :func:`update_rows_grouped`), with the same values.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
from jaxtyping import Float, Int

from circuits.blocks import ASSIGN, UPDATE
from circuits.encoding import EncodedBatch
from circuits.structured import pattern_of


@dataclass
class AssignAttention:
    """Point queries of an assign head (batch-first numpy). A lean capture leaves ``scores``, ``pattern``,
    ``chosen`` and ``leak_observed`` out (``None``) where the verification does not read them
    (:data:`analysis.scheduler.AT_SCALE_POINTS`)."""

    scores: Float[np.ndarray, "batch n k"] | None
    pattern: Float[np.ndarray, "batch n k"] | None
    chosen: Int[np.ndarray, "batch n"] | None
    margin: Float[np.ndarray, "batch n"]
    leak_bound: Float[np.ndarray, "batch n"]
    leak_observed: Float[np.ndarray, "batch n"] | None
    #: Attention mass on the attention sink (``use_attention_sinks``): ``1 - sum(pattern)``; ``None`` without sinks.
    sink_mass: Float[np.ndarray, "batch n"] | None = None


@dataclass
class UpdateAttention:
    """Centroid queries of an update head over all keys, with the certificate against the intended support. A lean
    capture drops ``scores`` and ``pattern`` (``None``) once the certificate is computed, where the verification
    does not read them (not for a swapped normalisation, whose pattern is checked)."""

    scores: Float[np.ndarray, "batch k pos"] | None
    pattern: Float[np.ndarray, "batch k pos"] | None
    margin: Float[np.ndarray, "batch k"] = field(default=None)
    leak_bound: Float[np.ndarray, "batch k"] = field(default=None)
    leak_observed: Float[np.ndarray, "batch k"] = field(default=None)
    member_spread: Float[np.ndarray, "batch k"] = field(default=None)


def to_numpy(t: torch.Tensor) -> np.ndarray:
    """A float64 numpy *copy*: a view would keep the whole ``(n + k + 1)^2`` attention storage alive."""
    return np.array(t.detach().cpu().to(torch.float64).numpy(), copy=True)


def _summarise_assign(scores: torch.Tensor, pattern: torch.Tensor, encoded: EncodedBatch,
                      with_sink: bool = False) -> AssignAttention:
    seq = encoded.sequence
    s = scores[:, 0, seq.points, :]  # [batch, n, pos]
    p = pattern[:, 0, seq.points, :]
    best = s.topk(min(2, s.shape[-1]), dim=-1)
    top_score, top = best.values[..., 0], best.indices[..., 0]
    runner_up = best.values[..., 1] if s.shape[-1] > 1 else torch.full_like(top_score, -torch.inf)
    # Summed term by term rather than as 1 - p_top, which rounds to 0 or eps near a one-hot pattern.
    others = torch.exp(s - top_score[..., None]).scatter_(-1, top[..., None], 0.0)
    leak_bound = others.sum(dim=-1)
    del others
    leak_observed = p.clone().scatter_(-1, top[..., None], 0.0).sum(dim=-1)
    first_centroid = seq.centroids.start
    chosen = torch.where((top >= first_centroid) & (top < seq.centroids.stop), top - first_centroid, -1)
    return AssignAttention(
        scores=to_numpy(s[..., seq.centroids]),
        pattern=to_numpy(p[..., seq.centroids]),
        chosen=chosen.cpu().numpy(),
        margin=to_numpy(top_score - runner_up),
        leak_bound=to_numpy(leak_bound),
        leak_observed=to_numpy(leak_observed),
        sink_mass=to_numpy(1.0 - p.sum(dim=-1)) if with_sink else None,
    )


def _batch(arrays: list[np.ndarray]) -> np.ndarray:
    """Stack per-problem arrays; a batch of one is a view, not a copy (at a million points copies add up)."""
    return arrays[0][None] if len(arrays) == 1 else np.stack(arrays)


def _own_numpy(t: torch.Tensor) -> np.ndarray:
    """float64 numpy of a tensor that owns its storage (fresh results of indexing or arithmetic): no copy needed."""
    t = t.detach().cpu().to(torch.float64)
    owns = t.is_contiguous() and t.untyped_storage().nbytes() == t.numel() * t.element_size()
    return t.numpy() if owns else to_numpy(t)


def summarise_assign_grouped(groups, encoded: EncodedBatch, with_sink: bool = False,
                             columns: bool = True, queries: slice | None = None) -> AssignAttention:
    """The assign summary of :func:`_summarise_assign`, from grouped attention (one per problem).

    ``columns=False`` leaves out the point x centroid ``scores`` and ``pattern`` (``None``): a lean capture
    (:func:`analysis.capture.capture`) keeps only the certificate, which is computed the same way either way.
    ``queries``: the query positions summarised (by default every point's; a sample's rows,
    :mod:`analysis.capture.sampled`).

    Per query group: the best key group (lowest position among equal scores, as a dense argmax would pick), the
    runner-up (the best group again when it holds several equal keys), and the leak sums with multiplicities.
    The ``(query groups x key groups)`` matrices are tiny: the exact steps (max, comparisons, selections) run in
    numpy on views of them, and only ``exp`` and the sums run in torch, on the same tensors as the dense summary's
    (so their rounding is torch's).
    """
    seq = encoded.sequence
    fields = {name: [] for name in ("scores", "pattern", "chosen", "margin", "leak_bound", "leak_observed", "sink_mass")}
    for g in groups:
        S_t, P_t = g.scores.cpu(), pattern_of(g).cpu()
        S, P = S_t.numpy(), P_t.numpy()
        counts_t = g.keys.weights(S_t.dtype).cpu()  # converted once per grouping (the forward used it too)
        counts, rep = counts_t.numpy(), g.keys.arrays()[0]
        top_score_t, top_t = S_t.max(dim=-1)
        top_score, top = top_score_t.numpy(), top_t.numpy()
        at_top = S == top_score[:, None]
        tied = at_top.sum(axis=-1) > 1
        if tied.any():
            # Equal best scores in several key groups: the dense argmax takes the lowest position.
            top[tied] = np.where(at_top[tied], rep[None, :], np.iinfo(np.int64).max).argmin(axis=-1)
        every = np.arange(S.shape[0])
        others = np.empty_like(S, dtype=counts.dtype)  # S's layout (key-major): numpy reduces it along keys fastest
        others[...] = counts
        others[every, top] -= 1
        runner_up = np.where(others == 0, -np.inf, S).max(axis=-1)
        leak_bound, leak_observed = leak_sums(S, P, top_score, others)
        # Per key group, then per query: which centroid (or -1) the best key group is.
        starts = rep - seq.centroids.start
        chosen = np.where((starts >= 0) & (rep < seq.centroids.stop), starts, -1)[top]
        points = seq.points if queries is None else queries
        rows_t = points if g.queries.is_identity else g.queries.inverse[points].cpu()
        rows = rows_t if g.queries.is_identity else rows_t.numpy()
        if columns:
            fields["scores"].append(_key_columns(S[rows], g.keys, seq.centroids))
            fields["pattern"].append(_key_columns(P[rows], g.keys, seq.centroids))
        fields["chosen"].append(chosen[rows] if g.queries.is_identity else chosen[rows].copy())
        fields["margin"].append(np.array((top_score - runner_up)[rows], dtype=np.float64))
        fields["leak_bound"].append(np.array(leak_bound[rows], dtype=np.float64))
        fields["leak_observed"].append(np.array(leak_observed[rows], dtype=np.float64))
        if with_sink:
            fields["sink_mass"].append(_own_numpy((1.0 - P_t @ counts_t)[rows_t]))
    out = {name: _batch(values) if values else None for name, values in fields.items()}
    return AssignAttention(**out)


def assign_certificate_grouped(groups, encoded: EncodedBatch, rows_per_chunk: int = 1 << 14) -> AssignAttention:
    """What a lean capture keeps of an assign head without an attention sink: :func:`summarise_assign_grouped`'s
    ``margin`` and ``leak_bound``, bit for bit, and nothing else (``None``).

    Computed a chunk of point queries at a time, so the temporaries stay in cache, and without ``exp``: where every
    score of a query is either its top score or more than ``-EXP_ZERO_BELOW`` below it, each leak term is
    ``exp(0) = 1`` or exactly 0 times a key count, so the leak bound is the number of the query's other keys at its
    top score (a sum of small integers: exact in any order), and the runner-up is the top score again where there is
    one. A problem where that does not hold for every query (a non-finite top score, a term that is
    neither, a count sum float32 cannot hold exactly) is summarised by :func:`summarise_assign_grouped` instead.
    Tested against it in tests/unit/test_capture_fast_summaries.py.
    """
    seq = encoded.sequence
    margins, leaks = [], []
    for g in groups:
        S = g.scores.cpu().numpy()
        counts = np.ones(S.shape[1], dtype=np.int64) if g.keys.is_identity else g.keys.arrays()[2]
        exact_counts = int(counts.sum()) <= 2 ** (np.finfo(S.dtype).nmant + 1)  # every partial sum an exact integer
        rows = seq.points if g.queries.is_identity else slice(0, S.shape[0])
        found = _assign_certificate_rows(S, counts, rows, rows_per_chunk) if exact_counts else None
        if found is None:
            att = summarise_assign_grouped([g], encoded, columns=False)
            margins.append(att.margin[0])
            leaks.append(att.leak_bound[0])
            continue
        margin, leak = found
        if not g.queries.is_identity:
            point_groups = g.queries.inverse[seq.points].cpu().numpy()
            margin, leak = margin[point_groups], leak[point_groups]
        margins.append(margin)
        leaks.append(leak)
    return AssignAttention(scores=None, pattern=None, chosen=None, margin=_batch(margins), leak_bound=_batch(leaks),
                           leak_observed=None)


def _assign_certificate_rows(S: np.ndarray, counts: np.ndarray, rows: slice, rows_per_chunk: int
                             ) -> tuple[np.ndarray, np.ndarray] | None:
    """Margin and leak bound (float64) of the query rows ``rows`` of ``S`` (query x key group scores, key groups of
    ``counts`` keys), or ``None`` where :func:`assign_certificate_grouped`'s shortcut does not hold.

    Every score below a query's top ``t`` is at most the best of them, ``lo``, and rounding is monotone, so
    ``s - t < EXP_ZERO_BELOW`` holds for all of them where it holds for ``lo``: one comparison per query."""
    start, stop = rows.indices(S.shape[0])[:2]
    margin = np.empty(stop - start, dtype=np.float64)
    leak = np.empty(stop - start, dtype=np.float64)
    weights = counts.astype(np.float64)  # products and sums of small integers: exact
    lowest = S.dtype.type(-np.inf)
    for a in range(start, stop, rows_per_chunk):
        block = S[a:min(a + rows_per_chunk, stop)]
        top = block.max(axis=-1)
        if not np.isfinite(top).all():  # a NaN anywhere in a row propagates to its max
            return None
        at_top = block == top[:, None]
        below = np.where(at_top, lowest, block).max(axis=-1)
        if not (below - top < EXP_ZERO_BELOW).all():
            return None
        # Keys at the top score other than the chosen one (einsum: matmul has no fast loop for a bool matrix).
        ties = np.einsum("qg,g->q", at_top, weights) - 1
        part = slice(a - start, a - start + block.shape[0])
        margin[part] = top - np.where(ties > 0, top, below)
        leak[part] = ties
    if not leak.any():
        # No query has another key at its top score (the usual case): one read-only zero stands for them all,
        # instead of an n-sized array per assign layer.
        leak = np.broadcast_to(np.zeros((), dtype=np.float64), leak.shape)
    return margin, leak


def leak_sums(S: np.ndarray, P: np.ndarray, top_score: np.ndarray, others: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray]:
    """The assign certificate's sums per query row, bit for bit the straightforward torch form
    ``(_exp_nonzero(S_t - top_score_t[:, None]) * others_t).sum(-1)`` and ``(P_t * others_t).sum(-1)``.

    The exact elementwise steps (difference, selection, product: IEEE-rounded alike in numpy and torch) run in numpy,
    into arrays of ``S``'s layout, as torch lays out their results; ``exp`` and the sums run in torch on tensors of
    that same shape and layout, so every element meets the same exp code path (vectorised body or scalar tail) and
    every sum adds in the same order. Five torch operations fewer per assign layer. Inputs of any other layout
    (not dense, or ``S``, ``P`` and ``others`` laid out differently) take the straightforward form. Tested bit for
    bit against it in tests/unit/test_structured.py.
    """
    order = "F" if S.flags.f_contiguous else "C" if S.flags.c_contiguous else None
    if order is None or not (P.flags[f"{order}_CONTIGUOUS"] and others.flags[f"{order}_CONTIGUOUS"]):
        S_t, others_t = torch.from_numpy(S), torch.from_numpy(others)
        leak_bound = (_exp_nonzero(S_t - torch.from_numpy(top_score)[:, None]) * others_t).sum(dim=-1)
        return leak_bound.numpy(), (torch.from_numpy(P) * others_t).sum(dim=-1).numpy()
    with np.errstate(all="ignore"):  # inf - inf, inf * 0: NaN, silently, as in torch
        x = np.subtract(S, top_score[:, None], out=np.empty_like(S))
        dead = x < EXP_ZERO_BELOW  # exp is exactly 0 there: evaluated at 0 instead, and the result set to 0
        np.copyto(x, 0.0, where=dead)  # x[dead] = 0.0, without boolean indexing's gather
        terms = torch.exp(torch.from_numpy(x)).numpy()
        np.copyto(terms, 0.0, where=dead)
        terms *= others
        observed = np.multiply(P, others, out=np.empty_like(P))
    return torch.from_numpy(terms).sum(dim=-1).numpy(), torch.from_numpy(observed).sum(dim=-1).numpy()


#: ``exp(x)`` is exactly 0 below this in float64 (and float32): it underflows past the smallest subnormal at -745.2.
EXP_ZERO_BELOW = -1000.0


def _exp_nonzero(x: torch.Tensor) -> torch.Tensor:
    """``torch.exp(x)``, bit for bit, evaluated only where it can be nonzero (NaN included).

    Far below the top score (most of an assign head's scores) torch's exp takes a slow underflow path; there the
    result is exactly 0 (the exp of 0 computed there instead is discarded). Every element stays where it is and
    the result keeps ``x``'s layout, so the sums that read it add in the same order. Tested bit for bit against
    ``torch.exp`` in tests/unit/test_structured.py.
    """
    live = ~(x < EXP_ZERO_BELOW)
    return torch.where(live, torch.exp(torch.where(live, x, 0.0)), 0.0)


def _key_columns(matrix: np.ndarray, keys, positions: slice) -> np.ndarray:
    """Columns of the key ``positions`` of a (queries x key groups) ``matrix``, as an owned float64 array."""
    if keys.is_identity:
        return np.array(matrix[:, positions], dtype=np.float64)
    return np.ascontiguousarray(matrix[:, keys.arrays()[1][positions]], dtype=np.float64)


def update_rows_grouped(groups, encoded: EncodedBatch, keys: np.ndarray | None = None) -> UpdateAttention:
    """The update summary of :func:`summarise_head` (centroid query rows over every key), from grouped attention
    (one per problem): the rows gathered in numpy from views of the grouped matrices. ``keys``: the key positions
    gathered (by default every one; a sample's, :mod:`analysis.capture.sampled`)."""
    scores, pattern = [], []
    centroids = encoded.sequence.centroids
    wanted = keys
    for g in groups:
        queries = centroids if g.queries.is_identity else g.queries.inverse[centroids].cpu().numpy()
        if wanted is None:
            keys = slice(None) if g.keys.is_identity else g.keys.arrays()[1]
        else:
            keys = wanted if g.keys.is_identity else g.keys.arrays()[1][wanted]
        for matrix, out in ((g.scores, scores), (pattern_of(g), pattern)):
            rows = matrix.cpu().numpy()[queries]
            if isinstance(keys, slice):
                out.append(np.array(rows[:, keys], dtype=np.float64, order="C"))
            else:  # np.take makes the fresh C-ordered gather that np.array(rows[:, keys], order="C") makes, in one copy
                out.append(np.asarray(np.take(rows, keys, axis=1), dtype=np.float64, order="C"))
    return UpdateAttention(scores=_batch(scores), pattern=_batch(pattern))


def update_certificate(att: UpdateAttention, labels_pre: Int[np.ndarray, "batch n"], encoded: EncodedBatch) -> None:
    """Fill the certificate of an update head against its intended support (members, or itself if none).

    One centroid query row at a time: every reduction runs along a row's keys, so a row's certificate is the same
    numbers whether its neighbours' rows are computed beside it or not (numpy reduces each contiguous row alike),
    and the ``k x keys`` temporaries exist one row at a time (six of them at a million points were 0.5 GB).
    """
    seq = encoded.sequence
    batch, k, _ = att.scores.shape
    rows = []
    for b in range(batch):
        for j in range(k):
            rows.append(_update_row(att.scores[b, j], att.pattern[b, j], intended_keys(labels_pre[b], j, seq)))
    _fill_update_certificate(att, rows, batch, k)


def intended_keys(labels: Int[np.ndarray, " n"], j: int, seq) -> np.ndarray:
    """Query ``j``'s intended keys over every position: its members, or its own key where it has none."""
    intended = np.zeros(seq.n_tokens, dtype=bool)
    intended[seq.points] = labels == j
    intended[seq.centroids.start + j] = not intended.any()
    return intended


def _update_row(s: np.ndarray, p: np.ndarray, intended: np.ndarray) -> tuple:
    """One update row's certificate terms (inside min and max, outside max and leak sum, support size, observed
    leak) from its dense scores ``s`` and pattern ``p`` over every key."""
    outside_scores = np.where(intended, -np.inf, s)
    inside_min = np.where(intended, s, np.inf).min()
    with np.errstate(under="ignore"):
        outside = np.where(intended, 0.0, np.exp(outside_scores - inside_min))
    return (inside_min, np.where(intended, s, -np.inf).max(), outside_scores.max(), outside.sum(), intended.sum(),
            np.where(intended, 0.0, p).sum())


def _fill_update_certificate(att: UpdateAttention, rows: list[tuple], batch: int, k: int) -> None:
    inside_min, inside_max, outside_max, outside_sum, size, observed = (
        np.array(values).reshape(batch, k) for values in zip(*rows))
    att.margin = inside_min - outside_max
    att.leak_bound = outside_sum / size
    att.leak_observed = observed
    att.member_spread = inside_max - inside_min


def update_certificate_grouped(att: UpdateAttention, groups, labels_pre: Int[np.ndarray, "batch n"],
                               encoded: EncodedBatch) -> None:
    """:func:`update_certificate` of the rows :func:`update_rows_grouped` makes of ``groups`` (one per problem), bit
    for bit, computed per key group: ``att``'s own ``scores`` and ``pattern`` are not read (a lean capture has none).

    A key group's keys share one score and one pattern weight, so the minima, maxima and support sizes are those of
    the groups that hold intended (or other) keys, counted once per problem by label (one ``bincount`` over the
    points, not ``k`` passes over every key). The two sums are exact whatever their order where every outside term
    is 0 or 1 (``exp`` of a score below ``EXP_ZERO_BELOW`` or equal to the inside minimum: an integer count) and at
    most one outside key has a nonzero weight; a row where either fails is computed as :func:`update_certificate`
    computes it, on its dense row. Tested against it in tests/unit/test_capture_fast_summaries.py.
    """
    seq = encoded.sequence
    k = seq.k
    rows = []
    for b, g in enumerate(groups):
        # pattern_of: a lean block whose queries did not compress kept only its scores (chunked_block's
        # keep_pattern), which an update head's queries do not after a float32 hash collision sent one layer to
        # grouped_attention (it groups keys only); the pattern is made again from the scores, bit for bit.
        S, P = g.scores.cpu().numpy(), pattern_of(g).cpu().numpy()
        queries = np.arange(seq.centroids.start, seq.centroids.stop) if g.queries.is_identity else \
            g.queries.inverse[seq.centroids].cpu().numpy()
        if g.keys.is_identity:
            inverse, counts = np.arange(S.shape[1]), np.ones(S.shape[1], dtype=np.int64)
        else:
            _, inverse, counts = g.keys.arrays()
        size = counts.shape[0]
        members = np.bincount(inverse[seq.points] * (k + 1) + (labels_pre[b] + 1),
                              minlength=size * (k + 1)).reshape(size, k + 1)[:, 1:]
        for j in range(k):
            s, p = S[queries[j]].astype(np.float64), P[queries[j]].astype(np.float64)
            inside = members[:, j].copy()
            if not inside.any():
                inside[inverse[seq.centroids.start + j]] = 1
            row = _update_row_grouped(s, p, inside, counts - inside)
            if row is None:  # not decided by the shortcut: the dense row, as update_certificate reads it
                row = _update_row(s[inverse], p[inverse], intended_keys(labels_pre[b], j, seq))
            rows.append(row)
    _fill_update_certificate(att, rows, len(groups), k)


def _update_row_grouped(s: np.ndarray, p: np.ndarray, inside: np.ndarray, outside: np.ndarray) -> tuple | None:
    """:func:`_update_row` from per-key-group scores ``s``, weights ``p`` and counts of intended (``inside``) and
    other (``outside``) keys; ``None`` where its sums are not exact whatever their order (see
    :func:`update_certificate_grouped`) or a NaN is about."""
    if np.isnan(s).any() or not np.isfinite(p).all():
        return None
    held, other = inside > 0, outside > 0
    inside_min = s[held].min()
    with np.errstate(invalid="ignore"):  # inf - inf: NaN, which the test below sends to the dense row
        x = s[other] - inside_min
    ones = x == 0
    if not (ones | (x < EXP_ZERO_BELOW)).all():
        return None
    leaking = other & (p != 0)
    if outside[leaking].sum() > 1:
        return None
    observed = p[leaking][0] if leaking.any() else np.float64(0.0)
    outside_max = s[other].max() if other.any() else np.float64(-np.inf)
    return (inside_min, s[held].max(), outside_max, np.float64(outside[other][ones].sum()), inside.sum(), observed)


def summarise_head(kind: str, scores, pattern, encoded: EncodedBatch, with_sink: bool):
    """What a block's attention did (its scores and pattern), for the block's ``kind``; ``None`` for other kinds."""
    if kind == ASSIGN:
        return _summarise_assign(scores, pattern, encoded, with_sink)
    if kind == UPDATE:
        rows = encoded.sequence.centroids
        return UpdateAttention(scores=to_numpy(scores[:, 0, rows, :]), pattern=to_numpy(pattern[:, 0, rows, :]))
    return None
