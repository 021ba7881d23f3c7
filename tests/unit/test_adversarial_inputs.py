"""A second adversarial pass (issue 12): the defects it found, each checked against an independent reference.

Each test fails on the code before its fix: a silent wrong label, a label that depends on which other points are
predicted with it, a traceback (exit 3) on bad input, or a message that misnames the computation.
"""

import json
import shutil
import warnings
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file
from sklearn.datasets import make_blobs

from analysis.estimator import CircuitKMeans
from circuits.training.schema import CheckpointError, read_log
from test_cli_bad_input import usage_error

HEADLINE = Path(__file__).resolve().parents[2] / "checkpoints" / "headline"


def exact_nearest(P, C):
    """Nearest centroid of each row of ``P`` in exact rational arithmetic (lowest index on exact ties)."""
    out = []
    for p in P:
        D = [sum((Fraction(float(a)) - Fraction(float(b))) ** 2 for a, b in zip(p, c)) for c in C]
        out.append(min(range(len(C)), key=lambda j: (D[j], j)))
    return np.array(out)


@pytest.fixture(scope="module")
def blobs_fit():
    X, _ = make_blobs(40, centers=3, n_features=2, random_state=0)
    return X, CircuitKMeans(3, max_iter=5).fit(X)


# ------------------------------------------------------------------------------------------------ estimator
def test_predict_beyond_float64_range_is_exact_or_refused(blobs_fit):
    """Points at 1e200: every squared distance overflows to inf, so the circuit's reference said "all tied" and
    predict returned label 0 for all three, while the exact nearest centroids differ (largest x, smallest x,
    largest y). Either the exact labels or a ValueError; never a silent wrong label, nor inf distances."""
    _, est = blobs_fit
    P = np.array([[1e200, 0.0], [-1e200, 0.0], [0.0, 1e200]])
    expected = exact_nearest(P, est.cluster_centers_)
    assert len(set(expected)) == 3  # the example has three different answers
    for method in (est.predict, est.transform, est.score):
        try:
            got = method(P)
        except ValueError:
            continue
        if method == est.predict:
            np.testing.assert_array_equal(got, expected)
        else:
            assert np.all(np.isfinite(got)), (method.__name__, got)


def trimmed_reference(P, C, theta):
    """Trimmed k-means' assignment: the nearest centroid, or -1 beyond squared distance ``theta``."""
    D = ((P[:, None, :] - C[None, :, :]) ** 2).sum(-1)
    return np.where(D.min(axis=1) <= theta, D.argmin(axis=1), -1)


def test_trimmed_predict_keeps_the_fitted_threshold():
    """The trimming radius is in data radii; predict re-measured it on the points it was given, so predicting the
    training data gave other labels than ``labels_`` (the fit's radius includes a far point) and a point's label
    depended on which other points were predicted with it."""
    X, _ = make_blobs(40, centers=3, n_features=2, random_state=0)
    Xo = np.vstack([X, [[1e6, 1e6]]])
    radius = 0.5
    est = CircuitKMeans(3, max_iter=3, variant=f"trimmed:radius={radius}").fit(Xo)
    assert est.report_.verified
    # Independently: the encoder's radius is the largest distance of a point or initial centroid from the mean.
    mu = Xo.mean(axis=0)
    s = max(np.linalg.norm(Xo - mu, axis=1).max(), np.linalg.norm(est.init_centroids_ - mu, axis=1).max())
    theta = radius**2 * s**2
    expected = trimmed_reference(X, est.cluster_centers_, theta)
    np.testing.assert_array_equal(est.labels_[:40], expected)
    np.testing.assert_array_equal(est.predict(X), expected)
    for i in (9, 13, 14):
        np.testing.assert_array_equal(est.predict(X[i : i + 1]), expected[i : i + 1])


def test_huge_max_iter_is_a_value_error():
    X, _ = make_blobs(20, centers=2, n_features=2, random_state=0)
    with pytest.raises(ValueError, match="max_iter"):
        CircuitKMeans(2, max_iter=10**20).fit(X)


def test_float32_beta_beyond_its_range_is_a_value_error():
    X, _ = make_blobs(20, centers=2, n_features=2, random_state=0)
    with pytest.raises(ValueError, match="float32"):
        CircuitKMeans(2, max_iter=1, dtype="float32", sharpness={"beta": 1e38}).fit(X)


# ------------------------------------------------------------------------------------------------ command line
@pytest.fixture
def small(tmp_path):
    path = tmp_path / "x.npy"
    np.save(path, np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [5.0, 5.0], [6.0, 5.0]]))
    return path


@pytest.mark.parametrize("iterations", ["99999999999999999999", "1000000000000"])
def test_iterations_beyond_memory_are_exit_2(small, capsys, tmp_path, iterations):
    """2**64 iterations crashed with OverflowError (exit 3); 10**12 would build blocks for hours before failing.

    Both now stop before any block is built: 2**64 because no count here can hold it, 10**12 at the option's stated
    limit (analysis/cli/limits.py)."""
    line = usage_error(capsys, ["cluster", "--data", small, "--k", 2, "--iterations", iterations,
                                "--out", tmp_path / "o"], "--iterations")
    assert "memory" in line or "limit of" in line, line
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("extra", [["--beta", "1e38"], ["--beta-update", "1e39"], ["--variant", "soft:beta=1e39"]])
def test_float32_weights_beyond_its_range_are_exit_2(small, capsys, tmp_path, extra):
    """Knobs that float64 holds but float32 does not: the build found non-finite weights and crashed (exit 3)."""
    usage_error(capsys, ["cluster", "--data", small, "--k", 2, "--iterations", 1, "--dtype", "float32", *extra,
                         "--out", tmp_path / "o"], "float32")
    assert not (tmp_path / "o").exists()


def test_empty_init_is_named_empty(small, capsys):
    """``--init ''`` was reported as "init file '.' is a folder"."""
    usage_error(capsys, ["cluster", "--data", small, "--k", 2, "--init", ""], "empty")


def test_float32_ties_are_the_float64_references(tmp_path):
    """A float32 run is held to the same reference as a float64 one (docs/exactness.md, float32): its ties are
    what the data cannot decide, here exact ties of an integer grid (gap 0), and its tie note says so; the run is
    still labelled float32."""
    from analysis.pipeline import RunOptions, run_problem

    grid = np.array([[i, j] for i in range(5) for j in range(5)], dtype=np.float64)
    result = run_problem(grid, grid[[0, 12, 24]], 2, dtype=torch.float32, options=RunOptions(path="auto"))
    notes = [n for n in result.report.notes if "tied at the data's precision" in n]
    assert result.report.ties and notes
    assert all(set(tie.gaps) == {0.0} for tie in result.report.ties)  # an integer grid's ties are exact ties
    assert "float32" in result.report.verdict


# ------------------------------------------------------------------------------------------------ checkpoints
@pytest.fixture
def headline_copy(tmp_path):
    folder = tmp_path / "ck"
    shutil.copytree(HEADLINE, folder, ignore=shutil.ignore_patterns("eval"))
    return folder


def test_checkpoint_weight_that_overflows_with_its_scale_is_exit_2(headline_copy, tmp_path, capsys):
    """A finite trained weight (float32 max) whose product with its preconditioning scale is inf: the export to a
    HookedTransformer crashed with "non-finite values after loading" (exit 3)."""
    tensors = load_file(headline_copy / "model.safetensors")
    assert (tensors["assign_W_Q_scale"].abs() > 1).any()  # so that float32's max times the scale overflows
    tensors["assign_W_Q"] = torch.full_like(tensors["assign_W_Q"], torch.finfo(torch.float32).max)
    save_file(tensors, headline_copy / "model.safetensors", metadata={"format": "kmeans-circuits/recurrent-v1"})
    data = tmp_path / "x.npy"
    np.save(data, np.random.default_rng(0).standard_normal((20, 32)))
    usage_error(capsys, ["cluster", "--data", data, "--k", 10, "--iterations", 1, "--checkpoint", headline_copy,
                         "--out", tmp_path / "o"], "assign_W_Q")
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("line, needle", [
    ('{"step": 2, "drift": {"update": {"qk": 0.0}}}', "drift.update.ov"),
    ('{"step": 2, "drift": {"update": {"qk": 0.0, "ov": 0.0, "mlp": 0.0},'
     ' "assign": {"qk": 0.0, "ov": 0.0, "mlp": 0.0}}}', "val_ratio"),
    ('{"step": 2, "knobs": {"assign_stiffness": 1.0}}', "update_member_score"),
])
def test_log_records_the_drift_history_cannot_plot_are_refused(headline_copy, line, needle):
    """``drift`` plotted these records and crashed with KeyError (exit 3): refused when the log is read."""
    with open(headline_copy / "log.jsonl", "a") as f:
        f.write(line + "\n")
    with pytest.raises(CheckpointError, match=needle):
        read_log(headline_copy)


def test_drift_on_a_record_without_val_ratio_is_exit_2(headline_copy, tmp_path, capsys):
    record = json.loads((headline_copy / "log.jsonl").read_text().splitlines()[-1])
    del record["val_ratio"]
    with open(headline_copy / "log.jsonl", "a") as f:
        f.write(json.dumps(record) + "\n")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        usage_error(capsys, ["drift", "--checkpoint", headline_copy, "--out", tmp_path / "d.html", "--tasks", 1,
                             "--n", 8, "--steps", 1, "--no-ablations"], "val_ratio")
    assert not (tmp_path / "d.html").exists()
