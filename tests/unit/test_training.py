"""The trainable model against independent references: the loss bound, Lloyd's at high sharpness, the real
HookedTransformer, bit-exact checkpoints, reproducible and resumable training. Tiny sizes throughout."""

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from analysis.evaluation import trajectories
from circuits import reference
from circuits.training.checkpoint import CheckpointError, load_model, read_config
from circuits.training.schema import read_log
from circuits.training.construction import EXACT, InitSharpness
from circuits.training.loop import TrainConfig, train
from circuits.training.loss import kmeans_objective, soft_min_objective
from circuits.training.encoding import unit_to_task
from circuits.training.model import ModelConfig, RecurrentKMeans
from conftest import assert_forward_is_the_hooked_transformers
from circuits.problems import FAMILIES
from circuits.training.tasks import TEST, TRAIN, VALIDATION, make_tasks, task_stream


# ----------------------------------------------------------------------------------------------- tasks
def test_tasks_are_a_pure_function_of_seed_stream_and_index():
    a = make_tasks(3, 20, 4, 3, seed=5, stream=TRAIN, index=2)
    b = make_tasks(3, 20, 4, 3, seed=5, stream=TRAIN, index=2)
    np.testing.assert_array_equal(a.X, b.X)
    np.testing.assert_array_equal(a.C0, b.C0)
    for other in (make_tasks(3, 20, 4, 3, seed=5, stream=VALIDATION, index=2),
                  make_tasks(3, 20, 4, 3, seed=5, stream=TRAIN, index=3),
                  make_tasks(3, 20, 4, 3, seed=6, stream=TRAIN, index=2)):
        assert not np.array_equal(a.X, other.X)


@pytest.mark.parametrize("family", FAMILIES)
def test_tasks_are_min_max_scaled_and_initial_centroids_are_distinct_data_points(family):
    t = make_tasks(4, 30, 3, 5, seed=1, family=family)
    assert t.X.shape == (4, 30, 3) and t.C0.shape == (4, 5, 3) and t.components.shape == (4, 30)
    np.testing.assert_allclose(t.X.min(axis=1), 0.0, atol=1e-12)
    np.testing.assert_allclose(t.X.max(axis=1), 1.0, atol=1e-12)
    for x, c in zip(t.X, t.C0):
        rows = [np.flatnonzero((x == ci).all(axis=1)) for ci in c]
        assert all(len(r) == 1 for r in rows) and len({int(r[0]) for r in rows}) == 5


def test_gaussian_tasks_have_the_stated_noise_before_scaling():
    # Undo nothing: check the noise generator itself (unit variance), the part the scaling cannot hide.
    from circuits.problems import noise

    rng = np.random.default_rng(0)
    for family in ("gaussian", "laplace", "gumbel", "lognormal"):
        z = noise(rng, family, (200_000,))
        assert abs(z.mean()) < 0.02 and abs(z.std() - 1) < 0.02, family


def test_kmeans_plusplus_init_is_scikit_learns():
    from sklearn.cluster import kmeans_plusplus

    t = make_tasks(2, 25, 2, 3, seed=3, init="k-means++")
    rng = np.random.default_rng([3, TRAIN, 0])
    # Re-derive the seeds the generator drew after the data: same stream, same order.
    rng.uniform(0, 1, (2, 3, 2)), rng.integers(0, 3, (2, 25)), rng.standard_normal((2, 25, 2))
    seeds = rng.integers(0, 2**31 - 1, size=2)
    for x, c, s in zip(t.X, t.C0, seeds):
        np.testing.assert_array_equal(c, kmeans_plusplus(x, n_clusters=3, random_state=int(s))[0])


# ----------------------------------------------------------------------------------------------- loss
def test_soft_min_loss_hand_computed():
    # One point at 0, centroids at 1 and 2 (d=1): D = [1, 4]; weights softmax(-g D).
    X, C = torch.tensor([[[0.0]]], dtype=torch.float64), torch.tensor([[[1.0], [2.0]]], dtype=torch.float64)
    g = 0.5
    w1, w2 = math.exp(-g * 1), math.exp(-g * 4)
    expected = (w1 * 1 + w2 * 4) / (w1 + w2)
    assert soft_min_objective(X, C, g).item() == pytest.approx(expected, rel=1e-14)
    assert kmeans_objective(X, C).item() == 1.0


@settings(max_examples=60, deadline=None)
@given(
    X=arrays(np.float64, (2, 7, 3), elements=st.floats(-3, 3)),
    C=arrays(np.float64, (2, 4, 3), elements=st.floats(-3, 3)),
    gamma=st.floats(0.01, 1000),
)
def test_soft_min_loss_upper_bounds_the_kmeans_objective(X, C, gamma):
    Xt, Ct = torch.as_tensor(X), torch.as_tensor(C)
    n, k = X.shape[1], C.shape[1]
    loss_sum = soft_min_objective(Xt, Ct, gamma).numpy() * n  # per point -> sum over points
    objective = np.array([reference.objective(x, c) for x, c in zip(X, C)])
    assert (loss_sum >= objective - 1e-9 * (1 + objective)).all()
    # ... and is within log(k) / gamma per point of it (the softmin's entropy bound).
    assert (loss_sum <= objective + n * math.log(k) / gamma + 1e-9 * (1 + objective)).all()


# ----------------------------------------------------------------------------------------------- the model
def test_exact_construction_at_high_sharpness_evaluates_like_lloyds():
    tasks = task_stream(3, 40, 3, 4, 3, seed=2, stream=TEST)
    model = RecurrentKMeans(ModelConfig(3, 4, "exact", EXACT.to_dict()), dtype=torch.float64)
    traj = trajectories(model, tasks.X, tasks.C0, steps=6)
    for b in range(3):
        trace = reference.lloyd(tasks.X[b], tasks.C0[b], 6)
        np.testing.assert_allclose(traj.model[:, b], trace.centroids, atol=1e-12)
    np.testing.assert_array_equal(traj.lloyd, np.stack([reference.lloyd(x, c, 6).centroids
                                                        for x, c in zip(tasks.X, tasks.C0)], axis=1))
    assert (traj.readout_agreement == 1.0).all()


def test_knobs_read_back_the_construction():
    s = InitSharpness(beta=7.0, growth=0.3, beta_update=11.0, self_weight=0.25)
    knobs = RecurrentKMeans(ModelConfig(3, 4, "exact", s.to_dict())).knobs()
    assert knobs["assign_stiffness"] == pytest.approx(7.0) and knobs["assign_norm_weight"] == pytest.approx(7.0)
    assert knobs["update_member_score"] == pytest.approx(11.0)
    assert knobs["update_self_score"] == pytest.approx(11.0 * 0.25)
    assert knobs["schedule_growth"] == pytest.approx(0.3)
    assert knobs["assign_offdiag"] == 0.0 and knobs["update_distance_score"] == 0.0


def test_schedule_units_apply_the_stated_stiffness():
    # BETA <- g BETA + 1 on point tokens from BETA = 1: 1, g + 1, g (g + 1) + 1, ...
    g = 0.5
    model = RecurrentKMeans(ModelConfig(2, 3, "exact", InitSharpness(growth=g).to_dict()), dtype=torch.float64)
    tasks = make_tasks(1, 10, 2, 3, seed=0)
    enc = model.encode(tasks.X, tasks.C0)
    seen = []
    with torch.no_grad():
        model.run(enc.resid, 3, 10, observe=lambda t, r: seen.append(r[0, 1:11, model.layout["BETA"]].numpy().ravel()))
    expected, beta = [1.0], 1.0
    for _ in range(3):
        beta = g * beta + 1
        expected.append(beta)
    for t, vals in enumerate(seen):
        np.testing.assert_allclose(vals, expected[t], rtol=1e-12)


@pytest.mark.parametrize("init", ["exact", "random"])
def test_fast_forward_pass_is_the_hooked_transformers(init):
    """The training-time forward pass skips the masked point x point block; the real model computes it."""
    model = RecurrentKMeans(ModelConfig(3, 4, init, seed=1), dtype=torch.float64)
    assert_forward_is_the_hooked_transformers(model, make_tasks(2, 15, 3, 4, seed=4))


def test_centroids_after_reads_the_full_steps_and_zero_steps_is_the_initialisation():
    model = RecurrentKMeans(ModelConfig(2, 3, "random", seed=3), dtype=torch.float64)
    tasks = make_tasks(2, 12, 2, 3, seed=1)
    enc = model.encode(tasks.X, tasks.C0)
    with torch.no_grad():
        full = model.run(enc.resid, 4, 12)[-1][:, 13:, model.layout["C"]]
        loss_readout = model.centroids_after(enc.resid, 4, 12)
    torch.testing.assert_close(full, loss_readout, rtol=0, atol=0)
    exact = RecurrentKMeans(ModelConfig(2, 3, "exact"), dtype=torch.float64)
    enc = exact.encode(tasks.X, tasks.C0)
    with torch.no_grad():
        zero = exact.centroids_after(enc.resid, 0, 12)
    torch.testing.assert_close(unit_to_task(zero, enc), torch.as_tensor(tasks.C0), rtol=0, atol=1e-12)


# ----------------------------------------------------------------------------------------------- training and checkpoints
def tiny(**kw) -> TrainConfig:
    base = dict(d=2, k=3, n=16, steps=4, batch=2, train_iterations=3, eval_iterations=3, val_tasks=2, val_every=2,
                seed=0)
    base.update(kw)
    return TrainConfig(**base)


def test_checkpoint_round_trips_bit_exactly(tmp_path):
    train(tmp_path / "run", tiny())
    model, config = load_model(tmp_path / "run")
    again, _ = load_model(tmp_path / "run" / "model.safetensors")
    for (name, a), (_, b) in zip(model.state_dict().items(), again.state_dict().items()):
        assert torch.equal(a, b), name
    tasks = make_tasks(2, 16, 2, 3, seed=9)
    with torch.no_grad():
        out_a = model.run(model.encode(tasks.X, tasks.C0).resid, 3, 16)[-1]
        out_b = again.run(again.encode(tasks.X, tasks.C0).resid, 3, 16)[-1]
    assert torch.equal(out_a, out_b)
    assert config["training"] == tiny().to_dict() and read_config(tmp_path / "run") == config
    assert [r["step"] for r in read_log(tmp_path / "run")] == [0, 2, 4]


def test_loading_rejects_what_is_not_a_checkpoint(tmp_path):
    train(tmp_path / "run", tiny(steps=2))
    (tmp_path / "run" / "model.safetensors").write_bytes(b"\x80\x04 not safetensors, maybe a pickle")
    with pytest.raises(CheckpointError):
        load_model(tmp_path / "run")
    with pytest.raises(CheckpointError):
        load_model(tmp_path / "nothing-here")


def test_training_on_a_fixed_seed_is_reproducible(tmp_path):
    # keep_best=False: model.safetensors holds the last weights (the best could be the shared initial ones).
    train(tmp_path / "a", tiny(keep_best=False))
    train(tmp_path / "b", tiny(keep_best=False))
    train(tmp_path / "c", tiny(keep_best=False, seed=1))
    a, b, c = (load_model(tmp_path / x)[0].state_dict() for x in "abc")
    assert all(torch.equal(a[name], b[name]) for name in a)
    assert not all(torch.equal(a[name], c[name]) for name in a)
    log_a, log_b = read_log(tmp_path / "a"), read_log(tmp_path / "b")
    assert [r["val_ratio"] for r in log_a] == [r["val_ratio"] for r in log_b]


def test_resuming_continues_exactly(tmp_path):
    from safetensors.torch import load_file

    train(tmp_path / "whole", tiny(steps=4, keep_best=False))
    train(tmp_path / "split", tiny(steps=2, keep_best=False))
    with pytest.raises(ValueError, match="lr"):  # only the step count may change on resume
        train(tmp_path / "split", tiny(steps=4, keep_best=False, lr=0.5), resume=True)
    train(tmp_path / "split", tiny(steps=4, keep_best=False), resume=True)
    whole, split = load_file(str(tmp_path / "whole" / "state.safetensors")), load_file(str(tmp_path / "split" / "state.safetensors"))
    assert set(whole) == set(split)
    for name in whole:
        assert torch.equal(whole[name], split[name]), name


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 40).flatmap(lambda n: st.tuples(arrays(np.int64, n, elements=st.integers(0, 4)),
                                                      arrays(np.int64, n, elements=st.integers(0, 6)))))
def test_agreement_scores_are_scikit_learns(pair):
    """The evaluation's ARI and NMI (from contingency tables, without scikit-learn's per-call checks) are
    scikit-learn's: on random labelings, single blocks, singletons and equal partitions."""
    from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score

    from analysis.evaluation import agreement_scores

    truth, labels = pair
    for t, lab in ((truth, labels), (truth, truth), (truth, 3 * truth + 1), (np.zeros_like(truth), labels),
                   (np.arange(len(truth)), labels)):
        ari, nmi = agreement_scores(lab[None], t[None])
        assert ari == pytest.approx(adjusted_rand_score(t, lab), rel=0, abs=1e-12)
        assert nmi == pytest.approx(normalized_mutual_info_score(t, lab), rel=0, abs=1e-12)


@pytest.mark.parametrize("init", ["exact", "random"])
def test_masked_export_path_is_the_dense_hooked_transformer(init):
    """The exported HookedTransformer on the masked path (point x point block proved to weigh 0 and skipped) holds
    the dense forward's residual stream at every step, for weights moved everywhere (masked dimensions too)."""
    from circuits.training.hooked import run_hooked

    model = RecurrentKMeans(ModelConfig(3, 4, init, seed=1), dtype=torch.float64)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel()), dtype=p.dtype))
    tasks = make_tasks(2, 15, 3, 4, seed=4)
    enc, ht = model.encode(tasks.X, tasks.C0), model.hooked_transformer()
    dense = run_hooked(ht, model.layout, enc.resid, 3, True, keep=True)
    masked = run_hooked(ht, model.layout, enc.resid, 3, True, keep=True, n=15)
    for a, b in zip(dense, masked):
        torch.testing.assert_close(b, a, rtol=1e-12, atol=1e-12)


def test_masked_export_path_refuses_an_unmasked_model_and_cluster_falls_back_to_dense(monkeypatch):
    """Without the structural channel a point query's point keys are not provably 0: the masked path refuses,
    saying which query, and the export runs densely (still the parity check against the training forward)."""
    from analysis.verify.export import run_export
    from circuits.structured import StructuredPathUnavailable
    from circuits.training.hooked import run_hooked

    model = RecurrentKMeans(ModelConfig(3, 4, "exact", seed=1), dtype=torch.float64)
    tasks = make_tasks(1, 15, 3, 4, seed=4)
    enc, ht = model.encode(tasks.X, tasks.C0), model.hooked_transformer()
    assert run_export(ht, model, enc, 2, 15)[1] == "masked"
    with torch.no_grad():
        for block in ht.blocks:
            block.attn.W_Q[0, :, -1] = 0.0  # the structural channel is the head's last column
    with pytest.raises(StructuredPathUnavailable, match="not provably masked"):
        run_hooked(ht, model.layout, enc.resid, 2, True, n=15)
    hooked, path = run_export(ht, model, enc, 2, 15)
    assert path == "dense"
    torch.testing.assert_close(hooked[-1], run_hooked(ht, model.layout, enc.resid, 2, True)[-1], rtol=0, atol=0)
