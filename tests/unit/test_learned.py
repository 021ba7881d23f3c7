"""Learned safeguarded swap (circuits/learned/): the safeguards for every input and every trained value, the
learned candidate against an independent Lloyd's, the ablations, and the checkpoint read as untrusted input."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from circuits import reference
from circuits.learned import checkpoint
from circuits.learned import reference as learned
from circuits.learned import train
from circuits.swap.reference import safeguarded_swap
from circuits.training.general_tasks import general_tasks
from circuits.training.tasks import TEST

MARGIN = 1e-10


def plain_lloyd(X, C):
    """Lloyd's step written out independently: nearest centroid (lower index on ties), mean, empty keeps."""
    labels = ((X[:, None, :] - C[None]) ** 2).sum(-1).argmin(1)
    return np.array([X[labels == j].mean(0) if np.any(labels == j) else C[j] for j in range(len(C))])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(2, 12), d=st.integers(1, 3), k=st.integers(2, 4), seed=st.integers(0, 2**31 - 1),
       alphas=st.lists(st.floats(0.0, 16.0), min_size=1, max_size=4), scale=st.sampled_from([1e-3, 1.0, 1e3]))
def test_never_rises_never_above_lloyd_or_swap(n, d, k, seed, alphas, scale):
    rng = np.random.default_rng(seed)
    k = min(k, n)
    if k < 2:
        return
    X = scale * rng.standard_normal((n, d))
    if rng.random() < 0.3:
        X = np.round(X, 0)  # coinciding points and exact ties
    C0 = X[rng.choice(n, k, replace=False)]
    steps = 4
    run = learned.learned_swap(X, C0, steps, alphas, MARGIN)
    swap = safeguarded_swap(X, C0, steps, MARGIN)
    L = C0
    for t in range(1, steps + 1):
        L = plain_lloyd(X, L)
        lloyd_obj = reference.objective(X, L)
        tol = 1e-9 * max(lloyd_obj, 1e-300) + 1e-12 * scale**2
        assert run.objectives[t] <= run.objectives[t - 1] * (1 + 4 * MARGIN) + tol  # never rises
        assert run.objectives[t] <= lloyd_obj * (1 + 3 * MARGIN) + tol  # never above Lloyd's
        assert run.objectives[t] <= swap.objectives[t] * (1 + 4 * MARGIN) + tol  # never above untrained swap
        np.testing.assert_allclose(run.objectives[t], reference.objective(X, run.centroids[t]), rtol=1e-12,
                                   atol=1e-300)


def test_learned_candidate_is_lloyd_after_extrapolation():
    tb = general_tasks(4, 60, 6, 5, seed=3, stream=TEST, index=2)
    alphas = np.array([1.5, 3.0])
    seen = 0
    for X, C0 in zip(tb.X, tb.C0):
        run = learned.learned_swap(X, C0, 6, alphas, MARGIN)
        for t, choice in enumerate(run.choices):
            C = run.centroids[t]
            M = plain_lloyd(X, C)
            want = plain_lloyd(X, C + learned.alpha_at(alphas, t) * (M - C))
            np.testing.assert_allclose(run.candidate_objectives[t, 2], reference.objective(X, want), rtol=1e-12)
            if choice == "learned":
                seen += 1
                np.testing.assert_allclose(run.centroids[t + 1], want, rtol=1e-12, atol=1e-12)
    assert seen > 0  # the check above ran on a kept learned step
    assert learned.alpha_at(alphas, 0) == 1.5 and learned.alpha_at(alphas, 5) == 3.0


def test_alpha_zero_is_lloyds_step_and_loses_the_tie():
    tb = general_tasks(2, 40, 3, 4, seed=1, stream=TEST)
    for X, C0 in zip(tb.X, tb.C0):
        run = learned.learned_swap(X, C0, 5, [0.0], MARGIN)
        assert "learned" not in run.choices
        np.testing.assert_array_equal(run.candidate_objectives[:, 2], run.candidate_objectives[:, 0])


def test_without_learned_and_swap_reference_it_is_the_untrained_swap():
    tb = general_tasks(3, 50, 4, 5, seed=2, stream=TEST)
    for X, C0 in zip(tb.X, tb.C0):
        run = learned.learned_swap(X, C0, 6, [2.0], 0.0, candidates=("lloyd", "swap", "reference"))
        swap = safeguarded_swap(X, C0, 6, 0.0)
        assert run.choices == swap.choices
        np.testing.assert_array_equal(run.centroids, swap.centroids)
        np.testing.assert_array_equal(run.swap_objectives, swap.objectives)


@pytest.mark.parametrize("bad", [[], [float("nan")], [float("inf")]])
def test_bad_alphas_are_refused(bad):
    X = np.arange(6.0)[:, None]
    with pytest.raises(ValueError):
        learned.learned_swap(X, X[:2], 2, bad)


def test_safeguards_cannot_be_ablated():
    X = np.arange(6.0)[:, None]
    with pytest.raises(ValueError):
        learned.learned_swap(X, X[:2], 2, [1.0], candidates=("lloyd", "swap", "learned"))


def test_shipped_checkpoint_loads_and_round_trips(tmp_path):
    ck = checkpoint.load()
    assert 1 <= len(ck.alphas) <= checkpoint.MAX_ALPHAS and np.all(np.isfinite(ck.alphas))
    assert ck.training["score"] <= ck.training["score_untrained_swap"]
    path = checkpoint.save(checkpoint.LearnedCheckpoint(np.array([0.5, 2.0]), {"note": "x"}), tmp_path / "c.json")
    again = checkpoint.load(path)
    np.testing.assert_array_equal(again.alphas, [0.5, 2.0])
    assert again.training == {"note": "x"}


GOOD = {"format": checkpoint.FORMAT, "version": 1, "candidate": checkpoint.CANDIDATE, "alphas": [1.0]}


@pytest.mark.parametrize("change", [
    {"format": "other"}, {"version": 2}, {"candidate": "momentum"}, {"alphas": []}, {"alphas": "1.0"},
    {"alphas": [True]}, {"alphas": [-0.5]}, {"alphas": [17.0]}, {"alphas": [1.0] * 65}, {"alphas": [None]},
    {"training": [1]}])
def test_checkpoint_validation_rejects(change):
    with pytest.raises(ValueError):
        checkpoint.validate({**GOOD, **change})


@pytest.mark.parametrize("text", ["[1, 2]", "{not json", '{"alphas": [NaN]}', "\xff\xfe"])
def test_checkpoint_files_that_are_not_checkpoints(tmp_path, text):
    path = tmp_path / "bad.json"
    path.write_bytes(text.encode("latin-1"))
    with pytest.raises(ValueError):
        checkpoint.load(path)
    big = tmp_path / "big.json"
    big.write_text(" " * (checkpoint.MAX_BYTES + 1) + json.dumps(GOOD))
    with pytest.raises(ValueError, match="larger"):
        checkpoint.load(big)
    with pytest.raises(ValueError, match="no learned checkpoint"):
        checkpoint.load(tmp_path / "missing.json")
    assert len(checkpoint.validate(GOOD).alphas) == 1


def test_training_score_is_never_above_the_untrained_swap():
    tasks = train.training_tasks(seed=5, general_batches=1, per_batch=2, paper_per_shape=1, n=40)
    chains = [learned.safety_chains(X, C0, 5, train.SELECT_MARGIN) for X, C0 in tasks]
    swap = np.mean([np.mean(ch.objectives[1:] / ch.lloyd_objectives[1:]) for ch in chains])
    for alphas in ([0.0], [1.0], [4.0, 2.0]):
        assert train.score(tasks, chains, alphas, 5) <= swap * (1 + 1e-9)


def test_training_command_refuses_bad_arguments(capsys):
    assert train.main(["--steps", "0"]) == 2
    assert capsys.readouterr().err.count("\n") == 1
