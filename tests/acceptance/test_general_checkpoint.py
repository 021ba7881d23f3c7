"""The committed general checkpoint (checkpoints/general): it loads, runs every shape of its capacity, keeps the
anytime property it is documented to have on a small fixed set of held-out tasks, and the docs' tables are its
evaluation files (``python benchmarks/bench_general.py`` writes ``checkpoints/general/eval/``)."""

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from analysis.evaluation import REL_TOL, objectives, trajectories
from circuits.training.checkpoint import load_model, read_config
from circuits.training.general_tasks import general_tasks
from circuits.training.tasks import TEST
from command_server import run_command

ROOT = Path(__file__).resolve().parents[2]
GENERAL = ROOT / "checkpoints" / "general"


def test_the_general_checkpoint_is_small_complete_and_general():
    names = sorted(p.name for p in GENERAL.iterdir() if p.is_file())
    assert names == ["config.json", "log.jsonl", "model.safetensors", "train.log"]
    assert (GENERAL / "model.safetensors").stat().st_size < 2_000_000
    config = read_config(GENERAL)
    assert config["model"]["general"] is True and (config["model"]["d"], config["model"]["k"]) == (64, 16)


@pytest.fixture(scope="module")
def fixed_set():
    """16 held-out tasks (test stream, never trained on) at two shapes, random init, 20 steps."""
    model, _ = load_model(GENERAL)
    out = []
    for index, shape in ((900, (4, 5)), (901, (16, 3))):
        tasks = general_tasks(8, 64, 64, 16, seed=0, stream=TEST, index=index, shape=shape, init="random")
        traj = trajectories(model, tasks.X, tasks.C0, steps=20)
        out.append((objectives(tasks.X, traj.model), objectives(tasks.X, traj.lloyd)))
    return np.concatenate([m for m, _ in out], axis=1), np.concatenate([lo for _, lo in out], axis=1)


def test_at_or_below_lloyds_after_the_last_step_on_average(fixed_set):
    """Measured (docs/training.md): the mean ratio is below 1 after step 20 and from step 4 on, but not at every
    step — steps 2 and 3 are 1.0016 and 1.0001 on this set — so "at or below Lloyd's at every step" is not claimed."""
    model, lloyd = fixed_set
    ratio = model[1:] / lloyd[1:]
    assert ratio[-1].mean() <= 1.0, ratio.mean(axis=1)
    assert (ratio[3:].mean(axis=1) <= 1.0).all(), ratio.mean(axis=1)


def test_mean_objective_does_not_rise_beyond_the_evaluations_tie_tolerance(fixed_set):
    """The mean objective over the set never rises by more than ``REL_TOL`` (1e-5 relative, the tolerance the
    evaluation counts rises with); single tasks do rise (docs/training.md: 'objective never rises')."""
    model, _ = fixed_set
    mean = model.mean(axis=1)
    assert (mean[1:] <= mean[:-1] * (1 + REL_TOL)).all(), np.diff(mean) / mean[:-1]


def test_cluster_iris_at_its_true_k_reports_the_ratio_to_lloyds():
    res = run_command("cluster", "--checkpoint", GENERAL, "--dataset", "iris", "--k", "3", "--json", timeout=600,
                      cwd=ROOT)
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["verified"] and doc["d"] == 4 and len(doc["centroids"]) == 3
    assert doc["ratio_to_lloyd"] == pytest.approx(doc["inertia"] / doc["lloyd_inertia"])
    # The documented negative result (docs/training.md) is this run's, and the README no longer offers the model
    # as an example (it is not better than Lloyd's on its family).
    docs = " ".join((ROOT / "docs" / "training.md").read_text().split())
    assert f"ends at {doc['ratio_to_lloyd']:.4f} x Lloyd's" in docs
    assert f"(inertia {doc['inertia']:.4f} against {doc['lloyd_inertia']:.4f})" in docs
    assert "--checkpoint checkpoints/general" not in (ROOT / "README.md").read_text()


def test_docs_tables_are_the_benchmark_files():
    spec = importlib.util.spec_from_file_location("bench_general", ROOT / "benchmarks" / "bench_general.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    docs = (ROOT / "docs" / "training.md").read_text()
    ev = GENERAL / "eval"
    for name, title in (("synthetic_random", "random init"), ("synthetic_kmeanspp", "k-means++ init")):
        table = "\n".join(bench.shape_table(json.loads((ev / f"{name}.json").read_text()), title))
        assert table in docs, name
    assert "\n".join(bench.dataset_table(json.loads((ev / "datasets.json").read_text()))) in docs


# ------------------------------------------------------------------------------ data the float32 model must carry
def _blobs(seed: int, n: int, d: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import make_blobs

    X, _ = make_blobs(n, n_features=d, centers=k, random_state=seed)
    return X, X[:k].copy()


@pytest.mark.parametrize("magnitude", [1e38, 1e100, 1e150, 1e-40])
def test_the_float32_checkpoint_runs_data_beyond_float32s_range(magnitude):
    """The model computes in unit coordinates; decoded in float32 its centroids overflowed (NaN, exit 1) on data past
    3.4e38 and vanished below 1e-38. Scaled data must give the scaled result of the unscaled data: the same
    clustering (ratio to numpy Lloyd's from the same initial centroids) and finite centroids."""
    from analysis.evaluation.checkpoint import cluster_with_checkpoint

    X, C0 = _blobs(3, 60, 3, 3)
    base = cluster_with_checkpoint(str(GENERAL), X, C0, 3)
    big = cluster_with_checkpoint(str(GENERAL), X * magnitude, C0 * magnitude, 3)
    assert big["verified"] and np.isfinite(big["centroids"]).all()
    np.testing.assert_allclose(np.array(big["centroids"]) / magnitude, base["centroids"], rtol=1e-5, atol=1e-5)
    assert big["labels"] == base["labels"]
    assert big["ratio_to_lloyd"] == pytest.approx(base["ratio_to_lloyd"], rel=1e-5)
    # Lloyd's side is numpy's float64 run on the scaled data (independent of the model).
    assert big["lloyd_inertia"] == pytest.approx(float(reference_objective(X * magnitude, C0 * magnitude)), rel=1e-9)


def reference_objective(X, C0):
    from circuits import reference

    return reference.lloyd(X, C0, 3).objectives[-1]


def test_far_offset_data_is_reproduced_by_the_export_within_its_derived_tolerance():
    """Raw-unit data 5e3 from the origin with a spread of 0.3: float32's decode rounded at |offset| eps = 3e-4 of
    the data scale, so the export check failed (1.1e-4 > 1e-4) for a correct model. Compared in unit coordinates,
    within the tolerance ``eps (n_tokens + d_model) T M`` (analysis.verify.export.export_tolerance)."""
    import torch

    from analysis.evaluation.checkpoint import cluster_with_checkpoint
    from analysis.verify.export import export_tolerance

    rng = np.random.default_rng(2)
    X = rng.normal(size=(120, 8)) * 0.3 + 5e3
    C0 = X[:3].copy()
    doc = cluster_with_checkpoint(str(GENERAL), X, C0, 5)
    model, _ = load_model(GENERAL)
    n_tokens = 1 + 120 + 3
    assert doc["export_tolerance"] >= export_tolerance(torch.float32, n_tokens, model.layout.d_model, 5, 1.0)
    assert doc["export_tolerance"] == pytest.approx(
        float(torch.finfo(torch.float32).eps) * (n_tokens + model.layout.d_model) * 5, rel=0.1)
    assert doc["verified"] and doc["export_error"] <= doc["export_tolerance"]
    # The result is a clustering of the data in its own units: centroids near the data, not rounded to 5e3's ulp.
    assert np.abs(np.array(doc["centroids"]) - X.mean(axis=0)).max() < 2.0


def test_the_headline_checkpoint_runs_d32_data_at_1e40():
    """The issue's second case: the headline model (d = 32, k = 10, float32) on data at 1e40 gave NaN centroids
    (exit 1). It must give 1e40 times its result on the same data at scale 1."""
    from analysis.evaluation.checkpoint import cluster_with_checkpoint

    headline = ROOT / "checkpoints" / "headline"
    X, C0 = _blobs(5, 60, 32, 10)
    base = cluster_with_checkpoint(str(headline), X, C0, 2)
    big = cluster_with_checkpoint(str(headline), X * 1e40, C0 * 1e40, 2)
    assert big["verified"] and np.isfinite(big["centroids"]).all()
    np.testing.assert_allclose(np.array(big["centroids"]) / 1e40, base["centroids"], rtol=1e-5, atol=1e-4)
    assert big["ratio_to_lloyd"] == pytest.approx(base["ratio_to_lloyd"], rel=1e-5)
