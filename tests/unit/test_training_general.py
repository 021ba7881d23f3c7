"""A general model (one checkpoint for any d <= D, k <= K) against independent references: Lloyd's (numpy) at high
sharpness for every smaller shape, the real HookedTransformer for every shape, the fixed-shape encoding where the
shape is the capacity, the anytime loss by hand, and checkpoints of both formats. Tiny sizes throughout."""

import json
import math

import numpy as np
import pytest
import torch

from analysis.evaluation import anytime_summary, trajectories
from circuits import reference
from circuits.encoding import encode
from circuits.training.checkpoint import CheckpointError, load_model, read_config
from circuits.training.construction import EXACT, InitSharpness, prepare_input
from circuits.training.general_tasks import general_tasks
from circuits.training.loop import TrainConfig, train
from circuits.training.loss import anytime_loss, kmeans_objective
from circuits.training.model import ModelConfig, RecurrentKMeans
from conftest import assert_forward_is_the_hooked_transformers
from circuits.training.tasks import TEST, TRAIN, make_tasks

D, K = 5, 4
SHAPES = [(1, 2), (2, 3), (3, 4), (5, 2), (5, 4)]


def general_model(init: str = "exact", sharpness=None, seed: int = 0) -> RecurrentKMeans:
    # A random model keeps the default sharpness: its structural channel scales with beta, and at EXACT's 1e12 the
    # float64 rounding of that channel alone differs between the two computation orders.
    sharp = (sharpness or EXACT).to_dict() if init == "exact" else InitSharpness().to_dict()
    return RecurrentKMeans(ModelConfig(D, K, init, sharp, seed=seed, general=True), dtype=torch.float64)


# ----------------------------------------------------------------------------------------------- tasks
def test_general_tasks_are_a_pure_function_of_seed_stream_and_index_and_stay_in_the_capacity():
    a = general_tasks(3, 30, 64, 16, seed=1, stream=TRAIN, index=4)
    b = general_tasks(3, 30, 64, 16, seed=1, stream=TRAIN, index=4)
    np.testing.assert_array_equal(a.X, b.X)
    np.testing.assert_array_equal(a.C0, b.C0)
    assert not np.array_equal(general_tasks(3, 30, 64, 16, seed=1, stream=TEST, index=4).X[..., :1],
                              a.X[..., :1]) or a.d != 1
    shapes = {(t.d, t.k) for t in (general_tasks(2, 20, 64, 16, 0, TRAIN, i) for i in range(40))}
    assert all(1 <= d <= 64 and 2 <= k <= 16 for d, k in shapes) and len(shapes) > 20
    fixed = general_tasks(2, 20, 64, 16, 0, TEST, 0, shape=(7, 5), init="k-means++")
    assert (fixed.d, fixed.k, fixed.init) == (7, 5, "k-means++")


def test_general_tasks_come_in_their_own_units_and_random_inits_are_data_points():
    scales = [np.ptp(general_tasks(1, 50, 8, 4, 0, TRAIN, i, init="random").X) for i in range(30)]
    assert max(scales) / min(scales) > 100  # raw units spanning orders of magnitude
    t = general_tasks(4, 50, 8, 4, 3, TRAIN, 0, init="random")
    for x, c in zip(t.X, t.C0):
        assert all((x == row).all(axis=1).any() for row in c)


# ----------------------------------------------------------------------------------------------- the model
@pytest.mark.parametrize("d,k", SHAPES)
def test_general_model_at_high_sharpness_is_lloyds_for_every_shape(d, k):
    """Padding d < D with zero coordinates and running k < K centroid tokens is still Lloyd's exactly."""
    tasks = make_tasks(2, 30, d, k, seed=d * 10 + k, stream=TEST)
    traj = trajectories(general_model(), tasks.X * 37.0 - 5.0, tasks.C0 * 37.0 - 5.0, steps=5)
    for b in range(2):
        trace = reference.lloyd(tasks.X[b] * 37.0 - 5.0, tasks.C0[b] * 37.0 - 5.0, 5)
        np.testing.assert_allclose(traj.model[:, b], trace.centroids, atol=1e-9 * 37.0)
    assert (traj.readout_agreement == 1.0).all()


@pytest.mark.parametrize("d,k", SHAPES)
def test_general_fast_forward_pass_is_the_hooked_transformers_for_every_shape(d, k):
    tasks = make_tasks(2, 12, d, k, seed=4)
    assert general_model().encode(tasks.X, tasks.C0).resid.shape[1] == 1 + 12 + k
    assert_forward_is_the_hooked_transformers(general_model("random", seed=2), tasks)


def test_capacity_shape_encodes_exactly_as_the_fixed_model():
    model = general_model()
    tasks = make_tasks(2, 10, D, K, seed=1)
    enc = model.encode(tasks.X, tasks.C0)
    ref = encode(model.layout, tasks.X, tasks.C0, dtype=torch.float64)
    np.testing.assert_array_equal(enc.resid.numpy(), prepare_input(model.layout, ref.resid.numpy(), 10))


def test_smaller_shapes_use_the_first_ids_and_coordinates_only():
    model = general_model()
    tasks = make_tasks(1, 10, 2, 3, seed=1)
    enc = model.encode(tasks.X, tasks.C0)
    L, seq = model.layout, enc.sequence
    ids = enc.resid[0, seq.centroids, L["ID"]].numpy()
    np.testing.assert_array_equal(ids, np.eye(K)[:3])
    assert (enc.resid[0, :, L["X"]][:, 2:] == 0).all() and (enc.resid[0, :, L["C"]][:, 2:] == 0).all()


def test_fixed_models_refuse_other_shapes_and_general_ones_refuse_more_than_the_capacity():
    fixed = RecurrentKMeans(ModelConfig(3, 4), dtype=torch.float64)
    tasks = make_tasks(1, 10, 2, 3, seed=1)
    with pytest.raises(ValueError, match="for d=3, k=4"):
        fixed.encode(tasks.X, tasks.C0)
    big = make_tasks(1, 10, D + 1, 2, seed=1)
    with pytest.raises(ValueError, match="holds d <= 5"):
        general_model().encode(big.X, big.C0)


# ----------------------------------------------------------------------------------------------- the anytime loss
def test_anytime_loss_hand_computed():
    X = torch.tensor([[[0.0], [1.0], [4.0]]], dtype=torch.float64)
    C = [torch.tensor([[[0.0], [4.0]]], dtype=torch.float64), torch.tensor([[[0.5], [4.0]]], dtype=torch.float64),
         torch.tensor([[[1.0], [4.0]]], dtype=torch.float64)]
    lloyd = torch.tensor([[1.0], [0.5], [0.4]], dtype=torch.float64)
    gamma = 2.0
    loss, ratio = anytime_loss(X, C, lloyd, gamma, hinge=3.0, rise=5.0)
    temp = gamma * 3 / 0.4

    def soft(c):
        total = 0.0
        for x in (0.0, 1.0, 4.0):
            d = np.array([(x - cj) ** 2 for cj in c])
            w = np.exp(-temp * (d - d.min()))
            total += float((w / w.sum() * d).sum())
        return total

    S = [soft([0.0, 4.0]), soft([0.5, 4.0]), soft([1.0, 4.0])]
    r = np.array([S[1] / 0.5, S[2] / 0.4])
    expected = np.mean(r + 3.0 * np.maximum(r - 1, 0) + 5.0 * np.maximum(np.array(S[1:]) - np.array(S[:2]), 0)
                       / np.array([0.5, 0.4]))
    assert float(loss) == pytest.approx(expected, rel=1e-12)
    np.testing.assert_allclose(ratio[:, 0].numpy(), r, rtol=1e-12)
    # The soft-min bounds the k-means objective from above, so ratio <= 1 means at or below Lloyd's.
    assert S[2] >= float(kmeans_objective(X, C[2])[0]) - 1e-12


def test_anytime_summary_counts_by_hand():
    model = np.array([[10.0, 10.0], [8.0, 9.0], [6.0, 9.5]])
    lloyd = np.array([[10.0, 10.0], [9.0, 9.0], [7.0, 9.0]])
    s = anytime_summary(model, lloyd)
    assert s["ratio_mean_per_step"] == pytest.approx([(8 / 9 + 1) / 2, (6 / 7 + 9.5 / 9) / 2])
    assert s["frac_never_rises"] == 0.5 and s["ratio_max"] == pytest.approx(9.5 / 9)
    assert s["frac_below_lloyd_every_step"] == 0.5 and s["frac_above_1_05_final"] == 1 / 2
    assert "optimum_over_lloyd" not in s


def test_anytime_summary_reports_the_optimums_ratio_to_lloyds_the_floor_of_any_models_ratio():
    model = np.array([[10.0, 10.0], [8.0, 9.0], [6.0, 9.5]])
    lloyd = np.array([[10.0, 10.0], [9.0, 9.0], [7.0, 9.0]])
    s = anytime_summary(model, lloyd, optimum=np.array([5.6, 9.0]))
    assert s["optimum_over_lloyd"] == pytest.approx((0.8 + 1.0) / 2)
    assert s["optimum_over_lloyd_median"] == pytest.approx(0.9)
    assert s["model_over_optimum"] == pytest.approx((6 / 5.6 + 9.5 / 9) / 2)
    assert s["lloyd_over_optimum"] == pytest.approx((1.25 + 1.0) / 2)


# ----------------------------------------------------------------------------------------------- training and checkpoints
def tiny_general(**kw) -> TrainConfig:
    base = dict(d=3, k=3, n=16, steps=2, batch=2, train_iterations=3, eval_iterations=3, val_tasks=2, val_every=1,
                seed=0, general=True, loss="anytime", gamma=50.0)
    base.update(kw)
    return TrainConfig(**base)


def test_general_training_writes_a_v2_checkpoint_that_loads_and_runs_smaller_shapes(tmp_path):
    train(tmp_path / "run", tiny_general())
    model, config = load_model(tmp_path / "run")
    assert config["format"] == "kmeans-circuits/recurrent-v2" and config["model"]["general"] is True
    assert model.config.general and config["training"]["loss"] == "anytime"
    tasks = make_tasks(1, 12, 2, 2, seed=0)
    traj = trajectories(model, tasks.X, tasks.C0, 3)
    assert traj.model.shape == (4, 1, 2, 2) and np.isfinite(traj.model).all()
    assert math.isfinite(json.loads((tmp_path / "run" / "log.jsonl").read_text().splitlines()[-1])["val_score"])


def test_v2_configs_are_validated_strictly(tmp_path):
    train(tmp_path / "run", tiny_general())
    path = tmp_path / "run" / "config.json"
    good = json.loads(path.read_text())
    for edit, message in (
        (lambda c: c["model"].pop("general"), "missing general"),
        (lambda c: c["model"].__setitem__("general", 1), "general must be true or false"),
        (lambda c: c["training"].__setitem__("loss", "other"), "loss must be one of"),
        (lambda c: c["training"].__setitem__("hinge", -1), "hinge must be >= 0"),
        (lambda c: c["training"].__setitem__("general", False), "disagree"),
    ):
        bad = json.loads(json.dumps(good))
        edit(bad)
        path.write_text(json.dumps(bad))
        with pytest.raises(CheckpointError, match=message):
            read_config(tmp_path / "run")


def test_construction_support_trains_only_the_weights_the_construction_sets(tmp_path):
    train(tmp_path / "run", tiny_general(support="construction", steps=2, lr=1e-2, keep_best=False))
    model, _ = load_model(tmp_path / "run")
    start = RecurrentKMeans(model.config, dtype=model.dtype)
    moved = False
    for name, p in model.named_parameters():
        p0 = dict(start.named_parameters())[name]
        if "mlp" not in name:
            assert (p[p0 == 0] == 0).all(), name  # never set by the construction: never trained
        moved |= not torch.equal(p, p0)
    assert moved
