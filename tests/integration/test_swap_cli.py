"""The safeguarded-swap construction on the command line: ``cluster --construction swap`` verifies it against its
numpy reference and compares it with Lloyd's; ``evaluate --construction swap`` measures it like a general
checkpoint. Lloyd's is checked against scikit-learn, the construction's claims (never above Lloyd's, never rising)
against its own numbers, and one far point must not make VERIFIED lie."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
from sklearn.cluster import KMeans
from sklearn.datasets import make_blobs

from analysis.constructions import CONSTRUCTIONS
from analysis.constructions.swap import SWAP, swap_circuit
from analysis.cli import main
from circuits import reference
from circuits.initialisation import initial_centroids
from circuits.swap.reference import safeguarded_swap

MARGIN = 1e-10  # the construction's select_margin: never above Lloyd's by more than 1 + 2 * MARGIN


def run(capsys, *argv) -> tuple[int, str, str]:
    try:
        code = main([str(a) for a in argv])
    except SystemExit as exc:  # argparse's own usage errors
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def far_point(tmp_path_factory):
    """60 blob points and one at (1e7, 1e7): the problem that once made VERIFIED lie for Lloyd's circuit."""
    X, _ = make_blobs(60, centers=3, n_features=2, random_state=1)
    X = np.vstack([X, [1e7, 1e7]])
    path = tmp_path_factory.mktemp("far") / "far.csv"
    np.savetxt(path, X, delimiter=",")
    return path, X


def sklearn_lloyd(X, C0, iterations):
    km = KMeans(len(C0), init=C0, n_init=1, algorithm="lloyd", tol=0, max_iter=iterations).fit(X)
    return reference.objective(X, km.cluster_centers_)


def test_cluster_far_point_is_verified_and_never_above_lloyds(far_point, capsys):
    path, X = far_point
    code, out, _ = run(capsys, "cluster", "--data", path, "--k", 3, "--iterations", 4, "--construction", "swap",
                       "--json")
    doc = json.loads(out)
    assert code == 0 and doc["verified"] and doc["problems"] == []
    C0 = initial_centroids(X, 3, "random", 0)
    ref = safeguarded_swap(X, C0, 4, MARGIN)
    np.testing.assert_allclose(doc["centroids"], ref.centroids[-1], rtol=0, atol=1e-9 * 1.5e7)
    # Lloyd's beside it is scikit-learn's; the construction is at or below it at every step, and never rises.
    assert doc["lloyd_inertia"] == pytest.approx(sklearn_lloyd(X, C0, 4), rel=1e-12)
    objectives = [r["objective_circuit"] for r in doc["per_iteration"]]
    assert all(r["objective_circuit"] <= r["objective_lloyd"] * (1 + 2 * MARGIN) for r in doc["per_iteration"])
    assert all(b <= a * (1 + 1e-12) for a, b in zip(objectives, objectives[1:]))
    assert doc["ratio_to_lloyd"] == pytest.approx(doc["inertia"] / doc["lloyd_inertia"])
    # The margins: beta times each step's smallest nearest-vs-second gap (by hand from the centroids), and the kept
    # candidate's relative lead over the runner-up (None: all three equal, the tie order decided).
    beta, scale = doc["knobs"]["beta"], np.sqrt(doc["tie_break_user_units"] / doc["knobs"]["tie_break"])
    for rec, C in zip(doc["per_iteration"], ref.centroids[1:]):
        D = np.sort(((X[:, None, :] - C[None]) ** 2).sum(-1), axis=1)
        assert rec["min_margin"] == pytest.approx(beta * (D[:, 1] - D[:, 0]).min() / scale**2, rel=1e-6)
        assert rec["min_margin"] > 745 and (rec["choice_gap"] is None or rec["choice_gap"] > 0)


def test_cluster_with_fixed_knobs_on_a_far_point_is_not_verified_and_says_why(far_point, capsys, monkeypatch):
    """The construction's default knobs (tie-break 1e-11 of the squared unit scale) cannot resolve this problem:
    the reference given that tie-break agrees with the circuit, the algorithm does not — NOT VERIFIED, exit 1."""
    path, _ = far_point
    fixed = replace(SWAP, circuit_for=lambda problems, steps, factors: swap_circuit(2, 3, steps, 1e14, 1e-11))
    monkeypatch.setitem(CONSTRUCTIONS, "swap", fixed)
    code, out, _ = run(capsys, "cluster", "--data", path, "--k", 3, "--iterations", 3, "--construction", "swap")
    assert code == 1
    verdict = [line for line in out.splitlines() if "VERIFIED" in line]
    assert verdict and verdict[0].startswith("NOT VERIFIED against the safeguarded swap") and \
        "cause tie-break" in verdict[0]


def test_cluster_iris_writes_its_files_all_or_none(tmp_path, capsys):
    out_dir = tmp_path / "iris-swap"
    code, out, _ = run(capsys, "cluster", "--dataset", "iris", "--k", 3, "--iterations", 3, "--construction", "swap",
                       "--out", out_dir, "--json")
    doc = json.loads(out)
    assert code == 0 and doc["verified"]
    assert sorted(p.name for p in out_dir.iterdir()) == ["centroids.csv", "labels.csv", "report.html",
                                                          "verification.json"]
    labels = np.loadtxt(out_dir / "labels.csv", skiprows=1, dtype=int)
    assert labels.tolist() == doc["labels"]
    saved = json.loads((out_dir / "verification.json").read_text())
    assert saved["problems"] == [] and [r["choice"] for r in saved["per_iteration"]] == \
        [r["choice"] for r in doc["per_iteration"]]


def test_cluster_paths_agree_and_above_the_dense_limit_only_the_structured_path_runs(capsys, monkeypatch):
    """Both execution paths give the same verified result; above the dense forward's token limit (lowered here to
    iris's size) auto runs the structured path and --path dense is refused in one line."""
    argv = ["cluster", "--dataset", "iris", "--k", 3, "--iterations", 3, "--construction", "swap", "--json"]
    docs = {}
    for path in ("auto", "dense"):
        code, out, _ = run(capsys, *argv, "--path", path)
        docs[path] = json.loads(out)
        assert code == 0 and docs[path]["verified"]
    assert (docs["auto"]["path"], docs["dense"]["path"]) == ("structured", "dense")
    np.testing.assert_allclose(docs["auto"]["centroids"], docs["dense"]["centroids"], rtol=0, atol=1e-12 * 8)
    import analysis.capture.run

    monkeypatch.setattr(analysis.capture.run, "DENSE_MAX_TOKENS", 100)
    code, out, _ = run(capsys, *argv)
    assert code == 0 and json.loads(out)["path"] == "structured"
    assert json.loads(out)["centroids"] == docs["auto"]["centroids"]
    code, out, err = run(capsys, *argv, "--path", "dense")
    assert code == 2 and out == "" and "160 tokens is above the dense forward's limit of 100" in err


@pytest.mark.parametrize("extra,needle", [
    (("--k", 1), "needs --k >= 2"),
    (("--k", 3, "--dtype", "float32"), "exact only in float64"),
    (("--k", 3, "--variant", "soft"), "--variant and the exactness knobs do not apply"),
    (("--k", 3, "--tie-break", "1e-9"), "--variant and the exactness knobs do not apply"),
    (("--k", 3, "--checkpoint", "checkpoints/general"), "not allowed with argument"),
    (("--k", 3, "--n", 12_000, "--d", 2, "--centers", 3, "--path", "dense"), "above the dense forward's limit of 12000"),
])
def test_cluster_construction_bad_input_is_one_line_exit_2(extra, needle, capsys):
    dataset = "blobs" if "--n" in extra else "iris"
    code, out, err = run(capsys, "cluster", "--dataset", dataset, "--construction", "swap", *extra)
    assert code == 2 and needle in err and "Traceback" not in err and out == ""


def test_evaluate_construction_measures_it_like_a_general_checkpoint(capsys):
    argv = ["evaluate", "--construction", "swap", "--tasks", 3, "--n", 16, "--steps", 3, "--shapes", "2x3,3x2",
            "--datasets", "iris", "--dataset-inits", 1, "--json"]
    code, out, _ = run(capsys, *argv)
    assert code == 0
    doc = json.loads(out)
    assert doc["construction"] == "swap" and doc["capacity"] == [64, 16]
    overall = doc["shapes"]["overall"]
    assert overall["tasks"] == 6 and overall["frac_never_rises"] == 1.0
    assert max(overall["ratio_mean_per_step"]) <= 1 + 2 * MARGIN and overall["ratio_max"] <= 1 + 2 * MARGIN
    # The same tasks, run through the numpy reference: the evaluation's objectives are the algorithm's.
    from analysis.evaluation import ShapeCell, general_cell

    model = SWAP.model()
    cell = ShapeCell(1, (3, 2), 3, 16, 3, "random", 0, 16, False)
    result = general_cell(model, cell)
    from analysis.evaluation import shape_tasks

    batch = shape_tasks(model, (3, 2), 3, 16, "random", 0, 1)
    expected = np.array([safeguarded_swap(x, c, 3, MARGIN).objectives for x, c in zip(batch.X, batch.C0)]).T
    np.testing.assert_allclose(result.obj_model, expected, rtol=1e-9)
    assert all(r["readout_agreement"] == 1.0 for s in doc["shapes"]["per_shape"] for r in s["per_step"])
    assert doc["datasets"][0]["name"] == "iris" and doc["datasets"][0]["anytime"]["ratio_max"] <= 1 + 2 * MARGIN


def test_evaluate_construction_refuses_what_does_not_apply(capsys, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # refused where CUDA exists too
    code, _, err = run(capsys, "evaluate", "--construction", "swap", "--device", "cuda")
    assert code == 2 and "(float64) runs on the CPU" in err
    monkeypatch.undo()
    code, _, err = run(capsys, "evaluate", "--construction", "swap", "--shapes", "2x1")
    assert code == 2 and "needs k >= 2" in err
    code, _, err = run(capsys, "evaluate", "--construction", "swap", "--checkpoint", "checkpoints/general")
    assert code == 2 and "not allowed with argument" in err


def test_docs_tables_are_the_benchmark_files():
    """docs/swap.md quotes ``python benchmarks/bench_general.py --construction swap``'s files, and the files say
    what the construction promises: never above Lloyd's, never rising, on every task and dataset."""
    import importlib.util
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    spec = importlib.util.spec_from_file_location("bench_general", root / "benchmarks" / "bench_general.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    docs = (root / "docs" / "swap.md").read_text()
    results = root / "benchmarks" / "results" / "swap"
    for name, title in (("synthetic_random", "random init"), ("synthetic_kmeanspp", "k-means++ init")):
        doc = json.loads((results / f"{name}.json").read_text())
        assert doc["construction"] == "swap"
        assert "\n".join(bench.shape_table(doc, title)) in docs, name
        overall = doc["shapes"]["overall"]
        assert overall["frac_never_rises"] == 1.0 and overall["ratio_max"] <= 1 + 2 * MARGIN
    datasets = json.loads((results / "datasets.json").read_text())
    assert "\n".join(bench.dataset_table(datasets)) in docs
    assert all(ds["anytime"]["ratio_max"] <= 1 + 2 * MARGIN for ds in datasets["datasets"])
