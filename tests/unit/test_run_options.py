"""``run_problem``'s options object and its one scaling: how a run executes is a :class:`RunOptions`, and the
encoder's unit scaling is computed once per run (it served the choice of the knobs and the encoding, computed for
each)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from analysis import pipeline
from analysis.pipeline import RunOptions, run_problem
from circuits import encoding


def test_run_options_are_a_frozen_record_with_the_documented_defaults():
    options = RunOptions()
    assert (options.path, options.device, options.lean, options.keep_cache, options.on_layer, options.threads) == (
        "dense", None, False, False, None, None)
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.path = "structured"


@pytest.mark.parametrize("variant, centre", [("lloyd", "median"), ("trimmed", "mean")])
def test_the_encoder_scaling_is_computed_once_and_is_the_one_encoded_with(monkeypatch, variant, centre):
    """Lloyd's median scaling was computed twice (for the knobs, then for the encoding: outside a fit no memo keeps
    it), and a distance-head variant's mean scaling once for the knobs and again inside ``encode``."""
    real, calls = encoding.fit_unit_scaling, []

    def counted(*args, **kwargs):
        calls.append(kwargs.get("centre", "mean"))
        return real(*args, **kwargs)

    monkeypatch.setattr(encoding, "fit_unit_scaling", counted)
    monkeypatch.setattr(pipeline, "fit_unit_scaling", counted)
    rng = np.random.default_rng(3)
    X = np.concatenate([rng.normal(size=(20, 2)), rng.normal(size=(20, 2)) + 6.0, [[40.0, -3.0]]])
    C0 = X[[0, 25, 40]]
    run = run_problem(X, C0, 2, variant)
    assert calls == [centre]
    expected = real(X, C0, centre=centre)
    assert np.array_equal(run.encoded.scaling.offset, expected.offset)
    assert np.array_equal(run.encoded.scaling.scale, expected.scale)
    assert run.report.verified


def test_options_reach_the_capture():
    """The path, the lean capture and the progress callback of the options are the run's."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(30, 2))
    layers = []
    run = run_problem(X, X[:3], 2, options=RunOptions(path="structured", lean=True, on_layer=layers.append))
    assert run.capture.path == "structured" and run.capture.lean
    assert layers == list(range(run.circuit.n_layers))
