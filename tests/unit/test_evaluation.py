"""The evaluation's trajectory protocol (:mod:`analysis.evaluation`): any model with ``config`` (``d``, ``k``) and
``trajectory(X, C0, steps)`` is evaluated as a trained checkpoint is; a checkpoint is adapted and runs the same in
any chunks; real data is prepared for the model or taken raw; the export check (:mod:`analysis.verify.export`)
passes for the export and fails for a changed one; the old module paths are the new functions."""

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from analysis.evaluation import (
    DatasetRun, ShapeGrid, TrajectoryModel, as_trajectory_model, evaluate_grid, evaluate_real_data, lloyd_trajectory,
    shape_tasks,
)
from analysis.evaluation.recurrent import RecurrentTrajectory, weighted_mean
from circuits import reference
from circuits.training.construction import EXACT
from circuits.training.model import ModelConfig, RecurrentKMeans
from circuits.training.tasks import TEST, make_tasks


class LloydModel:
    """Lloyd's algorithm itself under the protocol: every comparison with Lloyd's must be a tie."""

    def __init__(self, d: int = 3, k: int = 4):
        self.config = SimpleNamespace(d=d, k=k, general=True)

    def trajectory(self, X, C0, steps):
        return lloyd_trajectory(X, C0, steps), np.ones(steps + 1)


class StillModel(LloydModel):
    """A model that never moves its centroids."""

    def trajectory(self, X, C0, steps):
        return np.broadcast_to(C0, (steps + 1, *C0.shape)).copy(), np.ones(steps + 1)


GRID = ShapeGrid(shapes=((2, 3), (3, 4)), tasks=4, n=24, steps=3, with_optimum=False)


def test_lloyds_algorithm_as_a_model_ties_with_lloyds_at_every_step():
    doc = evaluate_grid(LloydModel(), GRID)
    assert doc["shapes"] == [[2, 3], [3, 4]] and doc["overall"]["tasks"] == 8
    for shape in doc["per_shape"]:
        assert [r["step"] for r in shape["per_step"]] == [1, 2, 3]
        for r in shape["per_step"]:
            assert r["ratio_mean"] == r["ratio_p95"] == 1.0
            assert r["frac_model_better"] == r["frac_model_worse"] == 0.0
            assert (r["model_ari"], r["model_nmi"]) == (r["lloyd_ari"], r["lloyd_nmi"])
    assert doc["overall"]["ratio_max"] == 1.0 and doc["overall"]["frac_never_rises"] == 1.0


def test_a_model_that_never_moves_keeps_the_initial_objective_and_loses_to_lloyds():
    model = StillModel()
    doc = evaluate_grid(model, GRID)
    for index, shape in enumerate(GRID.shapes):
        tasks = shape_tasks(model, shape, GRID.tasks, GRID.n, GRID.init, GRID.seed, index)
        start = np.mean([reference.objective(x, c) for x, c in zip(tasks.X, tasks.C0)])
        lloyd = np.mean([reference.lloyd(x, c, GRID.steps).objectives[-1] for x, c in zip(tasks.X, tasks.C0)])
        rows = doc["per_shape"][index]["per_step"]
        assert [r["model_objective"] for r in rows] == pytest.approx([start] * GRID.steps, rel=1e-12)
        assert rows[-1]["lloyd_objective"] == pytest.approx(lloyd, rel=1e-12)
        assert all(r["frac_model_rises"] == 0.0 and r["frac_model_better"] == 0.0 for r in rows)
    assert doc["overall"]["ratio_mean"] > 1.0


def test_protocol_models_are_used_as_they_are_and_a_checkpoint_is_adapted():
    from analysis.constructions.swap import SWAP

    lloyd = LloydModel()
    assert as_trajectory_model(lloyd) is lloyd
    assert isinstance(SWAP.model(), TrajectoryModel)
    model = RecurrentKMeans(ModelConfig(3, 4, "exact"), dtype=torch.float64)
    assert not isinstance(model, TrajectoryModel)
    adapted = as_trajectory_model(model, chunk=2)
    assert isinstance(adapted, RecurrentTrajectory) and isinstance(adapted, TrajectoryModel)
    assert adapted.chunk == 2 and adapted.config is model.config
    with pytest.raises(TypeError, match="trajectory"):
        as_trajectory_model(object())


def test_the_exact_construction_adapted_is_lloyds_in_any_chunks():
    """At Lloyd's sharpness the construction is Lloyd's algorithm: its adapted trajectory is Lloyd's (independent,
    numpy) whatever the chunks, and its ``Y`` readout is the nearest centroid for every point."""
    model = RecurrentKMeans(ModelConfig(3, 4, "exact", EXACT.to_dict()), dtype=torch.float64)
    tasks = make_tasks(5, 16, 3, 4, seed=1, stream=TEST)
    lloyd = lloyd_trajectory(tasks.X, tasks.C0, 3)
    runs = [RecurrentTrajectory(model, chunk).trajectory(tasks.X, tasks.C0, 3) for chunk in (2, 5)]
    for cents, agreement in runs:
        assert cents.shape == lloyd.shape
        np.testing.assert_allclose(cents, lloyd, rtol=0, atol=1e-9)
        assert agreement.tolist() == [1.0] * 4
    np.testing.assert_allclose(runs[0][0], runs[1][0], rtol=0, atol=1e-12)


def test_chunk_means_are_weighted_by_chunk_size():
    assert weighted_mean([np.array([1.0, 0.5]), np.array([0.0, 0.5])], [2, 3]).tolist() == [0.4, 0.5]


def test_real_data_is_fitted_to_a_fixed_shape_or_taken_raw_at_its_true_k():
    model = LloydModel(d=8, k=2)
    run = DatasetRun("iris", steps=2, inits=2, init="random", seed=0, chunk=1)
    fitted = evaluate_real_data(model, run, raw=False)
    assert (fitted["d"], fitted["k"], fitted["classes"], fitted["n"]) == (8, 2, 3, 150)
    assert fitted["prepared"].startswith("features min-max scaled to [0, 1], 4 dimensions padded with zeros to 8")
    assert "anytime" not in fitted and fitted["final"]["ratio_mean"] == 1.0
    raw = evaluate_real_data(model, run, raw=True)
    assert (raw["d"], raw["k"], raw["classes"], raw["prepared"]) == (4, 3, 3, "raw units")
    anytime = raw["anytime"]
    assert anytime["tasks"] == 2 and anytime["ratio_mean"] == 1.0
    assert anytime["model_over_optimum"] == anytime["lloyd_over_optimum"] >= 1.0 - 1e-12


def test_export_parity_holds_for_the_export_and_fails_for_a_changed_one():
    from analysis.verify.export import check_export

    model = RecurrentKMeans(ModelConfig(2, 3, "exact"), dtype=torch.float32)
    tasks = make_tasks(1, 12, 2, 3, seed=2, stream=TEST)
    enc = model.encode(tasks.X[0], tasks.C0[0])
    ht = model.hooked_transformer()
    run = check_export(ht, model, enc, 3, 12)
    assert run.parity.verified and run.parity.path == "masked" and len(run.hooked) == len(run.fast) == 4
    assert run.parity.error <= run.parity.tolerance
    with torch.no_grad():
        ht.blocks[0].attn.W_V.mul_(1.01)  # the update head's values, 1% off: the centroids move
    changed = check_export(ht, model, enc, 3, 12).parity
    assert not changed.verified and changed.error > 100 * changed.tolerance
