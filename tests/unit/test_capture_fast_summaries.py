"""The capture's per-layer shortcuts at scale (issue 31) against the forms they replace, bit for bit.

* :func:`~analysis.capture.summaries.update_certificate_grouped` (an update head's certificate per key group)
  against :func:`~analysis.capture.summaries.update_certificate` of the dense rows
  :func:`~analysis.capture.summaries.update_rows_grouped` makes;
* :func:`~analysis.capture.summaries.assign_certificate_grouped` (a lean assign head's margin and leak bound, without
  ``exp``) against :func:`~analysis.capture.summaries.summarise_assign_grouped`;
* :class:`~circuits.encoding.StreamDecoder` with ``one_hot=True`` (a one-hot ``Y`` read as its labels, a chunk at a
  time) against the plain decoder followed by the exact one-hot check a lean capture made after it;
* a lean capture against a full one, layer by layer, on problems with a near tie, an empty cluster, float32, a
  batch of two and an attention sink.

The generated attention mixes scores that take each shortcut (terms exactly 0 or 1, one leaking key) with scores
that do not (the fallback), ties, -inf, NaN and empty clusters; spies check that both branches ran.
"""

from __future__ import annotations

import functools
from unittest import mock

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from analysis.capture import capture, summaries
from analysis.capture.summaries import (
    UpdateAttention,
    assign_certificate_grouped,
    summarise_assign_grouped,
    update_certificate,
    update_certificate_grouped,
    update_rows_grouped,
)
from analysis.pipeline import choose_sharpness, lloyd_scaling
from analysis.verify import reads
from circuits import encoding
from circuits.encoding import StreamDecoder, encode
from circuits.onehot import OneHotStack, one_hot
from circuits.structured import GroupedAttention, Groups, identity_groups, pattern_of
from circuits.variants import get_variant

from conftest import lloyd_circuit
from tests.unit.test_lean_verify import corner_problem

SETTINGS = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def same_bits(a, b) -> bool:
    """Equal shapes, dtypes and bit patterns (NaN payloads and the sign of 0 included)."""
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


def random_groups(rng, pos: int, identity: bool) -> Groups:
    """A random partition of ``pos`` positions (groups numbered in no particular order), or every position alone."""
    if identity:
        return identity_groups(pos)
    size = int(rng.integers(1, min(pos, 8) + 1))
    inverse = np.concatenate([rng.permutation(size), rng.integers(0, size, pos - size)])
    inverse = rng.permutation(inverse)  # every group nonempty
    representative = np.array([np.flatnonzero(inverse == g)[0] for g in range(size)])
    return Groups(torch.from_numpy(representative), torch.from_numpy(inverse), torch.from_numpy(np.bincount(inverse)))


def key_major(values: np.ndarray, dtype: torch.dtype) -> torch.Tensor:
    """A (query groups x key groups) matrix stored key-major, as the structured forward makes them."""
    return torch.from_numpy(values).to(dtype).T.contiguous().T


#: Scores far apart (the shortcuts' terms are exactly 0 or 1), near (they are not), ties, -inf and NaN.
FAR, NEAR, SPECIAL = [0.0, -1500.0, -3000.0, 2000.0], [0.0, -1.0, 0.5, -700.0], [-np.inf, np.inf, np.nan]


def draw_scores(rng, shape, mode: str) -> np.ndarray:
    """``far``: only far scores (the shortcuts decide); ``mixed``: with near ones; ``any``: with -inf, inf, NaN."""
    pool = FAR if mode == "far" else FAR + NEAR if mode == "mixed" else FAR + NEAR + SPECIAL
    weights = np.ones(len(pool))
    weights[len(FAR):len(FAR) + len(NEAR)] = 0.3
    weights[len(FAR) + len(NEAR):] = 0.02
    return rng.choice(pool, size=shape, p=weights / weights.sum())


def draw_pattern(rng, shape) -> np.ndarray:
    """Mostly exact zeros (a one-hot softmax), now and then a weight (one leaking key, or several)."""
    # 0.1, 0.2, 0.3: sums of three that depend on their order.
    return rng.choice([0.0, 1.0, 0.1, 0.2, 0.3, 1e-300], size=shape, p=[0.9, 0.02, 0.02, 0.02, 0.02, 0.02])


def draw_labels(rng, n: int, k: int) -> np.ndarray:
    """Labels in -1..k-1 from a random subset of the clusters (some clusters empty)."""
    used = rng.choice(np.arange(-1, k), size=int(rng.integers(1, k + 2)), replace=False)
    return rng.choice(used, size=n).astype(np.int64)


class Spy:
    """Counts the results of a function (``None`` or not), calling through."""

    def __init__(self, function):
        self.function, self.hits, self.misses = function, 0, 0

    def __call__(self, *args, **kwargs):
        result = self.function(*args, **kwargs)
        self.hits += result is not None
        self.misses += result is None
        return result


@functools.lru_cache(maxsize=8)
def layout_for(k: int):
    return lloyd_circuit(2, k, 1).layout


def encoded_for(n: int, k: int):
    """An encoding of n points and k centroids (the summaries read only its sequence layout)."""
    rng = np.random.default_rng(n * 10 + k)
    return encode(layout_for(k), rng.normal(size=(n, 2)), rng.normal(size=(k, 2)))


def grouped_problem(rng, n: int, k: int, batch: int, dtype: torch.dtype, mode: str):
    encoded = encoded_for(n, k)
    seq = encoded.sequence
    groups = []
    for _ in range(batch):
        queries = random_groups(rng, seq.n_tokens, identity=bool(rng.integers(0, 2)))
        keys = random_groups(rng, seq.n_tokens, identity=rng.random() < 0.15)
        shape = (queries.size, keys.size)
        groups.append(GroupedAttention(queries, keys, key_major(draw_scores(rng, shape, mode), dtype),
                                       key_major(draw_pattern(rng, shape), dtype)))
    return encoded, groups


PROBLEMS = dict(n=st.integers(1, 40), k=st.integers(1, 5), batch=st.integers(1, 2),
                dtype=st.sampled_from([torch.float64, torch.float32]), mode=st.sampled_from(["far", "mixed", "any"]),
                seed=st.integers(0, 2**32 - 1))


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # inf - inf, exp overflow: as the dense form meets them
@SETTINGS
@given(**PROBLEMS)
def test_grouped_update_certificate_is_the_dense_one(n, k, batch, dtype, mode, seed):
    rng = np.random.default_rng(seed)
    encoded, groups = grouped_problem(rng, n, k, batch, dtype, mode)
    labels = np.stack([draw_labels(rng, n, k) for _ in range(batch)])
    dense = update_rows_grouped(groups, encoded)
    update_certificate(dense, labels, encoded)
    fast = UpdateAttention(scores=None, pattern=None)
    update_certificate_grouped(fast, groups, labels, encoded)
    for name in ("margin", "leak_bound", "leak_observed", "member_spread"):
        assert same_bits(getattr(fast, name), getattr(dense, name)), name


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("spied, least", [("_update_row_grouped", 30), ("_assign_certificate_rows", 5)])
def test_generated_problems_take_both_branches(monkeypatch, spied, least):
    """The generated problems exercise each shortcut and its fallback (else the tests of them prove little)."""
    spy = Spy(getattr(summaries, spied))
    monkeypatch.setattr(summaries, spied, spy)
    rng = np.random.default_rng(0)
    for mode in ("far", "mixed", "any"):
        for _ in range(20):
            encoded, groups = grouped_problem(rng, 30, 4, 1, torch.float64, mode)
            if spied == "_update_row_grouped":
                labels = draw_labels(rng, 30, 4)[None]
                update_certificate_grouped(UpdateAttention(None, None), groups, labels, encoded)
            else:
                assign_certificate_grouped(groups, encoded, rows_per_chunk=7)
    assert spy.hits > least and spy.misses > least


def test_grouped_update_certificate_counts_members_by_group():
    """A hand-made case: keys 1..4 are the points (labels 0, 0, 1, -1), key groups {BOS}, {p0, p2}, {p1, p3},
    {c0}, {c1}; centroid 1's only member p2 shares a group with p0 (not a member). Every outside term is exactly 0
    or 1; centroid 0's observed leak has two terms (its dense row decides it). The numbers of the definition."""
    encoded = encoded_for(4, 2)
    seq = encoded.sequence
    inverse = torch.tensor([0, 1, 2, 1, 2, 3, 4])
    keys = Groups(torch.tensor([0, 1, 2, 5, 6]), inverse, torch.bincount(inverse))
    S = np.full((seq.n_tokens, 5), -5000.0)
    S[5] = [-5000.0, 10.0, 10.0, -3000.0, -3000.0]  # centroid 0: members p0, p1 score 10; p2, p3 too
    S[6] = [-5000.0, 7.0, -2000.0, -3000.0, -3000.0]  # centroid 1: member p2 (and p0) score 7
    P = np.zeros_like(S)
    P[5, 1:3] = 0.25
    P[6, 1] = 0.5
    g = GroupedAttention(identity_groups(seq.n_tokens), keys, key_major(S, torch.float64), key_major(P, torch.float64))
    att = UpdateAttention(None, None)
    update_certificate_grouped(att, [g], np.array([[0, 0, 1, -1]]), encoded)
    # Centroid 0: inside {p0, p1} at 10; outside p2, p3 at 10 (terms exp(0) = 1 each) and the rest far below.
    # Centroid 1: inside {p2} at 7; p0 at 7 too (one term of 1, pattern 0.5 leaks), the rest far below.
    assert att.margin.tolist() == [[0.0, 0.0]]
    assert att.leak_bound.tolist() == [[2 / 2, 1 / 1]]
    assert att.leak_observed.tolist() == [[0.5, 0.5]]
    assert att.member_spread.tolist() == [[0.0, 0.0]]


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@SETTINGS
@given(**PROBLEMS)
def test_lean_assign_certificate_is_the_grouped_summary(n, k, batch, dtype, mode, seed):
    rng = np.random.default_rng(seed)
    encoded, groups = grouped_problem(rng, n, k, batch, dtype, mode)
    full = summarise_assign_grouped(groups, encoded, columns=False)
    lean = assign_certificate_grouped(groups, encoded, rows_per_chunk=int(rng.integers(1, 50)))
    assert same_bits(lean.margin, full.margin) and same_bits(lean.leak_bound, full.leak_bound)
    assert lean.scores is lean.pattern is lean.chosen is lean.leak_observed is lean.sink_mass is None


def test_lean_assign_certificate_leaves_float32_counts_beyond_its_integers_to_torch():
    """Four key groups at one score, of 1, 2**24, 1 and 1 keys: float32 holds the leak bound's terms but not their
    sum (torch's float32 sum gives 2**24, not 2**24 + 2), so the count shortcut must not decide it."""
    encoded = encoded_for(3, 3)
    pos = encoded.sequence.n_tokens
    inverse = torch.tensor([1, 1, 1, 1, 0, 2, 3])  # positions only name the groups; counts are the weights
    keys = Groups(torch.tensor([4, 0, 5, 6]), inverse, torch.tensor([1, 2**24, 1, 1]))
    S = key_major(np.zeros((pos, 4)), torch.float32)
    g = GroupedAttention(identity_groups(pos), keys, S, S.clone())
    want = summarise_assign_grouped([g], encoded, columns=False)
    got = assign_certificate_grouped([g], encoded)
    assert same_bits(got.leak_bound, want.leak_bound) and same_bits(got.margin, want.margin)


def test_lean_assign_certificate_hand_case():
    """Keys: BOS, the points (one group of 3), c0, c1, c2, with c0 and c2 in one group. Point 0's top (c1) stands
    alone: leak 0, margin 2000; point 1 ties c0 and c2 (one group of two): leak 1, margin 0; point 2 ties groups
    c1 and {c0, c2}: leak 2, margin 0."""
    encoded = encoded_for(3, 3)
    seq = encoded.sequence
    inverse = torch.tensor([0, 1, 1, 1, 2, 3, 2])
    keys = Groups(torch.tensor([0, 1, 4, 5]), inverse, torch.bincount(inverse))
    S = np.full((seq.n_tokens, 4), -np.inf)
    S[1] = [-np.inf, -np.inf, -2000.0, 0.0]
    S[2] = [-np.inf, -np.inf, 5.0, -1500.0]
    S[3] = [-np.inf, -np.inf, 1.0, 1.0]
    g = GroupedAttention(identity_groups(seq.n_tokens), keys, key_major(S, torch.float64),
                         key_major(np.zeros_like(S), torch.float64))
    att = assign_certificate_grouped([g], encoded)
    assert att.margin.tolist() == [[2000.0, 0.0, 0.0]]
    assert att.leak_bound.tolist() == [[0.0, 1.0, 2.0]]


def compacted(matrix, labels):
    """What a lean capture made of a plain decoding's ``matrix`` (``Y`` with the state's ``labels``, or ``Y_stage``
    with the labels read the same way): held as its labels where it is exactly their one-hot rows."""
    k = matrix.shape[-1]
    if all(np.array_equal(one_hot(labels[b], k), matrix[b]) for b in range(matrix.shape[0])):
        return OneHotStack(labels, k)
    return matrix


def draw_Y(rng, n: int, k: int, kind: str) -> np.ndarray:
    labels = rng.integers(-1, k, n)
    Y = one_hot(labels, k)
    if kind == "signed zeros":
        Y[rng.random(Y.shape) < 0.3] *= -1.0  # -0.0 where 0, -1.0 where 1: not one-hot there
        Y[Y == -1.0] = 1.0
    elif kind == "two ones":
        Y[rng.integers(0, n), :] = 1.0
    elif kind == "soft":
        Y[rng.integers(0, n), rng.integers(0, k)] = 0.7
    elif kind == "nan":
        Y[rng.integers(0, n), rng.integers(0, k)] = np.nan
    return Y


@SETTINGS
@given(n=st.integers(1, 50), k=st.integers(1, 5), batch=st.integers(1, 2),
       dtype=st.sampled_from([torch.float64, torch.float32]), rows=st.integers(1, 20),
       kinds=st.lists(st.sampled_from(["one-hot", "signed zeros", "two ones", "soft", "nan", "same"]), min_size=1,
                      max_size=4), seed=st.integers(0, 2**32 - 1))
def test_one_hot_decoder_is_the_plain_decoder_compacted(n, k, batch, dtype, rows, kinds, seed):
    """A run of residual streams (Y or Y_stage exactly one-hot, with -0.0, not one-hot, unchanged): the one-hot
    decoder gives every field of the plain decoder's state, and Y and Y_stage held as their labels where exactly
    one-hot (as a lean capture held Y).
    Read ``rows`` rows at a time, so that chunks end anywhere."""
    chunked = functools.partial(encoding._one_hot_labels, rows=rows)
    with mock.patch.object(encoding, "_one_hot_labels", chunked):
        check_one_hot_decoder(n, k, batch, dtype, kinds, seed)


def check_one_hot_decoder(n, k, batch, dtype, kinds, seed):
    rng = np.random.default_rng(seed)
    layout = layout_for(k)
    X = rng.normal(size=(batch, n, 2))
    encoded = encode(layout, X, X[:, :k] if n >= k else rng.normal(size=(batch, k, 2)), dtype=dtype)
    plain = StreamDecoder(layout, encoded.sequence, encoded.scaling)
    lean = StreamDecoder(layout, encoded.sequence, encoded.scaling, one_hot=True)
    resid = encoded.resid.clone()
    for kind in kinds:
        if kind != "same":
            resid = resid.clone()
            slot = layout["Y"] if rng.random() < 0.7 else layout["Y_stage"]
            for b in range(batch):
                resid[b, encoded.sequence.points, slot] = torch.from_numpy(draw_Y(rng, n, k, kind)).to(dtype)
        want, got = plain(resid), lean(resid)
        for name, value in want.__dict__.items():
            if name not in ("assignments", "staged_assignments"):
                assert same_bits(getattr(got, name), value), name
        Y_stage = want.staged_assignments
        staged_labels = np.where(Y_stage.max(axis=-1) > 0.5, Y_stage.argmax(axis=-1), -1)
        for matrix, expected in ((got.assignments, compacted(want.assignments, want.labels)),
                                 (got.staged_assignments, compacted(Y_stage, staged_labels))):
            assert type(matrix) is type(expected)
            assert same_bits(np.asarray(matrix), np.asarray(expected))


CAPTURES = [("lloyd", torch.float64, 1), ("lloyd", torch.float32, 1), ("lloyd", torch.float64, 2),
            ("trimmed:radius=0.3", torch.float64, 1), ("soft", torch.float64, 1), ("damped", torch.float64, 2)]


@pytest.mark.parametrize("variant, dtype, batch", CAPTURES)
def test_lean_capture_keeps_the_full_captures_numbers(monkeypatch, variant, dtype, batch):
    """Layer by layer, a lean capture's certificates and states are the full capture's bits (Y read as a matrix),
    and the full capture's update certificates are update_certificate of its own kept rows."""
    problems = [corner_problem(seed) for seed in range(batch)]
    X, C0 = np.stack([p[0] for p in problems]), np.stack([p[1] for p in problems])
    if variant != "lloyd":
        C0 = C0[:, :2]  # the far centroid makes soft and trimmed runs degenerate
    sharpness, _ = choose_sharpness(np.concatenate(X), list(C0), variant, dtype=dtype)
    circuit = get_variant(variant).build(2, C0.shape[1], 3, sharpness=sharpness, dtype=dtype)
    scaling = lloyd_scaling(X[0], C0[0]) if batch == 1 and circuit.spec.unaltered else None
    encoded = encode(circuit.layout, X, C0, dtype=dtype, scaling=scaling)
    spies = {name: Spy(getattr(summaries, name)) for name in ("_assign_certificate_rows", "_update_row_grouped")}
    for name, spy in spies.items():
        monkeypatch.setattr(summaries, name, spy)
    full = capture(circuit, encoded, path="structured")
    lean = capture(circuit, encoded, path="structured", keep=reads(circuit.spec))
    if variant == "lloyd" and dtype == torch.float64:  # the shortcuts decide a run that resolves its problem
        assert spies["_assign_certificate_rows"].hits > 0 and spies["_update_row_grouped"].hits > 0
    assert_same_captures(full, lean, circuit, encoded)


def assert_same_captures(full, lean, circuit, encoded) -> None:
    """Layer by layer, ``lean``'s states and certificates are ``full``'s bits, and ``full``'s update certificates
    are update_certificate of its own kept rows."""
    for f, g in zip(full.layers, lean.layers, strict=True):
        for name, value in f.post.__dict__.items():
            assert same_bits(np.asarray(getattr(g.post, name)), np.asarray(value)), (f.layer, name)
        if f.kind in ("assign", "update"):
            for name in ("margin", "leak_bound"):
                assert same_bits(getattr(g.attention, name), getattr(f.attention, name)), (f.layer, name)
        if f.kind == "update" and not circuit.spec.swapped_update_normalisation:
            again = UpdateAttention(f.attention.scores, f.attention.pattern)
            update_certificate(again, f.pre.labels, encoded)
            for name in ("margin", "leak_bound", "leak_observed", "member_spread"):
                assert same_bits(getattr(f.attention, name), getattr(again, name)), (f.layer, name)
                assert same_bits(getattr(g.attention, name), getattr(again, name)), (f.layer, name)


def test_lean_float32_capture_whose_update_queries_stop_compressing(monkeypatch):
    """Issue 42: ``cluster --dataset blobs --n 50000 --k 4 --dtype float32 --json`` crashed ('NoneType' object has
    no attribute 'cpu'). A float32 key-hash collision sends one update head to grouped_attention, which groups keys
    only; the later update heads then run with ungrouped queries, and a lean block keeps no pattern of those. The
    update certificate makes it again from the scores (pattern_of): the lean capture is the full one, bit for bit."""
    from analysis.data import load_dataset, resolve_init

    X = load_dataset("blobs", n=1000, d=2, centers=3, seed=0).X
    C0, _ = resolve_init("random", X, 4, 0)
    sharpness, _ = choose_sharpness(X, [C0], "lloyd", dtype=torch.float32)
    circuit = get_variant("lloyd").build(2, 4, 3, sharpness=sharpness, dtype=torch.float32)
    encoded = encode(circuit.layout, X[None], C0[None], dtype=torch.float32, scaling=lloyd_scaling(X, C0))
    remade = []
    monkeypatch.setattr(summaries, "pattern_of", lambda g: remade.append(g.pattern is None) or
                        pattern_of(g))
    full = capture(circuit, encoded, path="structured")
    lean = capture(circuit, encoded, path="structured", keep=reads(circuit.spec))
    assert any(remade), "no update head without a kept pattern: the case is not exercised"
    assert_same_captures(full, lean, circuit, encoded)
