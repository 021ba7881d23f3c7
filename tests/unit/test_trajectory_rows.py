"""The trajectory check's near rows computed beside the prefetched reference run (analysis.verify.trajectory_rows):
the same report as the check that makes every matrix itself, mismatches, near ties and causes included; and the rows
made on demand are the whole matrices' rows bit for bit."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.datasets import load_iris

from analysis import pipeline
from analysis.pipeline import run_problem
from analysis.verify import trajectory_rows, verify_problem
from analysis.verify.checks import make_reference
from analysis.verify.prefetch import ReferenceRun
from circuits.initialisation import initial_centroids
from circuits.reference import sq_distances
from tests.unit.test_lean_verify import corner_problem

pytestmark = pytest.mark.fast


def _report(report) -> str:
    return json.dumps(report.to_dict(), sort_keys=True, default=str)


def _prefetched_run(monkeypatch, X, C0, iterations):
    """run_problem's lean run, with the reference prefetched, and the number of trajectory checks that took the
    row-by-row path."""
    rows_used = []
    costs_on_demand = trajectory_rows.costs_on_demand
    monkeypatch.setattr(trajectory_rows, "costs_on_demand", lambda *a: rows_used.append(1) or costs_on_demand(*a))
    started = []
    monkeypatch.setattr(pipeline, "ReferenceRun", lambda *a: started.append(1) or ReferenceRun(*a))
    result = run_problem(X, C0, iterations, path="structured", lean=True)
    assert started
    return result, len(rows_used)


def test_near_ties_the_circuit_decides_unlike_exact_lloyd_are_reported_alike():
    """Iris from random centroids (seed 0), the README's case: two near ties at t = 0 decided unlike exact arithmetic,
    and a trajectory that differs from the reference's at t = 1 and 2. The prefetched rows give the same report
    (errors, their exact gaps and causes) as the check that makes every matrix."""
    X = load_iris().data
    C0 = initial_centroids(X, 3, "random", 0)
    result, rows_used = _prefetched_run(monkeypatch := pytest.MonkeyPatch(), X, C0, 4)
    try:
        assert rows_used == 5  # every iterate t = 0 .. 4 read its mismatches row by row
        assert not result.report.verified and any(m.cause == "near-tie" for m in result.report.mismatches)
        assert _report(result.report) == _report(verify_problem(result.capture, 0))
    finally:
        monkeypatch.undo()


def test_many_mismatches_make_the_whole_matrices(monkeypatch):
    """Beyond MOST_ROWS mismatches at an iterate the check makes the matrices after all: the same report."""
    X, C0 = corner_problem(n=60)
    monkeypatch.setattr(trajectory_rows, "MOST_ROWS", -1)  # even no mismatch is too many
    result, rows_used = _prefetched_run(monkeypatch, X, C0, 3)
    assert rows_used == 0
    assert _report(result.report) == _report(verify_problem(result.capture, 0))


@settings(max_examples=20, deadline=None)
@given(st.integers(2, 40), st.integers(1, 6), st.integers(1, 5), st.integers(0, 2**31 - 1))
def test_rows_on_demand_are_the_whole_matrices_rows(n, d, k, seed):
    """costs_on_demand's distance and window rows, each point's alone, against sq_distances and the window of the
    whole matrix: equal bit for bit, at points of wide-ranging magnitudes."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) * 10.0 ** rng.integers(-3, 4, size=(n, 1)) + rng.normal(size=d) * 100
    C = X[rng.choice(n, size=min(k, n), replace=False)] + rng.normal(size=(min(k, n), d)) * 1e-9

    from analysis.capture import capture
    from analysis.pipeline import lloyd_scaling
    from circuits.build import build_lloyd_circuit
    from circuits.encoding import encode

    circuit = build_lloyd_circuit(d, C.shape[0], 1)
    encoded = encode(circuit.layout, X, C, scaling=lloyd_scaling(X, C))
    ref = make_reference(capture(circuit, encoded, path="structured", lean=True), 0)
    assert trajectory_rows.applies(ref, C)
    cost, E = trajectory_rows.costs_on_demand(ref, X, C)
    D = sq_distances(X, C)
    whole = ref.cost_uncertainty(ref.costs(X, C, 0), C)
    for i in range(n):
        assert cost.values[i].tobytes() == D[i].tobytes()
        assert E[i].tobytes() == whole[i].tobytes()
        assert cost.values[i, i % C.shape[0]] == D[i, i % C.shape[0]]


def _reference_for(X, C):
    from analysis.capture import capture
    from analysis.pipeline import lloyd_scaling
    from circuits.build import build_lloyd_circuit
    from circuits.encoding import encode

    circuit = build_lloyd_circuit(X.shape[1], C.shape[0], 1)
    encoded = encode(circuit.layout, X, C, scaling=lloyd_scaling(X, C))
    return make_reference(capture(circuit, encoded, path="structured", lean=True), 0)


@settings(max_examples=20, deadline=None)
@given(st.integers(1, 60), st.integers(1, 4), st.integers(1, 5), st.integers(0, 2**31 - 1), st.booleans(),
       st.sampled_from([1, 7, 2**16]))
def test_fused_assignment_is_the_whole_matrices_bit_for_bit(n, d, k, seed, grid, entries):
    """fused_assignment's labels, tie window and near rows, block by block (blocks of one point to all of them),
    against _assigned_labels, tie_window_at and reference_near on the whole matrices. ``grid``: integer points
    with exact ties and points one ulp off a bisector, decided in exact arithmetic."""
    from analysis.verify.checks import tie_window_at

    rng = np.random.default_rng(seed)
    k = min(k, n)
    if grid:
        X = rng.integers(-3, 4, size=(n, d)).astype(np.float64)
        X[: n // 3, 0] = np.nextafter(X[: n // 3, 0], np.inf)
        C = X[rng.choice(n, size=k, replace=False)].copy()
        C[:, 0] += rng.integers(-1, 2, size=k) * 0.5
    else:
        X = rng.normal(size=(n, d)) * 10.0 ** rng.integers(-2, 3, size=(n, 1))
        C = X[rng.choice(n, size=k, replace=False)] + rng.normal(size=(k, d)) * 1e-3
    ref = _reference_for(X, C)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(trajectory_rows, "_FUSED_ENTRIES", entries)
        labels, window, near = trajectory_rows.fused_assignment(ref, X, C, 0)
    whole = ref._assigned_labels(X, C, 0)
    assert labels.dtype == whole.dtype and np.array_equal(labels, whole)
    if k >= 2:
        assert window == tie_window_at(C, X, ref.tie_window)
    else:
        assert window is None
    expected = trajectory_rows.reference_near(ref, X, C, 0, whole)
    assert list(near) == list(expected)
    assert all(np.array_equal(near[i], expected[i]) for i in expected)


def test_a_feature_major_encoding_is_the_same_stream_run_in_place():
    """encode(feature_major=True): the same values as the default encoding, laid out so that each problem's
    transpose is contiguous; a lean capture runs on that memory (no copy) and the released encoding is made again,
    equal to the original; the capture is the one of the default encoding."""
    from analysis.capture import capture
    from analysis.pipeline import lloyd_scaling
    from circuits.build import build_lloyd_circuit
    from circuits.encoding import encode

    X, C0 = corner_problem(n=60)
    circuit = build_lloyd_circuit(2, 3, 3)
    scaling = lloyd_scaling(X, C0)
    plain = encode(circuit.layout, X, C0, scaling=scaling)
    fm = encode(circuit.layout, X, C0, scaling=scaling, feature_major=True)
    assert torch.equal(fm.resid, plain.resid) and fm.resid[0].T.is_contiguous() and fm._forward_owned
    assert not plain._forward_owned
    before = fm.resid.clone()
    pointer = fm.resid.untyped_storage().data_ptr()
    handed = []
    from circuits import structured

    real = structured.structured_forward
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(structured, "structured_forward", lambda model, resid, *a, **kw: handed.append(
            [s.untyped_storage().data_ptr() for s in resid._streams]) or real(model, resid, *a, **kw))
        lean = capture(circuit, fm, path="structured", lean=True)
    assert handed == [[pointer]]  # the forward ran on the encoding's own memory
    assert "resid" not in fm.__dict__  # released
    assert torch.equal(fm.resid, before)  # made again, as it was
    assert fm.resid[0].T.is_contiguous() and fm._forward_owned  # laid out as it was: a second lean run may own it
    full = capture(circuit, plain, path="structured", lean=True)
    for a, b in zip(lean.layers, full.layers):
        assert np.array_equal(a.post.labels, b.post.labels) and a.post.centroids.tobytes() == b.post.centroids.tobytes()
