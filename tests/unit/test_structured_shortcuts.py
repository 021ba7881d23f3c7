"""The shortcuts of the structured path against the straightforward computations they replace, bit for bit.

Each shortcut (a key grouping reused from an earlier layer, the assign certificate's sums with the exact steps in
numpy, plans scanned in numpy, a decoder that copies what an unchanged slot gives) must give the very bits of the
computation it replaces, for any input: these tests compute both and compare the bits (and layouts, which decide
the order of later sums).
"""

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from analysis.capture.summaries import _exp_nonzero, leak_sums
from circuits.encoding import StreamDecoder, decode, encode, read
from circuits.structured import Groups, group_identical_columns, structured_forward
from circuits.structured import AttentionPlan, MLPPlan, RestrictedMap

from conftest import lloyd_circuit

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal shapes, dtypes and bit patterns (NaN payloads and the sign of 0 included)."""
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


def unique_groups(vectors: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The straightforward grouping by hash (torch.unique, lowest position per group)."""
    from circuits.structured.groups import hash_direction

    pos = vectors.shape[1]
    _, inverse, counts = torch.unique(hash_direction(vectors.shape[0], vectors.dtype) @ vectors,
                                      return_inverse=True, return_counts=True)
    representative = torch.full((counts.shape[0],), pos, dtype=torch.long).scatter_reduce(
        0, inverse, torch.arange(pos), reduce="amin")
    return representative, inverse, counts


@st.composite
def columns(draw):
    """A few distinct column vectors (some with -0.0, NaN, inf), repeated in a random order."""
    h, pos = draw(st.integers(1, 5)), draw(st.integers(2, 40))
    distinct = draw(st.integers(1, min(pos, 8)))
    pool = st.sampled_from([0.0, -0.0, 1.0, -1.0, 0.5, 3.0, 1e300, float("inf"), float("nan")])
    values = torch.tensor([[draw(pool) for _ in range(distinct)] for _ in range(h)], dtype=torch.float64)
    which = torch.tensor(draw(st.lists(st.integers(0, distinct - 1), min_size=pos, max_size=pos)))
    return values[:, which]


@SETTINGS
@given(columns(), columns(), st.integers(0, 2**31 - 1))
def test_grouping_from_a_hint_is_the_grouping_without_it(vectors, other, seed):
    """A hint from other vectors, from the same vectors, or from the same partition in another order: the groups are
    always those of torch.unique of the hashes (or of the exact fallback), field by field."""
    plain = group_identical_columns(vectors)
    g = torch.Generator().manual_seed(seed)
    shuffled = None
    if not plain.is_identity:
        order = torch.randperm(plain.size, generator=g)  # the same partition, groups numbered in another order
        rank = torch.empty_like(order)
        rank[order] = torch.arange(plain.size)
        shuffled = Groups(plain.representative[order], rank[plain.inverse], plain.counts[order])
    hints = [group_identical_columns(other), plain, shuffled]
    for hint in hints:
        if hint is None:
            continue
        hinted = group_identical_columns(vectors, hint=hint)
        assert hinted.is_identity == plain.is_identity
        for name in ("representative", "inverse", "counts"):
            assert torch.equal(getattr(hinted, name), getattr(plain, name)), name
            assert getattr(hinted, name).dtype == torch.long


def test_a_hint_of_the_same_partition_is_taken_and_a_wrong_one_is_not():
    """The shortcut is taken (reordered where the hashes order the groups otherwise) and refused when it would be
    wrong: a test of the hint that always declined, or always accepted, fails here."""
    vectors = torch.tensor([[1.0, 2.0, 1.0, 3.0, 2.0, 1.0]])
    representative, inverse, counts = unique_groups(vectors)
    exact = Groups(representative, inverse, counts)
    assert exact.as_hash_groups(torch.tensor([5.0, 7.0, 5.0, 9.0, 7.0, 5.0])) is exact  # same order of hashes
    reordered = exact.as_hash_groups(torch.tensor([9.0, 5.0, 9.0, 7.0, 5.0, 9.0]))  # same partition, other order
    assert reordered is not None and reordered is not exact
    assert torch.equal(reordered.inverse, torch.tensor([2, 0, 2, 1, 0, 2]))
    assert torch.equal(reordered.representative, torch.tensor([1, 3, 0]))
    assert torch.equal(reordered.counts, torch.tensor([2, 1, 3]))
    assert exact.as_hash_groups(torch.tensor([5.0, 7.0, 5.0, 9.0, 7.0, 6.0])) is None  # another partition
    assert exact.as_hash_groups(torch.tensor([5.0, 7.0, 5.0, 7.0, 7.0, 5.0])) is None  # two groups, one hash
    assert exact.as_hash_groups(torch.tensor([5.0, 7.0, 5.0, float("nan"), 7.0, 5.0])) is None


def straightforward_leak_sums(S, P, top_score, others):
    S_t, P_t, others_t = torch.from_numpy(S), torch.from_numpy(P), torch.from_numpy(others)
    bound = (_exp_nonzero(S_t - torch.from_numpy(top_score)[:, None]) * others_t).sum(dim=-1)
    return bound.numpy(), (P_t * others_t).sum(dim=-1).numpy()


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("layout", ["F", "C", "strided"])
def test_leak_sums_are_the_straightforward_torch_sums_bit_for_bit(dtype, layout):
    """Shapes whose sizes leave every tail of a vectorised loop, scores far below the top (exp exactly 0), near
    the underflow, 0, NaN and infinities; key-major (as the forward makes), query-major and non-dense inputs."""
    rng = np.random.default_rng(0)
    special = np.array([0.0, -0.0, -1.0, -700.0, -745.1, -746.0, -999.9, -1000.0, -1000.1, np.finfo(dtype).min,
                        np.nan, -np.inf, np.inf, 5.0], dtype=dtype)
    for queries in (1, 2, 3, 7, 8, 9, 17, 205):
        for keys in (1, 2, 3, 5, 8, 13):
            S = rng.uniform(-1200, 0, size=(queries, keys)).astype(dtype)
            mask = rng.random(S.shape) < 0.3
            S[mask] = rng.choice(special, size=int(mask.sum()))
            P = rng.random((queries, keys)).astype(dtype)
            P[rng.random(P.shape) < 0.1] = np.nan
            if layout == "F":
                S, P = np.asfortranarray(S), np.asfortranarray(P)
            elif layout == "strided":
                S, P = np.repeat(S, 2, axis=0)[::2], np.repeat(P, 2, axis=0)[::2]
            top_score = S.max(axis=-1)
            others = np.empty_like(S)
            others[...] = rng.integers(0, 4, size=keys).astype(dtype)
            want = straightforward_leak_sums(S, P, top_score, others)
            for got, want in zip(leak_sums(S, P, top_score, others), want):
                assert same_bits(got, want), (queries, keys)


def straightforward_map(W, b=None, all_outputs=False):
    """RestrictedMap.of as it was written in torch alone (rows, inputs, W_T, b)."""
    W = W.detach()
    b = torch.zeros(W.shape[1], dtype=W.dtype) if b is None else b.detach()
    used = torch.ones(W.shape[1], dtype=torch.bool) if all_outputs else (W != 0).any(dim=0) | (b != 0)
    rows = torch.nonzero(used).flatten()
    bias = b[rows][:, None] if bool((b[rows] != 0).any()) else None
    read = torch.nonzero((W[:, rows] != 0).any(dim=1)).flatten()
    if read.numel() == 0:
        read = torch.zeros(1, dtype=torch.long)
    span = int(read[-1]) - int(read[0]) + 1
    inputs = slice(int(read[0]), int(read[-1]) + 1) if span <= 1.5 * read.numel() else read
    W_T = W[inputs][:, rows].T.contiguous()
    if rows.numel() and int(rows[-1]) - int(rows[0]) + 1 == rows.numel():
        rows = slice(int(rows[0]), int(rows[-1]) + 1)
    return rows, inputs, W_T, bias


def same_index(a, b) -> bool:
    if isinstance(a, slice) or isinstance(b, slice):
        return a == b
    return a.dtype == b.dtype and torch.equal(a, b)


def same_tensor(a, b) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return a.dtype == b.dtype and a.stride() == b.stride() and same_bits(a.numpy(), b.numpy())


@SETTINGS
@given(st.integers(1, 9), st.integers(1, 9), st.integers(0, 2**31 - 1), st.booleans(), st.booleans(),
       st.sampled_from([torch.float64, torch.float32]))
def test_restricted_maps_are_planned_as_the_torch_scans_plan_them(d_in, d_out, seed, with_bias, all_outputs, dtype):
    """Sparse weights with zero rows and columns, -0.0 (zero) and NaN (nonzero), with and without a bias."""
    g = torch.Generator().manual_seed(seed)
    W = torch.randn(d_in, d_out, generator=g, dtype=torch.float64)
    W[torch.rand(d_in, d_out, generator=g) < 0.6] = 0.0
    W[torch.rand(d_in, d_out, generator=g) < 0.1] = -0.0
    W[torch.rand(d_in, d_out, generator=g) < 0.05] = float("nan")
    b = None
    if with_bias:
        b = torch.randn(d_out, generator=g, dtype=torch.float64)
        b[torch.rand(d_out, generator=g) < 0.6] = 0.0
        b = b.to(dtype)
    W = W.to(dtype)
    plan = RestrictedMap.of(W, b, all_outputs)
    rows, inputs, W_T, bias = straightforward_map(W, b, all_outputs)
    assert same_index(plan.rows, rows) and same_index(plan.inputs, inputs)
    assert same_tensor(plan.W_T, W_T) and same_tensor(plan.b, bias)


def test_block_plans_of_a_circuit_match_the_torch_scans():
    """Every head and MLP of a Lloyd circuit (the shapes the forward runs)."""
    circuit = lloyd_circuit(3, 4, 2)
    for block in circuit.weights.plain().blocks:
        attn = block.attn
        plan = AttentionPlan.of(attn)
        W_qkv = torch.cat([attn.W_Q[0], attn.W_K[0], attn.W_V[0]], dim=1)
        b_qkv = torch.cat([attn.b_Q[0], attn.b_K[0], attn.b_V[0]])
        for got, want in ((plan.qkv, straightforward_map(W_qkv, b_qkv, True)),
                          (plan.out, straightforward_map(attn.W_O[0], attn.b_O))):
            assert same_index(got.rows, want[0]) and same_index(got.inputs, want[1])
            assert same_tensor(got.W_T, want[2]) and same_tensor(got.b, want[3])
        mlp = block.mlp
        units = torch.nonzero((mlp.W_out.detach() != 0).any(dim=1)).flatten()
        mlp_plan = MLPPlan.of(mlp)
        assert mlp_plan.d_mlp == units.numel()
        W = torch.cat([mlp.W_gate.detach()[:, units], mlp.W_in.detach()[:, units]], dim=1)
        assert same_tensor(mlp_plan.gate_linear.W_T, straightforward_map(W, None, True)[2])
        assert same_tensor(mlp_plan.out.W_T, straightforward_map(mlp.W_out.detach()[units], mlp.b_out)[2])


def test_stream_decoder_gives_each_layer_what_a_fresh_decode_gives():
    """Layer after layer (assign blocks leave C alone, update blocks Y): every array bit for bit, laid out alike, and
    owned or read-only (a point-sized array is shared with the previous state when its bits are the same, issue
    31's bounded memory, and then no state can write into it; centroid-sized arrays are never shared)."""
    from sklearn.datasets import make_blobs

    from circuits.initialisation import initial_centroids

    X, _ = make_blobs(60, n_features=3, centers=3, random_state=0)
    C0 = initial_centroids(X, 3, "random", 0)
    circuit = lloyd_circuit(3, 3, 3)
    encoded = encode(circuit.layout, X, C0)
    _, records = structured_forward(circuit.weights.plain(), encoded.resid, circuit.score_hooks)
    stream = StreamDecoder(circuit.layout, encoded.sequence, encoded.scaling)
    states = []
    reused = shares = 0
    for resid in [encoded.resid] + [r.resid_post for r in records]:
        got, want = stream(resid), decode(circuit.layout, resid, encoded.sequence, encoded.scaling)
        seq = encoded.sequence
        for name, slot, positions in (("assignments", "Y", seq.points), ("staged_assignments", "Y_stage", seq.points),
                                      ("unit_centroids", "C", seq.centroids)):
            raw = read(circuit.layout, resid, slot, positions)  # the one-slot reader the decoder's reads copy
            assert same_bits(getattr(want, name), raw) and getattr(want, name).strides == raw.strides, name
        for name, value in want.__dict__.items():
            mine = getattr(got, name)
            assert same_bits(mine, value) and mine.strides == value.strides, name
            shared = any(np.shares_memory(mine, getattr(earlier, name)) for earlier in states)
            assert not shared or (name in POINT_SIZED and not mine.flags.writeable), name
            if shared:
                shares += 1
        if states and same_bits(got.unit_centroids, states[-1].unit_centroids):
            reused += 1
        states.append(got)
    assert reused >= 2  # the copying path ran
    assert shares >= 2  # and the sharing path


#: The decoded arrays of one row per point, which the stream decoder shares between states when their bits repeat.
POINT_SIZED = ("labels", "assignments", "staged_assignments")


@pytest.mark.parametrize("k", [1, 3])
def test_update_rows_are_the_straightforward_gather(k):
    """The centroid query rows over every key, gathered with np.take: the values, dtype and strides of
    np.array(rows[:, keys], order="C"), and owned (not a view of the grouped matrices)."""
    from analysis.capture.summaries import update_rows_grouped
    from circuits.structured import GroupedAttention, identity_groups

    X = np.arange(10.0).reshape(5, 2)
    encoded = encode(lloyd_circuit(2, k, 1).layout, X, X[:k])
    seq = encoded.sequence
    pos = seq.n_tokens
    inverse = torch.tensor([0] + [1, 2, 1, 1, 2] + list(range(3, 3 + k)))
    keys = Groups(torch.tensor([0, 1, 2] + list(range(6, 6 + k))), inverse, torch.bincount(inverse))
    rng = np.random.default_rng(1)
    for dtype in (torch.float64, torch.float32):
        S = torch.tensor(rng.normal(size=(keys.size, pos))).to(dtype).T  # key-major storage, as the forward makes
        P = torch.tensor(rng.random(size=(keys.size, pos))).to(dtype).T
        att = update_rows_grouped([GroupedAttention(identity_groups(pos), keys, S, P)], encoded)
        for got, matrix in ((att.scores[0], S), (att.pattern[0], P)):
            want = np.array(matrix.numpy()[seq.centroids][:, inverse.numpy()], dtype=np.float64, order="C")
            assert same_bits(got, want) and got.strides == want.strides
            assert not np.shares_memory(got, matrix.numpy())
