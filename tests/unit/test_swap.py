"""Safeguarded swap: the numpy reference on hand-computed cases, and the transformer construction against it.

The transformer (:mod:`circuits.swap`) must equal the reference (:mod:`circuits.swap.reference`) step for step:
the same candidate kept, the same centroids and objectives (to rounding), in the user's units; its objective
never rises and is never above Lloyd's (:func:`circuits.reference.lloyd`, an independent reference).
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch
from sklearn.datasets import load_iris

from circuits import hook_names, reference
from circuits.swap import reference as swap
from circuits.swap.build import build_swap_circuit
from circuits.swap.layout import SwapSequence
from circuits.swap.stages import STEP_BLOCKS
from circuits.training.general_tasks import general_tasks
from circuits.training.tasks import TEST

STEPS = 5
MARGIN = 1e-10  # the circuit's default select_margin

# Two 1-d problems worked by hand (k = 2).
SWAP_WINS = (np.array([[0.0], [1.0], [10.0], [11.0]]), np.array([[0.0], [1.0]]))
LLOYD_WINS = (np.array([[0.0], [2.0], [3.0], [10.0]]), np.array([[0.0], [10.0]]))


@functools.lru_cache(maxsize=16)
def circuit(d: int, k: int, steps: int = STEPS):
    return build_swap_circuit(d, k, steps)


def test_reference_swap_wins_by_hand():
    X, C0 = SWAP_WINS
    # Nearest / second-nearest of 0, 1, 10, 11 to {0, 1}: d1 = 0, 0, 81, 100; d2 - d1 = 1, 1, 19, 21.
    np.testing.assert_array_equal(swap.removal_costs(X, C0), [1.0, 41.0])
    np.testing.assert_array_equal(swap.swapped(X, C0), [[11.0], [1.0]])  # centroid 0 onto the farthest point, 11
    np.testing.assert_allclose(swap.lloyd_step(X, C0), [[0.0], [22 / 3]])
    run = swap.safeguarded_swap(X, C0, 2)
    # Candidates: Lloyd's [0, 22/3] (objective 1 + 64/9 + 121/9 = 194/9), swap's [10.5, 0.5] (objective 1).
    assert run.choices[0] == "swap"
    np.testing.assert_allclose(run.centroids[1], [[10.5], [0.5]])
    np.testing.assert_allclose(run.objectives, [181.0, 1.0, 1.0])
    np.testing.assert_allclose(run.lloyd_objectives[1], 194 / 9)
    # Step 2: Lloyd's [0.5, 10.5] from the reference chain ties with Lloyd's step from [10.5, 0.5]: tie order.
    assert run.choices[1] == "lloyd"


def test_reference_lloyd_wins_by_hand():
    X, C0 = LLOYD_WINS
    # d1 = 0, 4, 9, 0 and d2 = 100, 64, 49, 100: centroid 0 costs 100 + 60 + 40, centroid 1 costs 100.
    np.testing.assert_array_equal(swap.removal_costs(X, C0), [200.0, 100.0])
    np.testing.assert_array_equal(swap.swapped(X, C0), [[0.0], [3.0]])
    run = swap.safeguarded_swap(X, C0, 1)
    # Lloyd's [5/3, 10] (objective 42/9) beats the swap's [0, 5] (objective 9 + 4 + 25 = 38).
    assert run.choices == ["lloyd"]
    np.testing.assert_allclose(run.centroids[1], [[5 / 3], [10.0]])
    np.testing.assert_allclose(run.objectives[1], 42 / 9)


def test_reference_select_tie_order_and_margin():
    assert swap.select(np.array([2.0, 2.0, 2.0])) == 0
    assert swap.select(np.array([2.0, 1.0, 1.0])) == 1
    assert swap.select(np.array([2.0, 2.0, 1.0])) == 2
    # Within the relative margin a later candidate does not win; beyond it, it does.
    assert swap.select(np.array([1.0, 1.0 - 1e-12, 1.0]), 1e-10) == 0
    assert swap.select(np.array([1.0, 1.0 - 1e-9, 1.0]), 1e-10) == 1


def assert_matches_reference(X: np.ndarray, C0: np.ndarray, steps: int = STEPS) -> swap.SwapTrajectory:
    circ = circuit(X.shape[1], C0.shape[0], steps)
    # The references break ties as the circuit does: within its tie-break, in user units, the lower index wins.
    tie = circ.user_tie_break(X, C0)
    run, ref = circ.run(X, C0), swap.safeguarded_swap(X, C0, steps, MARGIN, tie)
    lloyd = reference.lloyd(X, C0, steps, tie_break=tie)
    assert run.choices == ref.choices
    size = np.abs(ref.centroids - X.mean(axis=0)).max()
    np.testing.assert_allclose(run.centroids, ref.centroids, rtol=0, atol=1e-9 * size)
    np.testing.assert_allclose(run.lloyd_centroids, ref.lloyd_centroids, rtol=0, atol=1e-9 * size)
    np.testing.assert_allclose(run.objectives, ref.objectives, rtol=1e-9)
    np.testing.assert_allclose(run.lloyd_objectives, ref.lloyd_objectives, rtol=1e-9)
    # Independent of the swap reference: the circuit's Lloyd's group is Lloyd's algorithm.
    np.testing.assert_allclose(run.lloyd_centroids, lloyd.centroids, rtol=0, atol=1e-9 * size)
    # The objective never rises, and is never above Lloyd's (beyond the stated tie-order margin).
    lloyd_obj = np.array([reference.objective(X, c) for c in lloyd.centroids])
    assert (np.diff(run.objectives) <= 1e-12 * run.objectives[:-1]).all()
    assert (run.objectives <= lloyd_obj * (1 + 2 * MARGIN + 1e-12)).all()
    return ref


def test_transformer_equals_the_hand_computed_cases():
    for X, C0 in (SWAP_WINS, LLOYD_WINS):
        assert_matches_reference(X, C0)
    run = circuit(1, 2).run(*SWAP_WINS)
    np.testing.assert_allclose(run.centroids[1], [[10.5], [0.5]], rtol=1e-14)
    # Each candidate's objective, as the circuit computes it (mean over points on BOS, back in user units).
    np.testing.assert_allclose(run.candidate_objectives[0], [194 / 9, 1.0, 194 / 9], rtol=1e-12)
    assert circuit(1, 2).run(*LLOYD_WINS).choices[0] == "lloyd"


def test_swap_report_holds_a_run_to_its_reference_and_names_what_parts():
    """SwapReport's contract (analysis.verify.swap): the same candidate kept at every step and centroids within
    CENTROID_TOLERANCE of the data's spread; a run that keeps another candidate, or whose centroids move further,
    is not verified, and the step is named."""
    from dataclasses import replace

    from analysis.verify.swap import CENTROID_TOLERANCE, spread, verify_swap

    X, C0 = SWAP_WINS
    run = circuit(1, 2).run(X, C0)
    report = verify_swap(run, X, C0, MARGIN, 0.0)
    assert report.verified and report.problems == [] and report.spread == spread(X) == 5.5
    ref = report.reference
    assert ref.choices == run.choices[: len(ref.choices)]
    # Centroids off by twice the tolerance at step 2 (and within it at step 1): not verified, step 2 named.
    shifted = [np.array(c, copy=True) for c in ref.centroids]
    shifted[1] += 0.5 * CENTROID_TOLERANCE * 5.5
    shifted[2] += 2 * CENTROID_TOLERANCE * 5.5
    moved = verify_swap(replace(ref, centroids=np.stack(shifted)), X, C0, MARGIN, 0.0)
    assert not moved.verified and len(moved.problems) == 1 and moved.problems[0].startswith("step 2: centroids")
    other = verify_swap(replace(ref, choices=["lloyd"] + list(ref.choices[1:])), X, C0, MARGIN, 0.0)
    assert not other.verified and other.problems[0] == "step 1: the circuit kept 'lloyd', the reference 'swap'"


# Batches of the held-out general stream (n = 20, shapes drawn with d <= 4, k <= 4); random index 6 reaches a
# step where Lloyd's reference chain wins.
GENERAL = [("random", 6), ("random", 10), ("random", 17), ("k-means++", 0), ("k-means++", 3)]


@pytest.mark.parametrize("init,index", GENERAL)
def test_transformer_equals_reference_on_general_tasks(init, index):
    batch = general_tasks(3, 20, 4, 4, 0, TEST, index, init=init)
    choices = [assert_matches_reference(x, c).choices for x, c in zip(batch.X, batch.C0)]
    if (init, index) == ("random", 6):
        assert any("reference" in c for c in choices) and any("swap" in c for c in choices)


def test_transformer_equals_reference_on_iris():
    """Iris has points whose two nearest initial centroids tie to rounding (gaps 0 and 1e-16): the circuit's
    tie-break gives them to the lower index, and so does the reference given the same tie-break."""
    X = load_iris().data
    C0 = X[np.random.default_rng(0).choice(len(X), 3, replace=False)]
    assert_matches_reference(X, C0, steps=3)


@pytest.mark.parametrize("init,index", GENERAL[:1] + GENERAL[3:4])
def test_structured_path_is_the_dense_forward_at_every_block(init, index):
    """The structured path (the step model ``steps`` times, grouped attention) and the stacked HookedTransformer's
    dense forward hold the same residual stream after every block of every step, and read the same run."""
    batch = general_tasks(3, 20, 4, 4, 0, TEST, index, init=init)
    for X, C0 in zip(batch.X, batch.C0):
        assert_paths_agree(circuit(X.shape[1], C0.shape[0]), X, C0)


def assert_paths_agree(circ, X: np.ndarray, C0: np.ndarray) -> dict:
    """The paths' residual streams after every block of every step, within 1e-12, and the same run read from each
    (also used by tests/unit/test_learned_circuit.py); the dense residuals, by ``(step, block)``. The structured
    path runs the step models until the stacked model exists and the stacked model afterwards: both are held to
    the stacked model's dense forward."""
    import dataclasses

    resid, _, _ = circ.encode(X, C0)
    unbuilt = dataclasses.replace(circ, _model=None)  # the same weights, no stacked model yet: the step models run
    dense = circ.residuals(resid, "dense", circ.STEP)
    assert len(dense) == circ.n_layers == circ.model.cfg.n_layers
    for structured in (unbuilt.residuals(resid, "structured", circ.STEP), circ.residuals(resid, "structured",
                                                                                        circ.STEP)):
        assert dense.keys() == structured.keys()
        for key, value in dense.items():
            # Unit-scaled stream (points and centroids in the unit ball): only the summation order differs.
            torch.testing.assert_close(structured[key], value, rtol=0, atol=1e-12, msg=str(key))
    slow = circ.run(X, C0, path="dense")
    for fast in (unbuilt.run(X, C0), circ.run(X, C0)):
        assert (fast.path, slow.path) == ("structured", "dense") and fast.choices == slow.choices
        np.testing.assert_allclose(fast.centroids, slow.centroids, rtol=0, atol=1e-12 * np.abs(X).max())
    return dense


def test_an_edit_of_the_stacked_model_runs_on_every_path():
    """Once ``circuit.model`` exists the structured path runs it, so a weight edited there (through ``.data``)
    counts on ``auto`` as on ``dense``; before, ``auto`` ran the step models, as built."""
    X, C0 = SWAP_WINS
    circ = build_swap_circuit(1, 2, 2)  # its own: the cached test circuits stay as built
    before = circ.run(X, C0)
    W_out = circ.model.blocks[circ.layer(0, "select")].mlp.W_out
    W_out.data.mul_(0.5)
    fast, slow = circ.run(X, C0), circ.run(X, C0, path="dense")
    assert fast.path == "structured" and fast.choices == slow.choices
    np.testing.assert_allclose(fast.centroids, slow.centroids, rtol=0, atol=1e-12 * np.abs(X).max())
    assert not np.allclose(fast.centroids, before.centroids)


def test_steps_share_weights_and_leave_every_staging_slot_empty():
    X, C0 = SWAP_WINS
    circ = circuit(1, 2)
    model, per = circ.model, len(STEP_BLOCKS)
    for name, param in model.blocks[0].named_parameters():
        assert torch.equal(param, dict(model.blocks[per].named_parameters())[name])
    # The structured path runs the step model once per step: its blocks are every step's blocks.
    for t in range(circ.steps):
        for layer, block in enumerate(circ.step_model.blocks):
            stacked = dict(model.blocks[t * per + layer].named_parameters())
            for name, param in block.named_parameters():
                assert torch.equal(param, stacked[name])
    assert torch.equal(circ.step_model.unembed.W_U, model.unembed.W_U)
    resid, seq, _ = circ.encode(X, C0)
    assert isinstance(seq, SwapSequence) and seq.n_tokens == 1 + 4 + 3 * 2
    ends = [hook_names.resid_post(circ.layer(t, "select")) for t in range(circ.steps)]
    _, cache = model.run_with_cache(resid, names_filter=lambda name: name in ends)
    staging = [name for name in circ.layout.names if name.endswith("_stage") or name in ("OBJ", "OBJ0", "OWN_OBJ")]
    for hook in ends:
        for name in staging:
            assert torch.count_nonzero(cache[hook][..., circ.layout[name]]) == 0, (hook, name)


@pytest.mark.parametrize("knob", [{"select_margin": 1e-3}, {"select_margin": -1e-12}, {"beta_select": 1e300},
                                  {"beta_select": 1e10}, {"tie_break": 0.0}, {"beta": 1e12, "tie_break": 1e-11},
                                  {"beta_update": 100.0}, {"mask": 3.0}, {"dtype": torch.float32}])
def test_knobs_outside_their_safe_range_are_refused(knob):
    with pytest.raises(ValueError):
        build_swap_circuit(2, 3, 1, **knob)


def test_bad_shapes_are_refused():
    with pytest.raises(ValueError):
        build_swap_circuit(2, 1, 1)
    with pytest.raises(ValueError):
        circuit(1, 2).run(np.zeros((4, 2)), np.zeros((2, 2)))
    with pytest.raises(ValueError):
        circuit(1, 2).run(np.array([[0.0], [np.nan]]), np.zeros((2, 1)))


def test_auto_path_falls_back_to_the_dense_forward_where_the_structured_path_refuses(monkeypatch):
    import circuits.structured as structured

    def refuse(*args, **kwargs):
        raise structured.StructuredPathUnavailable("300 distinct queries and 300 distinct keys")

    monkeypatch.setattr(structured, "structured_forward", refuse)
    circ, (X, C0) = circuit(1, 2), SWAP_WINS
    run = circ.run(X, C0)
    assert run.path == "dense" and "300 distinct queries" in run.path_note
    np.testing.assert_allclose(run.centroids[1], [[10.5], [0.5]], rtol=1e-14)
    with pytest.raises(structured.StructuredPathUnavailable):
        circ.run(X, C0, path="structured")
    with pytest.raises(ValueError, match="path must be one of"):
        circ.run(X, C0, path="sparse")
