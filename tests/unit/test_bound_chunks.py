"""The sharpness bound's assign layers run over chunks of points (analysis.proof.bound.assign.BOUND_CHUNK): the
bound, the hard trajectory and every note must be the same numbers, bit for bit, whatever the chunk."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

import analysis.proof.bound.assign as assign
import analysis.proof.bound.sharpness as sharpness
from analysis.proof.bound.records import BoundProblem, HardState


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
        monkeypatch.setattr(assign, "BOUND_CHUNK", 1 << 20)
        whole = _bound(X, C0, sink, tie_break)
        monkeypatch.setattr(assign, "BOUND_CHUNK", chunk)
        assert _bound(X, C0, sink, tie_break) == whole
        uncertain_seen |= not pickle.loads(whole)[0].certified
    assert uncertain_seen  # the uncertified path was compared too


def test_a_bound_without_the_trajectorys_labels_is_the_same_bound():
    """trajectory_labels=False (the verification's background bound) keeps no labels and changes nothing else."""
    for X, C0, sink, tie_break in _problems():
        args = (X, C0, 5)
        kwargs = dict(beta=1e4, beta_update=200.0, mask=10.0, tie_break=tie_break, sink=sink)
        bound, traj = sharpness.sharpness_bound(*args, **kwargs)
        lean_bound, lean_traj = sharpness.sharpness_bound(*args, **kwargs, trajectory_labels=False)
        assert lean_traj.labels == [] and traj.labels
        assert pickle.dumps((lean_bound, lean_traj.centroids, lean_traj.certified)) == pickle.dumps(
            (bound, traj.centroids, traj.certified))


@pytest.mark.parametrize("variant", ["lloyd", "damped", "trimmed"])
@pytest.mark.parametrize("hold", [False, True])
def test_bound_inputs_from_the_encoding_are_the_streams_slots(variant, hold):
    """The bound's points and initial centroids, made from the encoding's inputs (an encoding of a run at scale
    holds no stream), are the stream's ``X`` and ``C_stage`` slots bit for bit, and reading them makes no stream;
    an encoding whose stream was changed in place is read from the stream."""
    from analysis.capture import capture
    from analysis.pipeline import lloyd_scaling
    from analysis.proof.bound.check import bound_inputs
    from analysis.verify import reads
    from circuits.encoding import encode, read
    from circuits.variants import get_variant
    from tests.unit.test_lean_verify import corner_problem

    X, C0 = corner_problem(n=40)
    circuit = get_variant(variant).build(2, 3, 2)
    scaling = lloyd_scaling(X, C0) if circuit.spec.unaltered else None
    stream = encode(circuit.layout, X, C0, scaling=scaling).resid
    encoded = encode(circuit.layout, X, C0, scaling=scaling, hold_stream=hold)
    cap = capture(circuit, encoded, path="structured", keep=reads(circuit.spec))
    (X_unit, C_unit, *_), _ = bound_inputs(cap)
    assert (cap.encoded.resid is None) == (not hold)  # no stream made to read two slots
    seq = encoded.sequence
    assert X_unit.tobytes() == read(circuit.layout, stream, "X", seq.points)[0].tobytes()
    assert C_unit.tobytes() == read(circuit.layout, stream, "C_stage", seq.centroids)[0].tobytes()
    changed = encode(circuit.layout, X, C0, scaling=scaling)
    changed.resid[0, seq.points.start, circuit.layout["X"].start] += 1.0
    cap_changed = capture(circuit, changed, path="structured")
    (X_changed, *_), _ = bound_inputs(cap_changed)
    assert X_changed[0, 0] == X_unit[0, 0] + 1.0


def _margins_as_written(p, state):
    """The assign layer's margins as the module docstring writes them, one expression each (the oracle of the
    in-place form in :func:`analysis.proof.bound.assign.margins`)."""
    from analysis.proof.bound.records import U, gamma
    from circuits.reference import sq_distances

    X, n, d = p.X, len(p.X), p.X.shape[1]
    D = sq_distances(X, state.C)
    E = np.sqrt(d) * state.e
    g = gamma(d + 2)
    rho = (g * D * (1 + 2 * g) + 2 * np.sqrt(D) * (1 + g) * E[None, :] + E[None, :] ** 2
           + U * (D + p.t[None, :])) * 1.01 + 1e-300
    V = D + p.t[None, :]
    if p.sink is not None:
        v_sink = -p.sink / p.beta
        V = np.concatenate([V, np.full((n, 1), v_sink)], axis=1)
        rho = np.concatenate([rho, np.full((n, 1), 2 * U * abs(v_sink) + 1e-300)], axis=1)
    a = np.argmin(V, axis=1)
    rows = np.arange(n)
    gap = V - V[rows, a][:, None] - rho - rho[rows, a][:, None]
    gap[rows, a] = np.inf
    return a, gap, D, E, V[rows, a], rho[rows, a]


@pytest.mark.parametrize("seed", range(12))
def test_the_in_place_margins_are_the_written_expression_bit_for_bit(seed):
    """Labels, gaps, distances, centroid errors, and the cost and rounding at each label: every bit the same as the
    expression (random points and centroids, some points on a centroid, zero and large float errors, a sink)."""
    rng = np.random.default_rng(seed)
    n, k, d = int(rng.integers(1, 300)), int(rng.integers(1, 8)), int(rng.integers(1, 9))
    X = rng.normal(size=(n, d)) * 10.0 ** rng.integers(-3, 2)
    C = X[rng.choice(n, size=k)].copy() if seed % 3 == 0 else rng.normal(size=(k, d))
    e = np.zeros(k) if seed % 4 == 0 else np.abs(rng.normal(size=k)) * 10.0 ** rng.integers(-18, -2)
    state = HardState(C, e, np.zeros(k))
    p = BoundProblem(X, sharpness.tie_breaks(1e-9, k), 1e6, 100.0, 10.0, 1.0,
                     -3.0 if seed % 5 == 0 else None, np.array([]), 1.0, np.abs(X).max(axis=1))
    got = assign.margins(p, state)
    want = _margins_as_written(p, state)
    for name, expected in zip(("a", "gap", "D", "E", "Va", "rho_a"), want, strict=True):
        assert np.asarray(getattr(got, name)).tobytes() == np.asarray(expected).tobytes(), name
