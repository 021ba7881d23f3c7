"""The reference run submitted to the run's worker before the circuit runs (analysis.verify.prefetch, used by
run_problem at scale): the same report as running it in the verification, its errors where they would be."""

from __future__ import annotations

import json

import pytest

from analysis import pipeline
from analysis import scheduler as scheduling
from analysis.capture import capture
from analysis.pipeline import RunOptions, lloyd_scaling, run_problem
from analysis.scheduler import Scheduler
from analysis.verify import prefetch, reads, verify_problem
from circuits.encoding import encode
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
    monkeypatch.setattr(scheduling, "AT_SCALE_POINTS", len(X))
    started = []
    monkeypatch.setattr(pipeline, "prefetch", lambda *a: started.append(1) or prefetch.prefetch(*a))
    result = run_problem(X, C0, 3, variant=variant, options=RunOptions(path="structured", lean=True, threads=2))
    assert started  # run_problem took the prefetching path
    assert _report(result.report) == _report(verify_problem(result.capture, 0))


def test_a_reference_error_is_raised_where_the_verification_would_meet_it(monkeypatch):
    """The thread's DegenerateUpdate reaches verify_problem, which reports the reference undefined, as it does when
    it meets the error itself."""
    X, C0 = corner_problem(n=60)
    circuit, encoded = _encoded("lloyd", X, C0)
    cap = capture(circuit, encoded, path="structured", keep=reads(circuit.spec))

    def undefined(*args, **kwargs):
        raise DegenerateUpdate("members cancel")

    monkeypatch.setattr(prefetch, "run_reference", undefined)
    scheduler = Scheduler(threads=2, at_scale=True)
    report = verify_problem(cap, 0, scheduler, prefetch.prefetch(scheduler, circuit, encoded))
    scheduler.close()
    assert not report.verified
    assert any("undefined" in failure for failure in report.failures)


def test_a_prefetched_run_of_another_problem_is_refused():
    X, C0 = corner_problem(n=60)
    circuit, encoded = _encoded("lloyd", X, C0)
    other = encode(circuit.layout, X[:-1], C0, scaling=lloyd_scaling(X, C0))
    cap = capture(circuit, other, path="structured", keep=reads(circuit.spec))
    scheduler = Scheduler(threads=2, at_scale=True)
    with pytest.raises(ValueError, match="another problem"):
        verify_problem(cap, 0, scheduler, prefetch.prefetch(scheduler, circuit, encoded))
    scheduler.close()
