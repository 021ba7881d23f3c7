"""Smaller per-block temporaries at scale (issue 31): the update certificate computed one centroid row at a time, the
exact check of a key grouping compared a chunk of columns at a time, the structured forward with small chunks, and
the stream decoder comparing a slot with the previous decoding where it lies before copying it.

Each is held to the unchanged computation bit for bit: the row-wise certificate against the vectorised formula it
replaces (kept here as the reference), the chunked column check against one ``torch.equal`` of the whole gather,
a capture whose chunks are a few positions long against the default one, on a problem with a near tie (a
point one ulp off a bisector) and a cluster that stays empty (its update head's own-key support), and the decoder's
reuse against a fresh copy's bits and layout.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from analysis.capture import capture
from analysis.capture.summaries import UpdateAttention, update_certificate
from analysis.pipeline import lloyd_scaling
from analysis.verify import verify_problem
from circuits.structured import forward, groups, plans
from circuits.encoding import encode
from circuits.structured import columns_match
from circuits.variants import get_variant

from tests.unit.test_lean_verify import corner_problem


def vectorised_update_certificate(scores, pattern, labels_pre, seq):
    """The certificate as it was computed before (all rows at once), for comparison."""
    batch, k, _ = scores.shape
    intended = np.zeros(scores.shape, dtype=bool)
    intended[:, :, seq.points] = labels_pre[:, None, :] == np.arange(k)[None, :, None]
    intended[:, np.arange(k), np.arange(seq.centroids.start, seq.centroids.stop)] = ~intended.any(axis=-1)
    inside_min = np.where(intended, scores, np.inf).min(axis=-1)
    inside_max = np.where(intended, scores, -np.inf).max(axis=-1)
    outside_scores = np.where(intended, -np.inf, scores)
    size = intended.sum(axis=-1)
    with np.errstate(under="ignore"):
        outside = np.where(intended, 0.0, np.exp(outside_scores - inside_min[..., None]))
    return {"margin": inside_min - outside_scores.max(axis=-1), "leak_bound": outside.sum(axis=-1) / size,
            "leak_observed": np.where(intended, 0.0, pattern).sum(axis=-1), "member_spread": inside_max - inside_min}


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")  # random scores: exp overflows, as it did
@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 300), k=st.integers(1, 6), batch=st.integers(1, 2), seed=st.integers(0, 2**16),
       dtype=st.sampled_from([np.float64, np.float32]), scale=st.sampled_from([1.0, 40.0, 1e3]))
def test_rowwise_update_certificate_is_the_vectorised_one(n, k, batch, seed, dtype, scale):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 2))
    encoded = encode(get_variant("lloyd").build(2, k, 1).layout, X, X[rng.integers(0, n, size=k)])
    seq = encoded.sequence
    # Labels that leave the last cluster empty (its support is its own key) whenever k > 1.
    labels = rng.integers(0, max(1, k - 1), size=(batch, n))
    shape = (batch, k, seq.n_tokens)
    scores = (rng.normal(size=shape) * scale).astype(dtype)
    pattern = rng.random(size=shape).astype(dtype)
    att = UpdateAttention(scores=scores, pattern=pattern)
    update_certificate(att, labels, encoded)
    expected = vectorised_update_certificate(scores, pattern, labels, seq)
    for name, value in expected.items():
        got = getattr(att, name)
        assert got.dtype == value.dtype and got.shape == value.shape, name
        assert got.tobytes() == value.tobytes(), name


@pytest.mark.parametrize("chunk", [1, 3, 7, 64])
def test_chunked_column_check_is_torch_equal(chunk):
    rng = np.random.default_rng(chunk)
    vectors = torch.from_numpy(rng.normal(size=(3, 4))[:, rng.integers(0, 4, size=50)])
    exact = torch.from_numpy(np.array([int(np.flatnonzero((vectors.T == vectors.T[j]).all(axis=1))[0])
                                       for j in range(50)]))
    assert columns_match(vectors, exact, chunk)
    # A wrong source in the last chunk only, a NaN column (NaN equals nothing), and an off-by-one column.
    for position in (49, 0, 25):
        wrong = exact.clone()
        wrong[position] = (exact[position] + 1) % 50
        while torch.equal(vectors[:, wrong[position]], vectors[:, position]):
            wrong[position] = (wrong[position] + 1) % 50
        assert not columns_match(vectors, wrong, chunk)
        assert columns_match(vectors, wrong, chunk) == torch.equal(vectors, vectors.index_select(1, wrong))
    with_nan = vectors.clone()
    with_nan[1, 40] = float("nan")
    assert not columns_match(with_nan, exact, chunk)


def _structured_capture(X, C0, iterations=3):
    circuit = get_variant("lloyd").build(X.shape[1], C0.shape[0], iterations)
    return capture(circuit, encode(circuit.layout, X, C0, scaling=lloyd_scaling(X, C0)), path="structured")


def test_capture_in_small_chunks_is_the_capture_in_one(monkeypatch):
    """Chunks of 16 positions (the problem has 185 tokens: a dozen chunks, the last one partial) in every chunked
    step of the forward and the grouping check: every decoded state and attention summary bit for bit the same."""
    X, C0 = corner_problem(n=180)
    whole = _structured_capture(X, C0)
    for module in (forward, groups, plans):
        monkeypatch.setattr(module, "CHUNK", 16)
    chunked = _structured_capture(X, C0)
    assert chunked.encoded.sequence.n_tokens > 10 * 16
    assert verify_problem(chunked, 0).verified and verify_problem(whole, 0).verified
    assert (chunked.assignments(3)[0] != 2).all()  # cluster 2 stays empty
    for a, b in zip(whole.layers, chunked.layers):
        for state_a, state_b in ((a.pre, b.pre), (a.post, b.post)):
            assert state_a.labels.tobytes() == state_b.labels.tobytes()
            assert state_a.centroids.tobytes() == state_b.centroids.tobytes()
        if a.attention is None:
            continue
        for name in ("scores", "pattern", "margin", "leak_bound", "leak_observed"):
            assert getattr(a.attention, name).tobytes() == getattr(b.attention, name).tobytes(), (a.layer, name)


@pytest.mark.parametrize("feature_major", [True, False])
@pytest.mark.parametrize("change", [None, "value", "signed zero", "nan payload", "last row"])
def test_decoder_reuses_a_slot_exactly_when_its_bits_are_unchanged(feature_major, change):
    """The slot is compared where it lies (a view of the residual, either layout) before any copy: the previous
    array comes back (read-only) exactly when a fresh copy would hold its bits in its layout; otherwise the copy."""
    from circuits.encoding import _bits_equal, _same_bits_or

    rng = np.random.default_rng(1)
    storage = rng.normal(size=(7, 70_000)) if feature_major else rng.normal(size=(70_000, 7))
    storage[storage > 1.5] = 0.0
    resid = (storage.T if feature_major else storage)[None]  # (batch, pos, d_model), as the forward's records are
    slot = resid[:, 1:, 2:5]
    previous = np.array(slot, dtype=np.float64, copy=True)
    if change == "value":
        previous[0, 5, 1] = np.nextafter(previous[0, 5, 1], np.inf)
    elif change == "signed zero":
        previous[0, np.argwhere(previous[0] == 0.0)[0][0], np.argwhere(previous[0] == 0.0)[0][1]] = -0.0
    elif change == "nan payload":
        slot[0, 3, 0] = np.nan
        previous = np.array(slot, dtype=np.float64, copy=True)
        previous.view(np.int64)[0, 3, 0] ^= 1  # another NaN: different bits
    elif change == "last row":
        previous[0, -1, 2] += 1.0
    got = _same_bits_or(slot, previous)
    fresh = np.array(slot, dtype=np.float64, copy=True)
    assert got.strides == fresh.strides and got.tobytes() == fresh.tobytes()
    assert (got is previous) == (change is None)
    assert _bits_equal(previous, slot, rows=1000) == (change is None)
    if change is None:
        assert not previous.flags.writeable

