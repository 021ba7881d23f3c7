"""A lean capture's sampled rows (issue 41 item 6): what it keeps of a sample of points equals, bit for bit, the full
capture's rows for those points, so that a report at scale draws the run itself.

The full capture (``keep=EVERYTHING``, as a report below the at-scale threshold takes it) is the oracle of each
assign head's query rows and each update head's key columns; the structured forward itself, run in place as a capture
runs it, of the residual of the same tokens. They are compared with the sampled ones on problems that exercise the corners: a near tie on a bisector, an empty
cluster, several chunks of positions (the forward's passes), a variant with an attention sink, random data.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from analysis.capture import EVERYTHING, AssignAttention, UpdateAttention, capture
from analysis.capture.keep import prior_sample
from analysis.pipeline import lloyd_scaling
from analysis.verify import reads
from circuits import hook_names
from circuits.encoding import encode
from circuits.structured import Recording, structured_forward
from circuits.variants import get_variant
from tests.unit.test_lean_verify import corner_problem


def _captures(X, C0, iterations, sample, variant="lloyd"):
    circuit = get_variant(variant).build(X.shape[1], C0.shape[0], iterations)
    scaling = lloyd_scaling(X, C0) if circuit.spec.unaltered else None
    full = capture(circuit, encode(circuit.layout, X, C0, scaling=scaling), path="structured")
    keep = replace(reads(circuit.spec), sample=tuple(int(i) for i in sample))
    lean = capture(circuit, encode(circuit.layout, X, C0, scaling=scaling, hold_stream=False), path="structured",
                   keep=keep)
    positions = torch.from_numpy(lean.sampled.positions)
    resid = {hook_names.resid_pre(0): full.encoded.stream()[:, positions].numpy().copy()}

    def take(layer, record):
        resid[hook_names.resid_post(layer)] = record.resid_post[:, positions].numpy().copy()

    structured_forward(circuit.runnable, full.encoded.stream(), circuit.score_hooks,
                       Recording(take, pre=False, patterns=False))
    return full, lean, resid


def _same(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


def assert_sampled_rows_are_the_full_rows(full, lean, resid, sample) -> None:
    sampled = lean.sampled
    assert sampled is not None and _same(sampled.points, np.asarray(sample, dtype=np.int64))
    seq = full.encoded.sequence
    for lc in full.layers:
        att = lc.attention
        if isinstance(att, AssignAttention):
            rows = sampled.attention[lc.layer]
            for name in ("scores", "pattern", "chosen", "margin", "leak_bound", "leak_observed", "sink_mass"):
                whole = getattr(att, name)
                assert (whole is None) == (getattr(rows, name) is None), name
                if whole is not None:
                    assert _same(getattr(rows, name), whole[:, sampled.points]), (lc.layer, name)
        elif isinstance(att, UpdateAttention):
            cols = sampled.attention[lc.layer]
            for name in ("scores", "pattern"):
                assert _same(getattr(cols, name), getattr(att, name)[:, :, sampled.positions]), (lc.layer, name)
    assert sampled.resid.keys() == resid.keys()
    for name, rows in resid.items():
        assert _same(sampled.resid[name], rows), name
    assert list(sampled.positions[:1]) == [seq.bos]
    # The lean capture left the rest out (a sink's scores, which its certificate reads, excepted).
    assert lean.lean and all((lc.attention.scores is None) != lean.kept.assign_columns for lc in lean.layers
                             if isinstance(lc.attention, AssignAttention))


def test_corner_problem_rows_equal_the_full_capture():
    """A near tie on the bisector (point 30) and a cluster that never gets a member, the tie in the sample."""
    X, C0 = corner_problem()
    sample = [0, 7, 30, 31, 60]
    full, lean, resid = _captures(X, C0, 3, sample)
    assert_sampled_rows_are_the_full_rows(full, lean, resid, sample)


def test_rows_across_the_forwards_passes_equal_the_full_capture():
    """Enough points for the forward to work on several chunks of positions (and sampled rows in each)."""
    rng = np.random.default_rng(3)
    X = np.concatenate([rng.normal(c, 0.4, size=(3000, 3)) for c in ([0, 0, 0], [3, 0, 1], [0, 4, -2])])
    C0 = X[[0, 3000, 6000]] + 0.1
    sample = prior_sample(len(X), 50, seed=5)
    full, lean, resid = _captures(X, C0, 4, sample)
    assert_sampled_rows_are_the_full_rows(full, lean, resid, sample)


def test_attention_sink_rows_equal_the_full_capture():
    """Trimmed k-means: an attention sink, whose mass per sampled point is kept too."""
    rng = np.random.default_rng(1)
    X = np.concatenate([rng.normal([0, 0], 0.3, (40, 2)), rng.normal([3, 3], 0.3, (40, 2)), [[20.0, -20.0]]])
    C0 = X[[0, 40]]
    sample = [1, 41, 80]
    full, lean, resid = _captures(X, C0, 3, sample, variant="trimmed")
    assert lean.layers[1].attention.sink_mass is not None or lean.sampled.attention[1].sink_mass is not None
    assert_sampled_rows_are_the_full_rows(full, lean, resid, sample)


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(3, 300), k=st.integers(1, 5), m=st.integers(1, 40))
def test_random_problems_rows_equal_the_full_capture(seed, n, k, m):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 2)) * rng.uniform(0.1, 10)
    C0 = X[rng.choice(n, size=min(k, n), replace=False)]
    sample = prior_sample(n, m, seed=seed)
    full, lean, resid = _captures(X, C0, 2, sample)
    assert_sampled_rows_are_the_full_rows(full, lean, resid, sample)


def test_prior_sample_is_seeded_bounded_and_ascending():
    a, b = prior_sample(10**6, 400, seed=0), prior_sample(10**6, 400, seed=0)
    assert _same(a, b) and len(np.unique(a)) == 400 and np.all(np.diff(a) > 0) and a.max() < 10**6
    assert not _same(a, prior_sample(10**6, 400, seed=1))
    assert _same(prior_sample(7, 400), np.arange(7))
    with pytest.raises(ValueError):
        prior_sample(10, 0)


def test_everything_keeps_no_sample():
    """A full capture has no sampled rows: it keeps every row."""
    assert EVERYTHING.sample == () and replace(EVERYTHING, sample=(1, 2)).everything is False
