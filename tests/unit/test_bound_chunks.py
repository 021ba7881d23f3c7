"""The sharpness bound's assign layers run over chunks of points (analysis.proof.bound.sharpness.BOUND_CHUNK): the
bound, the hard trajectory and every note must be the same numbers, bit for bit, whatever the chunk."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

import analysis.proof.bound.sharpness as sharpness


def _bound(X, C0, sink=None, tie_break=1e-9):
    bound, traj = sharpness.sharpness_bound(X, C0, 5, beta=1e4, beta_update=200.0, mask=10.0, tie_break=tie_break,
                                            sink=sink)
    return pickle.dumps((bound, traj.centroids, traj.labels, traj.certified))


def _problems():
    rng = np.random.default_rng(7)
    for trial in range(24):
        n, k, d = int(rng.integers(1, 200)), int(rng.integers(1, 6)), int(rng.integers(1, 4))
        X = rng.normal(size=(n, d)) / 4
        if trial % 4 == 0:
            X[: n // 2] = X[0]  # duplicated points
        C0 = X[rng.choice(n, size=k, replace=n < k)].copy()
        yield X, C0, (-5.0 if trial % 5 == 0 else None), 1e-9
    # An exact tie the float reference cannot certify (the bounds are inf from its iteration on, with a note).
    yield np.array([[0.0], [0.5], [-0.5], [2.0]]), np.array([[-1.0], [1.0]]), None, 0.0


@pytest.mark.parametrize("chunk", [1, 3, 64])
def test_chunked_assign_layers_give_the_unchunked_bound_bit_for_bit(monkeypatch, chunk):
    uncertain_seen = False
    for X, C0, sink, tie_break in _problems():
        monkeypatch.setattr(sharpness, "BOUND_CHUNK", 1 << 20)
        whole = _bound(X, C0, sink, tie_break)
        monkeypatch.setattr(sharpness, "BOUND_CHUNK", chunk)
        assert _bound(X, C0, sink, tie_break) == whole
        uncertain_seen |= not pickle.loads(whole)[0].certified
    assert uncertain_seen  # the uncertified path was compared too
