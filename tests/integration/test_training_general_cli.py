"""train --general / evaluate / drift / cluster --checkpoint with a general model, as a user meets them (tiny
sizes), and bad input (exit 2, one line)."""

import json
from pathlib import Path

import numpy as np
import pytest

from circuits import reference
from command_server import run_command as cli
from test_training_cli import assert_usage_error

HEADLINE = Path(__file__).resolve().parents[2] / "checkpoints" / "headline"


@pytest.fixture(scope="module")
def general(tmp_path_factory):
    out = tmp_path_factory.mktemp("ck") / "general"
    res = cli("train", "--general", "--d", 5, "--k", 4, "--n", 16, "--steps", 2, "--batch", 2, "--iterations", 3,
              "--eval-iterations", 3, "--val-tasks", 2, "--val-every", 1, "--loss", "anytime", "--gamma", 50,
              "--beta", 400, "--beta-update", 20, "--device", "cpu", "--out", out, "--json")
    assert res.returncode == 0, res.stderr
    return out


def test_evaluate_a_general_checkpoint_per_shape_and_on_real_data_in_raw_units(general):
    res = cli("evaluate", "--checkpoint", general, "--tasks", 2, "--steps", 3, "--shapes", "2x3,5x2",
              "--datasets", "iris", "--dataset-inits", 2, "--device", "cpu", "--json")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert [(s["d"], s["k"]) for s in doc["shapes"]["per_shape"]] == [(2, 3), (5, 2)]
    iris = doc["datasets"][0]
    assert (iris["d"], iris["k"], iris["prepared"]) == (4, 3, "raw units")
    # Lloyd's column is the numpy reference on the raw data from the same initial centroids.
    from analysis.data import load_dataset
    from circuits.initialisation import initial_centroids

    X = load_dataset("iris").X
    lloyd = np.mean([reference.objective(X, reference.lloyd(X, initial_centroids(X, 3, "random", s), 3).final_centroids)
                     for s in range(2)])
    assert iris["final"]["lloyd_objective"] == pytest.approx(lloyd, rel=1e-12)


def test_cluster_runs_a_general_checkpoint_on_smaller_data_and_reports_the_ratio(general):
    res = cli("cluster", "--checkpoint", general, "--dataset", "blobs", "--n", 40, "--d", 3, "--centers", 2,
              "--k", 2, "--iterations", 3, "--json")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["verified"] and len(doc["centroids"][0]) == 3 and len(doc["centroids"]) == 2
    assert doc["ratio_to_lloyd"] == pytest.approx(doc["inertia"] / doc["lloyd_inertia"])


def test_drift_of_a_general_checkpoint_per_shape(general, tmp_path):
    res = cli("drift", "--checkpoint", general, "--out", tmp_path / "d.html", "--tasks", 2, "--steps", 3,
              "--shapes", "2x3,5x4", "--no-ablations", "--json")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout.strip().splitlines()[-1])
    assert [(s["d"], s["k"]) for s in doc["shapes"]] == [(2, 3), (5, 4)]
    assert all(len(s["behaviour"]["ratio"]["trained"]) == 4 for s in doc["shapes"])


@pytest.mark.parametrize("args,needle", [
    (("--shapes", "2x"), "not DxK"),
    (("--shapes", "6x2"), "outside the checkpoint's capacity"),
    (("--datasets", "wine"), "outside the checkpoint's capacity"),
    (("--datasets", "blobs"), "true k"),
])
def test_evaluate_bad_general_options(general, args, needle):
    assert_usage_error(cli("evaluate", "--checkpoint", general, "--tasks", 1, *args), needle)


def test_bad_shapes_devices_and_sizes_exit_2(general):
    assert_usage_error(cli("evaluate", "--checkpoint", HEADLINE, "--shapes", "2x3"), "needs a general checkpoint")
    assert_usage_error(cli("evaluate", "--checkpoint", general, "--device", "tpu"), "invalid choice")
    assert_usage_error(cli("train", "--d", 2, "--k", 2, "--steps", 1, "--out", "x", "--device", "gpu"), "invalid choice")
    assert_usage_error(cli("train", "--d", 2, "--k", 2, "--steps", 1, "--out", "x", "--hinge", "-1"), "--hinge")
    assert_usage_error(cli("cluster", "--checkpoint", general, "--dataset", "wine", "--k", 3), "d <= 5, k <= 4")


def test_cuda_is_refused_where_there_is_none(general):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is available here")
    assert_usage_error(cli("evaluate", "--checkpoint", general, "--tasks", 1, "--device", "cuda"), "no CUDA device")
