"""The reference run started in a background thread before the circuit runs (analysis.verify.prefetch, used by
run_problem for lean runs): the same report as running it in the verification, its errors where they would be."""

from __future__ import annotations

import json

import pytest

from analysis import pipeline
from analysis.capture import capture
from analysis.pipeline import RunOptions, lloyd_scaling, run_problem
from analysis.verify import prefetch, verify_problem
from analysis.verify.prefetch import ReferenceRun
from circuits.encoding import encode
from circuits.reference import memoised_distances
from circuits.variants import get_variant
from circuits.variants.references import DegenerateUpdate
from tests.unit.test_lean_verify import corner_problem


def _report(result_report) -> str:
    return json.dumps(result_report.to_dict(), sort_keys=True, default=str)


def _encoded(variant, X, C0, iterations=3):
    circuit = get_variant(variant).build(X.shape[1], C0.shape[0], iterations)
    scaling = lloyd_scaling(X, C0) if circuit.spec.unaltered else None
    return circuit, encode(circuit.layout, X, C0, scaling=scaling)


@pytest.mark.parametrize("variant", ["lloyd", "trimmed", "soft", "damped"])
def test_prefetched_reference_gives_the_same_report(monkeypatch, variant):
    """run_problem's lean run (reference prefetched) against verifying its own capture again, the reference run
    in the verification."""
    X, C0 = corner_problem(n=60)
    started = []
    monkeypatch.setattr(pipeline, "ReferenceRun", lambda *a: started.append(1) or ReferenceRun(*a))
    result = run_problem(X, C0, 3, variant=variant, options=RunOptions(path="structured", lean=True))
    assert started  # run_problem took the prefetching path
    assert _report(result.report) == _report(verify_problem(result.capture, 0))


def test_a_reference_error_is_raised_where_the_verification_would_meet_it(monkeypatch):
    """The thread's DegenerateUpdate reaches verify_problem, which reports the reference undefined, as it does when
    it meets the error itself."""
    X, C0 = corner_problem(n=60)
    circuit, encoded = _encoded("lloyd", X, C0)
    cap = capture(circuit, encoded, path="structured", lean=True)

    def undefined(*args, **kwargs):
        raise DegenerateUpdate("members cancel")

    monkeypatch.setattr(prefetch, "make_reference", undefined)
    with memoised_distances():
        report = verify_problem(cap, 0, ReferenceRun(circuit, encoded))
    assert not report.verified
    assert any("undefined" in failure for failure in report.failures)


def test_a_prefetched_run_of_another_problem_is_refused():
    X, C0 = corner_problem(n=60)
    circuit, encoded = _encoded("lloyd", X, C0)
    other = encode(circuit.layout, X[:-1], C0, scaling=lloyd_scaling(X, C0))
    cap = capture(circuit, other, path="structured", lean=True)
    with pytest.raises(ValueError, match="another problem"):
        verify_problem(cap, 0, ReferenceRun(circuit, encoded))
