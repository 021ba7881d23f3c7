"""build_report and the views take what a user has in hand: a run, a capture, a fitted estimator, or an
ActivationCache with the encoding it ran on; each must give what the run itself gives."""

import dataclasses

import numpy as np
import pytest
import torch
from sklearn.datasets import make_blobs

from analysis import views
from analysis.estimator import CircuitKMeans
from analysis.pipeline import as_run, lloyd_scaling, run_problem
from analysis.report import build_report
from circuits import hook_names
from circuits.encoding import encode


@pytest.fixture(scope="module")
def fitted():
    X, _ = make_blobs(40, n_features=2, centers=3, random_state=4)
    est = CircuitKMeans(3, max_iter=3, random_state=2, path="dense").fit(X)
    run = run_problem(X, est.init_centroids_, 3, circuit=est.circuit_)
    return X, est, run


def _cache_and_encoding(X, est, fwd_hooks=()):
    circuit, C0 = est.circuit_, est.init_centroids_
    encoded = encode(circuit.layout, X, C0, scaling=lloyd_scaling(X, C0))
    with torch.no_grad(), circuit.model.hooks(fwd_hooks=list(fwd_hooks)):
        _, cache = circuit.model.run_with_cache(encoded.resid)
    return cache, encoded



def test_every_input_gives_the_report_of_the_run(fitted):
    X, est, run = fitted
    reference = build_report(run)
    cache = _cache_and_encoding(X, est)
    for obj in (run.capture, est, cache):
        report = build_report(obj)
        assert [s.key for s in report.sections] == [s.key for s in reference.sections]
        # A cache is said to be read as it ran (hooks included), in one message; the rest of the header is the run's.
        read = [m for m in report.header.messages if m.startswith("read from the run's ActivationCache")]
        assert len(read) == (1 if obj is cache else 0)
        assert dataclasses.replace(report.header, messages=[m for m in report.header.messages if m not in read]) \
            == reference.header
        got, want = as_run(obj), run
        np.testing.assert_array_equal(got.labels, want.labels)
        np.testing.assert_array_equal(got.centroids, want.centroids)
        assert got.report.verified
        for view in (views.assign_attention, views.update_attention):
            a, b = view(obj).data, view(run).data
            np.testing.assert_array_equal(np.asarray(a["pattern"][0]), np.asarray(b["pattern"][0]))


def test_a_cache_is_read_as_it_ran(fitted):
    """An ablated cache reports the ablated run, not a fresh one: the last assign block's MLP never commits Y."""
    X, est, _ = fitted
    last_assign = est.circuit_.assignment_layers[-1]
    ablate = (hook_names.mlp_out(last_assign), lambda act, hook: torch.zeros_like(act))
    run = as_run(_cache_and_encoding(X, est, [ablate]))
    assert not run.report.verified
    assert (run.labels != est.labels_).sum() > 0
    assert any("assignment" in failure for failure in run.report.failures)


def test_what_cannot_be_read_is_refused(fitted):
    X, est, _ = fitted
    with pytest.raises(TypeError, match="not fitted"):
        build_report(CircuitKMeans(3))
    with pytest.raises(TypeError, match="expected a RunResult"):
        views.assign_attention(X)
    cache, encoded = _cache_and_encoding(X, est)
    partial = {name: cache[name] for name in cache.keys() if "resid" in name}
    from circuits.tl import ActivationCache

    with pytest.raises(ValueError, match="cache lacks"):
        as_run((ActivationCache(partial, est.model_), encoded))
    other = encode(est.circuit_.layout, X[:10], est.init_centroids_)
    with pytest.raises(ValueError, match="encoding the cache was run on"):
        as_run((cache, other))
