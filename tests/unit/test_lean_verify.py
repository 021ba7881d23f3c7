"""Verification at scale (issue 31): a lean capture gives the very report a full capture gives.

At a million points ``cluster`` keeps per layer only what the verification reads (``capture(..., keep=reads(spec))``,
no point x centroid attention scores or patterns) and the objective reads one distance per point
(``analysis.verify.fast.blocks.own_sq_distances``). These tests hold each of them to the unchanged computation on
small problems built to exercise the verdict's corners: a point a few ulps off the bisector of two centroids (a near
tie decided in exact arithmetic), a centroid that never gets a member (an empty cluster), a planted wrong label
(reported at its layer), and the variants whose checks read what a lean capture would otherwise drop (an
attention sink's scores, a swapped update's pattern).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from analysis.capture import EVERYTHING, capture
from analysis.pipeline import RunOptions, lloyd_scaling, run_problem
from analysis.verify import reads, verify_problem
from analysis.verify.fast import blocks
from circuits import reference
from circuits.encoding import encode


def corner_problem(seed: int = 0, n: int = 60) -> tuple[np.ndarray, np.ndarray]:
    """Two clusters around (0, 0) and (2, 0), a point one ulp left of their bisector x = 1 (a near tie), and a third
    initial centroid far from every point (an empty cluster at every iteration)."""
    rng = np.random.default_rng(seed)
    left = rng.normal([-0.5, 0.0], 0.2, size=(n // 2, 2))
    # Symmetric about x = 1 (mirrored), so that the centroids stay where the tie is.
    right = np.column_stack([2.0 - left[:, 0], left[:, 1]])
    tie = np.array([[np.nextafter(1.0, 0.0), 0.3]])  # nearer to (0, 0), as the tie-break sends it
    X = np.concatenate([left, tie, right])
    C0 = np.array([[0.0, 0.0], [2.0, 0.0], [50.0, 50.0]])
    return X, C0


def _same_report(a, b) -> None:
    assert json.dumps(a.report.to_dict(), sort_keys=True, default=str) == json.dumps(
        b.report.to_dict(), sort_keys=True, default=str)
    assert json.dumps(a.to_json(), sort_keys=True) == json.dumps(b.to_json(), sort_keys=True)
    assert np.array_equal(a.labels, b.labels) and a.centroids.tobytes() == b.centroids.tobytes()


def test_corner_problem_has_its_corners():
    """The problem exercises what it claims to: the bisector point ties at the data's precision, cluster 2 stays
    empty."""
    X, C0 = corner_problem()
    run = run_problem(X, C0, 3, options=RunOptions(path="structured"))
    assert run.report.verified
    assert all((run.capture.assignments(t)[0] != 2).all() for t in range(4))
    assert np.array_equal(run.centroids[2], C0[2])
    # The bisector point, one ulp off it, is a tie at the data's precision at t = 0: its squared distances to C0
    # differ by less than half an ulp of each input can change.
    tie = [tie for tie in run.report.ties if tie.point == len(X) // 2 and tie.iteration == 0]
    assert tie and tie[0].candidates == [0, 1] and 0 < max(tie[0].gaps) <= max(tie[0].bounds)


@pytest.mark.parametrize("variant, dtype", [("lloyd", torch.float64), ("lloyd", torch.float32),
                                            ("trimmed:radius=0.3", torch.float64), ("soft", torch.float64),
                                            ("damped", torch.float64)])
def test_lean_capture_gives_the_full_captures_report(variant, dtype):
    X, C0 = corner_problem(1)
    if variant != "lloyd":
        C0 = C0[:2]  # the far centroid makes soft and trimmed runs degenerate, which is not what this checks
    full = run_problem(X, C0, 3, variant, dtype, options=RunOptions(path="structured", lean=False))
    lean = run_problem(X, C0, 3, variant, dtype, options=RunOptions(path="structured", lean=True))
    assert lean.capture.lean and not full.capture.lean
    assert lean.capture.path == "structured"
    _same_report(full, lean)
    spec = lean.circuit.spec
    for lc in lean.capture.layers:
        if lc.kind == "assign":
            # Dropped unless the sink's certificate reads the scores.
            assert (lc.attention.scores is None) == (spec.sink_logit is None)
            assert lc.attention.chosen is None and lc.attention.leak_observed is None
            # Y is held as its labels where it is exactly one-hot (every hard run), and reads as the same matrix.
            full_state = full.capture.layers[lc.layer].post
            assert np.array_equal(np.asarray(lc.post.assignments), full_state.assignments)
            if variant == "lloyd":
                assert not isinstance(lc.post.assignments, np.ndarray)
        elif lc.kind == "update":
            assert (lc.attention.pattern is None) == (not spec.swapped_update_normalisation)


def _plant(cap, t: int, point: int, label: int) -> int:
    """Give ``point`` the wrong ``label`` in the output of assign layer ``t`` (and so in the next block's input);
    return that layer."""
    layer = cap.circuit.assignment_layers[t]
    post = cap.layers[layer].post
    labels, Y = post.labels.copy(), np.array(post.assignments)  # a lean capture holds Y as its labels
    labels[0, point] = label
    Y[0, point] = 0.0
    Y[0, point, label] = 1.0
    planted = type(post)(**{**post.__dict__, "labels": labels, "assignments": Y})
    cap.layers[layer].post = planted
    if layer + 1 < len(cap.layers):
        cap.layers[layer + 1].pre = planted
    return layer


@pytest.mark.parametrize("lean", [False, True])
def test_planted_error_is_reported_at_its_layer(lean):
    X, C0 = corner_problem(2)
    circuit = run_problem(X, C0, 3, options=RunOptions(path="structured")).circuit
    encoded = encode(circuit.layout, X, C0, scaling=lloyd_scaling(X, C0))
    cap = capture(circuit, encoded, path="structured", keep=reads(circuit.spec) if lean else EVERYTHING)
    assert verify_problem(cap).verified
    layer = _plant(cap, 2, 5, 1)  # point 5 is in the left cluster (label 0)
    report = verify_problem(cap)
    assert not report.verified
    assert report.verdict_record.to_dict()["first_failing_layer"] == layer
    assert any(m.point == 5 and m.layer == layer for m in report.mismatches)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 9000), st.integers(1, 40), st.integers(1, 12), st.integers(0, 2**32 - 1),
       st.sampled_from([1e-6, 1.0, 1e6]), st.sampled_from(["C", "F"]))
def test_own_distances_are_the_matrix_entries_bit_for_bit(n, d, k, seed, scale, order):
    """Both memory orders of ``C``: the decoded centroids a capture holds are Fortran-ordered views, whose
    differences einsum sums in another order than a C-contiguous ``C``'s (a shortcut taken for both differed in
    the last bit at a million points)."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) * scale + rng.normal() * scale
    C = np.asarray(rng.normal(size=(k, d)) * scale, order=order)
    labels = rng.integers(0, k, n)
    own = blocks.own_sq_distances(X, C, labels)
    assert own.tobytes() == reference.sq_distances(X, C)[np.arange(n), labels].tobytes()


@settings(max_examples=25, deadline=None)
@given(arrays(np.float64, st.tuples(st.integers(1, 40), st.integers(1, 4)),
              elements=st.floats(-1e6, 1e6, allow_nan=False)), st.integers(1, 5), st.integers(0, 2**32 - 1))
def test_objective_is_the_sum_of_the_matrix_entries(X, k, seed):
    rng = np.random.default_rng(seed)
    C = rng.normal(size=(k, X.shape[1])) * 10
    labels = rng.integers(-1, k, len(X))
    inside = labels >= 0
    expected = float(reference.sq_distances(X[inside], C)[np.arange(inside.sum()), labels[inside]].sum()) \
        if inside.any() else 0.0
    assert reference.objective(X, C, labels) == expected == blocks.objective(X, C, labels)


def test_run_problem_is_lean_from_the_threshold_on(monkeypatch):
    """``lean=None`` (what ``cluster`` without ``--out`` asks for) is lean at scale, from AT_SCALE_POINTS points on."""
    from analysis import scheduler

    X, C0 = corner_problem(5)
    assert not run_problem(X, C0, 2, options=RunOptions(path="structured", lean=None)).capture.lean
    assert scheduler.AT_SCALE_POINTS > len(X)
    monkeypatch.setattr(scheduler, "AT_SCALE_POINTS", len(X))
    assert run_problem(X, C0, 2, options=RunOptions(path="structured", lean=None)).capture.lean

