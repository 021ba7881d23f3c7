"""The learned safeguarded swap as transformer weights (:mod:`circuits.learned.build`) against its numpy reference.

The transformer must equal :func:`circuits.learned.reference.learned_swap` (all five candidates) step for step,
within the swap circuit's tolerances: the same candidate kept, the same centroids and objectives, for several
factors including the checkpoint's; its Lloyd's group must be Lloyd's algorithm and its swap chain the untrained
safeguarded swap (independent references). A wrong factor must show: the extrapolated centroids and the learned
candidate's objectives then differ from the reference's.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch
from sklearn.datasets import load_iris
from test_swap import assert_paths_agree

from circuits import hook_names, reference
from circuits.learned import checkpoint
from circuits.learned.build import build_learned_circuit, mask_for
from circuits.learned.reference import CANDIDATES, learned_swap
from circuits.learned.stages import ALPHA_BLOCK, STEP_BLOCKS
from circuits.swap.reference import safeguarded_swap
from circuits.training.general_tasks import general_tasks
from circuits.training.tasks import TEST

STEPS = 5
MARGIN = 1e-10  # the circuit's default select_margin
TRAINED = tuple(float(a) for a in checkpoint.load().alphas)
ALPHAS = [TRAINED, (0.0,), (1.0,), (3.0, 0.5)]


@functools.lru_cache(maxsize=32)
def circuit(d: int, k: int, alphas: tuple[float, ...], steps: int = STEPS):
    return build_learned_circuit(d, k, steps, list(alphas))


def tasks(index: int, init: str = "random"):
    batch = general_tasks(3, 20, 4, 4, 0, TEST, index, init=init)
    return list(zip(batch.X, batch.C0))


def assert_matches_reference(X, C0, alphas, steps: int = STEPS):
    circ = circuit(X.shape[1], C0.shape[0], alphas, steps)
    tie = circ.user_tie_break(X, C0)
    run = circ.run(X, C0)
    ref = learned_swap(X, C0, steps, list(alphas), MARGIN, tie)
    assert run.path == "structured" and run.choices == ref.choices
    size = np.abs(ref.centroids - X.mean(axis=0)).max()
    np.testing.assert_allclose(run.centroids, ref.centroids, rtol=0, atol=1e-9 * size)
    np.testing.assert_allclose(run.lloyd_centroids, ref.lloyd_centroids, rtol=0, atol=1e-9 * size)
    np.testing.assert_allclose(run.objectives, ref.objectives, rtol=1e-9)
    np.testing.assert_allclose(run.lloyd_objectives, ref.lloyd_objectives, rtol=1e-9)
    np.testing.assert_allclose(run.swap_objectives, ref.swap_objectives, rtol=1e-9)
    np.testing.assert_allclose(run.candidate_objectives, ref.candidate_objectives, rtol=1e-9)
    # Independent of the learned reference: the circuit's Lloyd's group is Lloyd's algorithm, its swap chain the
    # untrained safeguarded swap, and the kept objective never rises and is never above either (beyond the
    # tie-order margins of their candidates, ranks 3 and 4).
    lloyd = reference.lloyd(X, C0, steps, tie_break=tie)
    np.testing.assert_allclose(run.lloyd_centroids, lloyd.centroids, rtol=0, atol=1e-9 * size)
    untrained = safeguarded_swap(X, C0, steps, MARGIN, tie)
    np.testing.assert_allclose(run.swap_objectives, untrained.objectives, rtol=1e-9)
    lloyd_obj = np.array([reference.objective(X, c) for c in lloyd.centroids])
    assert (np.diff(run.objectives) <= 1e-12 * run.objectives[:-1]).all()
    assert (run.objectives <= lloyd_obj * (1 + 3 * MARGIN + 1e-12)).all()
    assert (run.objectives <= untrained.objectives * (1 + 4 * MARGIN + 1e-12)).all()
    return run


@pytest.mark.parametrize("alphas", ALPHAS, ids=[str(a) for a in ALPHAS])
def test_transformer_equals_reference_step_for_step(alphas):
    choices = [assert_matches_reference(X, C0, alphas).choices
               for index, init in ((6, "random"), (10, "random"), (0, "k-means++")) for X, C0 in tasks(index, init)]
    kept = {c for run in choices for c in run}
    if alphas == TRAINED:
        assert {"learned", "swap", "lloyd"} <= kept  # the trained candidate is kept, and so are the others
    if alphas == (0.0,):
        assert "learned" not in kept  # alpha 0 is Lloyd's step: it ties with candidate 0 and loses the tie order


def test_transformer_equals_reference_on_iris():
    X = load_iris().data
    C0 = X[np.random.default_rng(0).choice(len(X), 3, replace=False)]
    assert_matches_reference(X, C0, TRAINED, steps=3)


@pytest.mark.parametrize("alphas", [TRAINED, (3.0, 0.5)], ids=str)
def test_the_extrapolated_group_holds_c_plus_alpha_times_lloyds_move(alphas):
    """After ``propose``, step t's extrapolated tokens hold ``C_t + alpha_t (M(C_t) - C_t)`` (``M`` Lloyd's step):
    the factor itself is checked, not only the candidate it leads to (which is piecewise constant in it)."""
    from circuits.encoding import read
    from circuits.swap.reference import lloyd_step

    for X, C0 in tasks(10):
        circ = circuit(X.shape[1], C0.shape[0], alphas)
        tie, run = circ.user_tie_break(X, C0), circ.run(X, C0)
        resid, seq, scaling = circ.encode(X, C0)
        after = circ.residuals(resid, "structured", ("propose",))
        size = np.abs(run.centroids - X.mean(axis=0)).max()
        for t in range(circ.steps):
            E = scaling.from_unit(read(circ.layout, after[t, "propose"], "C", seq.group("extrapolated")))[0]
            C = run.centroids[t]
            want = C + circ.alpha(t) * (lloyd_step(X, C, tie) - C)
            np.testing.assert_allclose(E, want, rtol=0, atol=1e-9 * size * max(1.0, circ.alpha(t)), err_msg=str(t))


def test_the_swap_chain_is_the_untrained_safeguarded_swap():
    """After ``select_S``, step t's swap-chain tokens hold the untrained safeguarded swap's ``S_{t+1}``."""
    from circuits.encoding import read

    for X, C0 in tasks(6):
        circ = circuit(X.shape[1], C0.shape[0], TRAINED)
        resid, seq, scaling = circ.encode(X, C0)
        after = circ.residuals(resid, "structured", ("select_S",))
        untrained = safeguarded_swap(X, C0, circ.steps, MARGIN, circ.user_tie_break(X, C0))
        size = np.abs(untrained.centroids - X.mean(axis=0)).max()
        for t in range(circ.steps):
            S = scaling.from_unit(read(circ.layout, after[t, "select_S"], "C", seq.group("swapchain")))[0]
            np.testing.assert_allclose(S, untrained.centroids[t + 1], rtol=0, atol=1e-9 * size, err_msg=str(t))


def test_a_wrong_factor_is_detected():
    """The circuit built with one factor is not the reference of another: the learned candidate's objectives
    differ (and the comparison of the test above would fail). On this task 2.0 and 2.5 differ by 20% at step 1."""
    X, C0 = tasks(6)[1]
    circ = circuit(X.shape[1], C0.shape[0], (2.0,))
    run = circ.run(X, C0)
    col = CANDIDATES.index("learned")
    right = learned_swap(X, C0, STEPS, [2.0], MARGIN, circ.user_tie_break(X, C0))
    wrong = learned_swap(X, C0, STEPS, [2.5], MARGIN, circ.user_tie_break(X, C0))
    np.testing.assert_allclose(run.candidate_objectives[:, col], right.candidate_objectives[:, col], rtol=1e-9)
    assert not np.allclose(run.candidate_objectives[:, col], wrong.candidate_objectives[:, col], rtol=1e-6)


def test_each_step_holds_its_factor_in_the_extrapolate_weights_only():
    """Step t's ``extrapolate`` layer is the alpha-1 block with ``W_O`` times ``alpha_t`` (what the drift report
    reads); every other layer has the same weights in every step."""
    alphas = (2.0, 4.0, 5.5)
    circ, base = circuit(2, 3, alphas, 4), circuit(2, 3, (1.0,), 1)
    model, per = circ.model, len(STEP_BLOCKS)
    at = STEP_BLOCKS.index(ALPHA_BLOCK)
    for t in range(circ.steps):
        layer = circ.layer(t, ALPHA_BLOCK)
        W_O, unit = model.blocks[layer].attn.W_O, base.model.blocks[at].attn.W_O
        torch.testing.assert_close(W_O, alphas[min(t, 2)] * unit, rtol=0, atol=0)
    # Read back in the named basis, as a drift report would; a changed weight shows as a changed factor.
    state = {name: p.detach().clone() for name, p in model.state_dict().items()}
    np.testing.assert_array_equal(circ.factors_in(state), [2.0, 4.0, 5.5, 5.5])
    state[hook_names.param(circ.layer(1, ALPHA_BLOCK), "attn", "W_O")] *= 1.25
    np.testing.assert_array_equal(circ.factors_in(state), [2.0, 5.0, 5.5, 5.5])
    for t in range(circ.steps):
        for i in range(per):
            if i != at:
                for name, param in model.blocks[t * per + i].named_parameters():
                    assert torch.equal(param, dict(model.blocks[i].named_parameters())[name]), (t, i, name)
        # The structured path's step model is the stacked model's step, layer for layer.
        for i, block in enumerate(circ.step_model_at(t).blocks):
            stacked = dict(model.blocks[t * per + i].named_parameters())
            for name, param in block.named_parameters():
                assert torch.equal(param, stacked[name]), (t, i, name)


def test_structured_path_is_the_dense_forward_at_every_block():
    X, C0 = tasks(10)[1]
    circ = circuit(X.shape[1], C0.shape[0], TRAINED)
    dense = assert_paths_agree(circ, X, C0)
    # Every staging slot is empty at the end of every step.
    staging = [name for name in circ.layout.names if name.endswith("_stage") or name in ("OBJ", "OBJ0", "OWN_OBJ")]
    for t in range(circ.steps):
        end = dense[t, STEP_BLOCKS[-1]]
        for name in staging:
            assert torch.count_nonzero(end[..., circ.layout[name]]) == 0, (t, name)


@pytest.mark.parametrize("alphas", [[-0.5], [17.0], [float("nan")], []])
def test_factors_outside_the_checkpoint_range_are_refused(alphas):
    with pytest.raises(ValueError):
        build_learned_circuit(2, 3, 1, alphas)


def test_bad_shapes_and_knobs_are_refused():
    with pytest.raises(ValueError):
        build_learned_circuit(2, 1, 1, [1.0])
    with pytest.raises(ValueError):
        build_learned_circuit(2, 3, 1, [1.0], dtype=torch.float32)
    with pytest.raises(ValueError):
        build_learned_circuit(2, 3, 1, [1.0], mask=3.0)


def test_the_default_mask_covers_the_factors_and_a_smaller_one_is_named_at_run():
    """A circuit built with a mask below what its run reaches says so in its run (``problems``), and the run is
    not verified (it used to raise after the whole circuit had run)."""
    from analysis.verify.swap import verify_learned

    assert mask_for(np.array([0.5])) == 16.0 and mask_for(np.array([2.0, 6.0])) == 4 * 36 + 12
    X, C0 = tasks(6)[0]
    circ = build_learned_circuit(X.shape[1], C0.shape[0], 2, [6.0], mask=16.0)
    run = circ.run(X, C0)
    assert run.problems and all("beyond what mask=16" in p for p in run.problems)
    checked = verify_learned(run, X, C0, circ)
    assert not checked.verified and any("beyond what mask=16" in p for p in checked.problems)
