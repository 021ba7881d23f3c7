"""The HookedTransformer itself, encoding/decoding, and capture."""

import numpy as np
import pytest
import torch

from analysis.capture import capture
from analysis.verify import verify
from circuits import hook_names
from circuits.blocks import ASSIGN, UPDATE
from circuits.build import build_lloyd_circuit, check_loaded
from circuits.encoding import decode, encode

from conftest import lloyd_circuit


def test_config_and_weights():
    circ = build_lloyd_circuit(3, 4, 2)
    cfg = circ.model.cfg
    assert cfg.attention_dir == "bidirectional" and cfg.normalization_type is None and cfg.gated_mlp
    assert not cfg.use_attn_scale and cfg.n_heads == 1 and cfg.dtype == torch.float64
    assert cfg.d_model == circ.layout.d_model and cfg.n_layers == 6
    assert circ.schedule == [UPDATE, ASSIGN] * 3
    for name, p in circ.model.named_parameters():
        assert torch.isfinite(p).all(), name
    # Weights are tied: every assign block (and every update block) is the same.
    W = lambda layer: circ.model.blocks[layer].attn.W_Q  # noqa: E731
    assert torch.equal(W(1), W(3)) and torch.equal(W(0), W(4)) and not torch.equal(W(0), W(1))


def test_factored_qk_matches_the_numpy_block():
    circ = build_lloyd_circuit(2, 3, 1)
    for layer, block in enumerate(circ.blocks):
        qk = circ.model.blocks[layer].attn.QK[0].AB.detach().numpy()
        ov = circ.model.blocks[layer].attn.OV[0].AB.detach().numpy()
        np.testing.assert_array_equal(qk, block.head.W_QK)
        np.testing.assert_array_equal(ov, block.head.W_OV)


def test_check_loaded_catches_a_changed_weight():
    circ = build_lloyd_circuit(2, 2, 1)
    state = {k: v.clone() for k, v in circ.model.state_dict().items()}
    with torch.no_grad():
        circ.model.blocks[1].attn.W_Q[0, 0, 0] += 1
    with pytest.raises(RuntimeError, match="W_Q"):
        check_loaded(circ.model, state)


def test_encode_decode_round_trip_in_user_units():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(7, 3)) * 1e3 + 5e5
    C0 = X[:2] + 1.0
    circ = lloyd_circuit(3, 2, 1)
    enc = encode(circ.layout, X, C0)
    state = decode(circ.layout, enc.resid, enc.sequence, enc.scaling)
    np.testing.assert_allclose(state.staged_centroids[0], C0, rtol=1e-14)
    assert (state.labels == -1).all()
    seq, L = enc.sequence, circ.layout
    np.testing.assert_allclose(enc.scaling.from_unit(enc.resid[:, seq.points, L["X"]].numpy())[0], X, rtol=1e-14)
    # Every token lies in the unit ball.
    unit = enc.resid[0, :, L["X"]] + enc.resid[0, :, L["C_stage"]]
    assert float(unit.norm(dim=-1).max()) <= 1 + 1e-12


def test_capture_keeps_only_the_residual_hooks():
    X = np.array([[0.0], [1.0], [5.0]])
    circ = lloyd_circuit(1, 2, 1)
    cap = capture(circ, encode(circ.layout, X, X[[0, 2]]), keep_cache=True)
    names = set(cap.cache.keys())
    expected = {hook_names.resid_pre(i) for i in range(4)} | {hook_names.resid_post(i) for i in range(4)}
    assert names == expected


def test_batch_equals_problems_one_by_one():
    rng = np.random.default_rng(1)
    Xs = rng.normal(size=(3, 40, 2)) * np.array([1.0, 100.0, 0.01])[:, None, None]
    C0s = Xs[:, :3]
    circ = lloyd_circuit(2, 3, 4)
    reports = verify(circ, encode(circ.layout, Xs, C0s))
    for b in range(3):
        single = verify(circ, encode(circ.layout, Xs[b], C0s[b]))[0]
        assert reports[b].verified and single.verified
        assert reports[b].per_iteration == single.per_iteration


def test_logits_are_the_final_assignment():
    X = np.array([[0.0], [1.0], [9.0], [10.0]])
    circ = lloyd_circuit(1, 2, 2)
    cap = capture(circ, encode(circ.layout, X, X[[0, 1]]))
    np.testing.assert_array_equal(cap.logits[0].argmax(-1), cap.final.labels[0])
    np.testing.assert_array_equal(cap.logits[0], np.eye(2)[[0, 0, 1, 1]])
