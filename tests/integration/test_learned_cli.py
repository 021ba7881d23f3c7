"""The learned safeguarded swap on the command line: ``cluster --construction learned`` (and ``--checkpoint`` of a
learned checkpoint) verifies the transformer against its numpy reference and compares it with Lloyd's and the
untrained swap; ``evaluate --construction learned`` measures it like the swap; ``drift --construction learned``
reads the trained factors back from the weights. Bad input is one line and exit 2."""

from __future__ import annotations

import json

import numpy as np
import pytest
from sklearn.cluster import KMeans

from analysis.data import load_dataset
from circuits import reference
from circuits.initialisation import initial_centroids
from circuits.learned import checkpoint
from test_swap_cli import run  # the command in-process: (exit code, stdout, stderr)
from circuits.learned.reference import learned_swap

MARGIN = 1e-10




@pytest.mark.parametrize("which", [("--construction", "learned"), ("--checkpoint", "checkpoints/learned")])
def test_cluster_iris_is_verified_and_below_lloyds_and_swap(which, capsys, tmp_path):
    out_dir = tmp_path / "out"
    code, out, _ = run(capsys, "cluster", "--dataset", "iris", "--k", 3, "--iterations", 3, *which, "--json",
                       "--out", out_dir)
    doc = json.loads(out)
    assert code == 0 and doc["verified"] and doc["variant"] == "construction:learned"
    X = load_dataset("iris").X
    C0 = initial_centroids(X, 3, "random", 0)
    ref = learned_swap(X, C0, 3, checkpoint.load().alphas, MARGIN)
    np.testing.assert_allclose(doc["centroids"], ref.centroids[-1], rtol=0, atol=1e-9 * 4)
    km = KMeans(3, init=C0, n_init=1, algorithm="lloyd", tol=0, max_iter=3).fit(X)
    assert doc["lloyd_inertia"] == pytest.approx(reference.objective(X, km.cluster_centers_), rel=1e-12)
    assert doc["inertia"] <= min(doc["lloyd_inertia"], doc["swap_inertia"]) * (1 + 4 * MARGIN)
    assert sorted(p.name for p in out_dir.iterdir()) == ["centroids.csv", "labels.csv", "report.html",
                                                          "verification.json"]
    assert json.loads((out_dir / "verification.json").read_text())["verified"] is True


def test_cluster_table_names_the_factors_and_the_untrained_swap(capsys):
    code, out, _ = run(capsys, "cluster", "--dataset", "blobs", "--n", 60, "--k", 3, "--iterations", 2,
                       "--construction", "learned")
    assert code == 0 and "factors 2, 4, 5.5, 6" in out and "swap objective" in out and "VERIFIED" in out
    assert "untrained swap's" in out


@pytest.mark.parametrize("argv,message", [
    (["--construction", "learned", "--k", "1"], "needs --k >= 2"),
    (["--construction", "learned", "--iterations", "0"], "needs --iterations >= 1"),
    (["--construction", "learned", "--dtype", "float32"], "float64"),
    (["--construction", "learned", "--variant", "soft"], "--variant"),
    (["--checkpoint", "BAD"], "alphas must be finite"),
    (["--checkpoint", "MISSING"], "no checkpoint there"),
])
def test_cluster_bad_input_is_one_line_and_exit_2(argv, message, capsys, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"format": checkpoint.FORMAT, "version": 1, "candidate": checkpoint.CANDIDATE,
                               "alphas": [-1.0]}))
    argv = [str(bad) if a == "BAD" else str(tmp_path / "nothing") if a == "MISSING" else a for a in argv]
    k = [] if "--k" in argv else ["--k", "3"]
    code, out, err = run(capsys, "cluster", "--dataset", "iris", *k, *argv)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and message in err


def test_evaluate_construction_learned_has_the_swap_shape(capsys):
    argv = ["evaluate", "--tasks", 2, "--steps", 2, "--shapes", "2x3", "--n", 30, "--datasets", "iris",
            "--dataset-inits", 1, "--no-optimum", "--json"]
    code, out, _ = run(capsys, *argv, "--construction", "learned")
    doc = json.loads(out)
    code_swap, out_swap, _ = run(capsys, *argv, "--construction", "swap")
    swap = json.loads(out_swap)
    assert code == code_swap == 0 and doc["construction"] == "learned" and doc["alphas"] == [2.0, 4.0, 5.5, 6.0]
    assert set(doc) - {"alphas"} == set(swap)
    assert set(doc["shapes"]["per_shape"][0]) == set(swap["shapes"]["per_shape"][0])
    # Never above Lloyd's, and here at or below the untrained swap at the last step, on the same tasks.
    for rec in doc["shapes"]["per_shape"][0]["per_step"]:
        assert rec["ratio_mean"] <= 1 + 4 * MARGIN and rec["readout_agreement"] == 1.0
    assert doc["datasets"][0]["name"] == "iris"
    assert run(capsys, *argv, "--construction", "learned", "--device", "cuda")[0] == 2


def test_drift_construction_learned_reads_the_factors_back(capsys, tmp_path):
    page = tmp_path / "learned_drift.html"
    code, out, _ = run(capsys, "drift", "--construction", "learned", "--out", page, "--tasks", 2, "--steps", 3,
                       "--n", 40, "--json")
    doc = json.loads(out.splitlines()[0])
    assert code == 0 and page.stat().st_size > 0
    assert [s["alpha_read"] for s in doc["steps"]] == [2.0, 4.0, 5.5]
    assert doc["other_layers_max_change"] == 0.0 and all(s["writes_to"] == ["C_stage"] for s in doc["steps"])
    # The extrapolate head's W_O is the update head's times alpha on d=2 channels: |alpha - 1| sqrt(2) from alpha=1.
    for s in doc["steps"]:
        assert s["w_o_change_vs_untrained"] == pytest.approx(abs(s["alpha"] - 1) * np.sqrt(2), rel=1e-12)
    assert sum(doc["kept"].values()) == pytest.approx(1.0)
    assert "Factors in the weights" in page.read_text()
    code, _, err = run(capsys, "drift", "--construction", "learned", "--out", page, "--shapes", "2x3")
    assert code == 2 and "--shapes" in err
