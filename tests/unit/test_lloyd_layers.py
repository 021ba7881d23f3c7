"""Hypothesis-generated problems: the circuit against the numpy reference at every layer."""

from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from circuits import reference

from conftest import assert_lloyd_or_honest, run_circuit


@st.composite
def problems(draw, max_n=200, max_d=16, max_k=10):
    d = draw(st.integers(1, max_d))
    n = draw(st.integers(1, max_n))
    kind = draw(st.sampled_from(["float", "integer", "clustered"]))
    if kind == "float":
        X = draw(arrays(np.float64, (n, d), elements=st.floats(-1e3, 1e3, allow_subnormal=False)))
    elif kind == "integer":
        # Small integers: duplicates and exact ties are common.
        X = draw(arrays(np.float64, (n, d), elements=st.integers(-3, 3).map(float)))
    else:
        seed = draw(st.integers(0, 2**32 - 1))
        rng = np.random.default_rng(seed)
        centres = rng.normal(size=(draw(st.integers(1, 6)), d)) * draw(st.sampled_from([1e-3, 1.0, 1e3]))
        X = centres[rng.integers(len(centres), size=n)] + rng.normal(size=(n, d))
    distinct = np.unique(X, axis=0)
    k = draw(st.integers(1, min(max_k, len(distinct))))
    rows = draw(st.lists(st.integers(0, len(distinct) - 1), min_size=k, max_size=k, unique=True))
    C0 = distinct[rows]
    T = draw(st.integers(1, 4))
    return X, C0, T


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(problems())
def test_circuit_equals_reference_at_every_layer(problem):
    X, C0, T = problem
    result = run_circuit(X, C0, T)
    rep = result.report
    if not rep.verified:
        assert_lloyd_or_honest(rep)
        return
    s = rep.scale
    ref = reference.lloyd(X, C0, T, tie_break=result.circuit.sharpness.tie_break * s**2)
    tol = rep.tolerances.centroid
    if rep.diverged_after_tie is None:
        for t in range(T + 1):
            np.testing.assert_allclose(result.capture.centroids(t)[0], ref.centroids[t], rtol=0, atol=tol)
            tie_points = {m.point for m in rep.tie_mismatches if m.iteration == t}
            differ = set(np.flatnonzero(result.capture.assignments(t)[0] != ref.assignments[t]).tolist())
            assert differ <= tie_points
    # Every layer's N slot holds |c|^2 of its centroids.
    for lc in result.capture.layers:
        np.testing.assert_allclose(lc.post.unit_sq_norms[0], (lc.post.unit_centroids[0] ** 2).sum(-1), atol=1e-12)


def test_a_tie_break_error_that_moves_the_trajectory_is_honest_not_verified():
    """Found by Hypothesis (tests/data/tie_break_cascade.npz: 97 points in 9-d, mostly 0, one coordinate up to 1e3):
    gaps of 1e-38 fall inside the circuit's tie-break at iteration 0, which moves the trajectory, so a label at
    iteration 1 differs too. The run says NOT VERIFIED, naming the tie-break (and, where the gap is inside float64's
    window, the near tie that exact arithmetic decides otherwise); the later mismatch is its consequence, reported
    as such."""
    with np.load(Path(__file__).resolve().parents[1] / "data" / "tie_break_cascade.npz") as f:
        X, C0, T = f["X"], f["C0"], int(f["T"])
    rep = run_circuit(X, C0, T).report
    assert not rep.verified and any("tie-break" in f for f in rep.failures)
    first = {m.cause for m in rep.errors if m.iteration == 0}
    assert "tie-break" in first and first <= {"tie-break", "near-tie"}
    # Later iterations follow from the moved trajectory: compared for information, and said so, not new errors.
    assert all(m.iteration == 0 for m in rep.errors)
    assert any("for information only" in note for note in rep.notes), rep.notes
    assert_lloyd_or_honest(rep)


@settings(max_examples=15, deadline=None)
@given(problems(max_n=60, max_d=4, max_k=5), st.sampled_from([1e-8, 1.0, 1e8]), st.sampled_from([0.0, 1e8]))
def test_units_do_not_matter(problem, scale, offset):
    """Scaling and shifting the data scales and shifts the answer: the circuit works in unit-scaled coordinates."""
    X, C0, T = problem
    assume(offset == 0.0 or scale >= 1e-3)  # 1e8 offset with 1e-8 spread is below float64 resolution
    result = run_circuit(X * scale + offset, C0 * scale + offset, T)
    if not result.report.verified:
        assert_lloyd_or_honest(result.report)
        return
