"""The structured forward's chunked block (circuits.structured.forward.chunked_block) and sparse restricted maps
(circuits.structured.SparseTerms): held to the unchunked block and the dense map they replace, to the
dense HookedTransformer forward, and to their fallbacks when a grouping is not exact."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from analysis.capture import capture
from analysis.pipeline import lloyd_scaling
from analysis.verify import reads, verify_problem
from circuits import structured
from circuits.structured import attention, forward
from circuits.encoding import encode
from circuits.structured import RestrictedMap
from circuits.variants import get_variant
from tests.unit.test_lean_verify import corner_problem


def _capture(variant, X, C0, iterations=3, path="structured"):
    circuit = get_variant(variant).build(X.shape[1], C0.shape[0], iterations)
    scaling = lloyd_scaling(X, C0) if circuit.spec.unaltered else None
    return capture(circuit, encode(circuit.layout, X, C0, scaling=scaling), path=path)


def _spy_chunked(monkeypatch):
    """Record what every chunked_block call returned."""
    results = []
    original = forward.chunked_block

    def spy(*args, **kwargs):
        results.append(original(*args, **kwargs))
        return results[-1]

    monkeypatch.setattr(forward, "chunked_block", spy)
    return results


def _assert_close_captures(a, b, rtol):
    for la, lb in zip(a.layers, b.layers, strict=True):
        for sa, sb in ((la.pre, lb.pre), (la.post, lb.post)):
            assert np.array_equal(sa.labels, sb.labels), la.layer
            np.testing.assert_allclose(sa.centroids, sb.centroids, rtol=rtol, atol=0)
        if la.attention is None:
            continue
        for name in ("scores", "pattern", "margin", "leak_bound"):
            x, y = getattr(la.attention, name), getattr(lb.attention, name)
            if x is not None:
                # Entries that differ do so in the last bits (the products are taken in other shapes)
                np.testing.assert_allclose(x, y, rtol=rtol, atol=1e-300, err_msg=f"layer {la.layer} {name}")


@pytest.mark.parametrize("variant", ["lloyd", "soft", "damped", "annealed"])
def test_chunked_block_in_many_chunks_is_the_unchunked_block(monkeypatch, variant):
    """Chunks of 16 positions (185 tokens: a dozen chunks, the last partial) against the unchunked block (the chunked
    one switched off): the same labels in every layer, the same centroids, scores and patterns to a few ulp, and
    the run is the chunked one (every block took the chunked path, update queries grouped)."""
    X, C0 = corner_problem(n=180)
    monkeypatch.setattr(attention, "STREAM_CHUNK", 16)
    calls = _spy_chunked(monkeypatch)
    chunked = _capture(variant, X, C0)
    assert calls and all(result is not None for result in calls)
    updates = [g for g in calls if g.keys.size <= 5]  # an update head's keys: clusters, centroids, BOS
    assert updates and all(not g.queries.is_identity for g in updates)
    monkeypatch.setattr(forward, "chunked_block", lambda *args, **kwargs: None)
    whole = _capture(variant, X, C0)
    _assert_close_captures(chunked, whole, rtol=8 * np.finfo(np.float64).eps)
    assert verify_problem(chunked, 0).verified == verify_problem(whole, 0).verified


def test_chunked_capture_matches_the_dense_forward(monkeypatch):
    """The chunked structured capture against the HookedTransformer's dense forward, with the structured path's
    stated tolerance (1e-12 of the data scale) and identical labels."""
    X, C0 = corner_problem(n=60)
    monkeypatch.setattr(attention, "STREAM_CHUNK", 8)
    calls = _spy_chunked(monkeypatch)
    chunked = _capture("lloyd", X, C0)
    assert calls and all(result is not None for result in calls)
    dense = _capture("lloyd", X, C0, path="dense")
    scale = float(np.abs(X).max())
    for la, lb in zip(chunked.layers, dense.layers, strict=True):
        assert np.array_equal(la.post.labels, lb.post.labels)
        np.testing.assert_allclose(la.post.centroids, lb.post.centroids, rtol=0, atol=1e-12 * scale)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_a_block_that_keeps_no_pattern_is_the_same_block(monkeypatch, dtype):
    """Recording(patterns=False), as a lean capture asks: each assign head (points as queries) hands back its scores
    and no pattern, an update head both; the streams, scores, the pattern made again from the scores (pattern_of)
    and the lean capture are what keeping every pattern gives, bit for bit, also where the lean certificate's
    shortcut does not hold (a score gap exp does not round to 0: forced here) and its fallback reads the pattern
    made again. (300 points: more distinct point queries than PAIR_BUDGET, so they are not grouped.)"""
    from analysis.capture import summaries

    X, C0 = corner_problem(n=300)
    monkeypatch.setattr(attention, "STREAM_CHUNK", 64)  # several passes, the last partial
    circuit = get_variant("lloyd").build(2, 3, 3, dtype=dtype)
    runs = {}
    for patterns in (True, False):
        records = []
        # pre=False: blocks run in place, chunked (each record's stream is copied as it comes: the next block
        # overwrites it).
        structured.structured_forward(
            circuit.runnable, encode(circuit.layout, X, C0, dtype=dtype, scaling=lloyd_scaling(X, C0)).resid,
            circuit.score_hooks, structured.Recording(
                lambda layer, record: records.append((record.resid_post.clone(), record.attention)), pre=False,
                patterns=patterns))
        runs[patterns] = records
    for (post_kept, kept), (post_lean, lean) in zip(runs[True], runs[False], strict=True):
        assert torch.equal(post_kept, post_lean)
        (g_kept,), (g_lean,) = kept, lean
        assert torch.equal(g_kept.scores, g_lean.scores)
        if g_kept.queries.is_identity:
            assert g_lean.pattern is None  # an assign head's position-sized pattern
            assert torch.equal(structured.pattern_of(g_lean), g_kept.pattern)
        else:
            assert torch.equal(g_kept.pattern, g_lean.pattern)
    assert any(g.pattern is None for _, groups in runs[False] for g in groups)
    spy = []
    real = structured.structured_forward
    monkeypatch.setattr(structured, "structured_forward",
                        lambda *a, **kw: spy.append(a[3].patterns) or real(*a, **kw))
    remade = []
    monkeypatch.setattr(summaries, "EXP_ZERO_BELOW", -np.inf)  # no gap passes the shortcut: the fallback for all
    monkeypatch.setattr(summaries, "pattern_of", lambda g: remade.append((g.queries.is_identity, g.pattern is None))
                        or structured.pattern_of(g))
    lean = capture(circuit, encode(circuit.layout, X, C0, dtype=dtype, scaling=lloyd_scaling(X, C0)),
                   path="structured", keep=reads(circuit.spec))
    assert spy == [False]
    # The fallback made each assign head's pattern again (ungrouped point queries); the update heads' certificates
    # read theirs through pattern_of too, kept where their queries are grouped.
    assigns = [remade_ for identity, remade_ in remade if identity]
    assert assigns and all(assigns)
    monkeypatch.setattr(structured, "structured_forward",
                        lambda model, resid, hooks, recording, **kw: real(model, resid, hooks, structured.Recording(
                            recording.on_record, recording.pre, recording.mid, True), **kw))
    kept = capture(circuit, encode(circuit.layout, X, C0, dtype=dtype, scaling=lloyd_scaling(X, C0)),
                   path="structured", keep=reads(circuit.spec))
    _assert_close_captures(lean, kept, rtol=0)


def test_a_hash_collision_falls_back_to_the_exact_grouping(monkeypatch):
    """A hash that sends every key and query to one value (all collide): each chunked block finds the check failing
    and returns None, the unchunked block groups exactly, and the run is the usual one."""
    X, C0 = corner_problem(n=60)
    usual = _capture("lloyd", X, C0)
    monkeypatch.setattr(attention, "hash_direction", lambda h, dtype, device: torch.zeros(h, dtype=dtype))
    calls = _spy_chunked(monkeypatch)
    collided = _capture("lloyd", X, C0)
    assert calls and all(result is None for result in calls)
    _assert_close_captures(collided, usual, rtol=8 * np.finfo(np.float64).eps)  # unchunked against chunked


def test_key_groupings_carry_over_between_iterations(monkeypatch):
    """The layers of a built circuit hold equal weights in separate tensors: their key maps have one signature, so
    from its second run each head starts from its last grouping (taken only where exact)."""
    X, C0 = corner_problem(n=60)
    hints = []
    original = forward.chunked_block

    def spy(attn, ln1, ln2, plan, mlp_plan, xT, hint=None, *args, **kwargs):
        hints.append(hint)
        return original(attn, ln1, ln2, plan, mlp_plan, xT, hint, *args, **kwargs)

    monkeypatch.setattr(forward, "chunked_block", spy)
    _capture("lloyd", X, C0, iterations=4)
    assert hints[0] is None and hints[1] is None  # the first update and the first assign block
    assert all(hint is not None for hint in hints[2:])


def _sparse_matrix(rng, d_in, d_out, density):
    W = rng.normal(size=(d_in, d_out)) * (rng.random((d_in, d_out)) < density)
    W[:, 0] = 0.0  # an output written by the bias alone (or by nothing)
    W[: d_in // 2, 1] = 0.0
    W[d_in // 2 + 1 :, 1] = 0.0  # an output with one term
    W[W != 0] = np.where(rng.random((W != 0).sum()) < 0.3, 1.0, W[W != 0])  # some unit weights
    return torch.from_numpy(W)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("with_bias", [False, True])
def test_sparse_terms_are_the_dense_product(seed, with_bias):
    """A sparse restricted map applied term by term against ``x @ W + b`` on the rows it writes: a row with one term
    is the dense product bit for bit, a row with several within an ulp of each term's size (the sum is taken in
    another order than the BLAS kernel's), and a row with none is its bias (or 0)."""
    rng = np.random.default_rng(seed)
    W = _sparse_matrix(rng, 12, 9, 0.15)
    b = torch.from_numpy(rng.normal(size=9)) if with_bias else None
    plan = RestrictedMap.of(W, b, all_outputs=True)
    assert plan.terms is not None
    xT = torch.from_numpy(rng.normal(size=(12, 50)))
    got = plan.apply(xT)
    want = (xT.T @ W + (0 if b is None else b)).T
    terms = (W != 0).sum(dim=0)
    single = terms <= 1
    assert torch.equal(got[single], want[single])
    magnitude = (xT.abs().T @ W.abs()).T + (0 if b is None else b.abs()[:, None])
    assert bool(((got - want).abs() <= 2 * np.finfo(np.float64).eps * magnitude).all())


@pytest.mark.parametrize("seed", range(6))
def test_sparse_terms_give_the_same_bits_fresh_or_into_a_given_output(seed):
    """A fresh output (for maps that open every row: the gathered first terms themselves) and an output written into
    a given tensor are the same numbers bit for bit, with weights of one (a copy) and not, rows with no term and
    without; a fresh output shares no memory with the input, which the caller goes on reading."""
    rng = np.random.default_rng(seed)
    W = _sparse_matrix(rng, 12, 9, 0.15)
    if seed % 3:
        for j in np.flatnonzero(~(W != 0).any(dim=0).numpy()):
            W[j % 12, j] = 0.5  # every output has a term (the matrix left some with none)
    if seed % 2:
        W = torch.where(W != 0, torch.ones_like(W), W)  # weights of 1: the first terms are copied, not scaled
    terms = RestrictedMap.of(W, all_outputs=True).terms
    assert terms is not None and isinstance(terms.first_rows, slice) == bool(seed % 3) and terms.ones == bool(seed % 2)
    xT = torch.from_numpy(rng.normal(size=(12, 50)))
    before = xT.clone()
    fresh = terms.apply(xT)
    given = torch.full((9, 50), float("nan"), dtype=torch.float64)
    assert terms.apply(xT, given) is given
    assert torch.equal(fresh, given) and torch.equal(xT, before)
    fresh.add_(1.0)
    assert torch.equal(xT, before)


def test_a_dense_map_keeps_the_dense_product():
    rng = np.random.default_rng(0)
    W = torch.from_numpy(rng.normal(size=(6, 5)))
    plan = RestrictedMap.of(W, all_outputs=True)
    assert plan.terms is None
    xT = torch.from_numpy(rng.normal(size=(6, 7)))
    assert torch.equal(plan.apply(xT), W.T @ xT)
