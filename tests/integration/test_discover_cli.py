"""``kmeans-circuits discover`` as a user meets it: a small run with --out, and bad input (one line, exit 2)."""

import json
import subprocess
import sys

import pytest

CLI = [sys.executable, "-m", "analysis.cli"]


def cli(*args, cwd=None, timeout=300):
    return subprocess.run([*CLI, *map(str, args)], capture_output=True, text=True, cwd=cwd, timeout=timeout)


def test_acdc_run_writes_json_and_page(tmp_path):
    out = tmp_path / "disc"
    res = cli("discover", "--method", "acdc", "--k", 2, "--n", 8, "--iterations", 1, "--seed", 1,
              "--corruption", "move-point", "--out", out, "--json")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert sorted(p.name for p in out.iterdir()) == ["discovery.html", "discovery.json"]
    assert doc["method"] == "acdc" and doc["spurious"] == 0 and 0.5 < doc["auroc"] <= 1
    assert sum(e["in_circuit"] for e in doc["edges"]) == 23
    page = (out / "discovery.html").read_text()
    assert 'src="http' not in page and "M0-&gt;out" in page or "M0->out" in page


@pytest.mark.parametrize("args, words", [
    (("--k", 1), "--k must be in"),
    (("--corruption", "nope"), "unknown nope"),
    (("--corruption", "add-outlier,move-point"), "run it alone"),
    (("--threshold", "nan"), "--threshold"),
    (("--method", "sp"), "invalid choice"),
    (("--table", "--out", "x"), "--table"),
    (("--variant", "swap", "--iterations", 0), "at least 1"),
    (("--variant", "learned", "--corruption", "add-outlier"), "add-outlier"),
    (("--table", "--constructions", "lloyd,nope"), "unknown: nope"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, words):
    res = cli("discover", *args, cwd=tmp_path)
    assert res.returncode == 2
    assert words in res.stderr and len(res.stderr.strip().splitlines()) == 1
    assert not any(tmp_path.iterdir())


def test_swap_circuit_eap_run_scores_against_its_graph(tmp_path):
    """The safeguarded swap at its tiniest shape: its weight-derived graph (133 of 827 candidates), EAP's reported
    edges all in it (outside the graph an edge's score is exactly 0), the page drawn."""
    out = tmp_path / "disc"
    res = cli("discover", "--variant", "swap", "--method", "eap", "--d", 1, "--k", 2, "--n", 8, "--iterations", 1,
              "--corruption", "move-point,move-centroid", "--out", out, "--json")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert (sum(e["in_circuit"] for e in doc["edges"]), len(doc["edges"])) == (133, 827)
    assert doc["precision"] == 1.0 and doc["found"] > 0 and doc["spurious"] == 0
    assert all(e["score"] == 0 for e in doc["edges"] if not e["in_circuit"])
    assert "discovery.html" in {p.name for p in out.iterdir()}


def test_out_that_is_a_file_is_refused(tmp_path):
    (tmp_path / "f").write_text("x")
    res = cli("discover", "--out", tmp_path / "f")
    assert res.returncode == 2 and "not a folder" in res.stderr


def test_headline_checkpoint_marks_the_edges_training_added(tmp_path):
    from pathlib import Path

    headline = Path(__file__).resolve().parents[2] / "checkpoints" / "headline"
    res = cli("discover", "--checkpoint", headline, "--seeds", 1, "--corruption", "swap-centroids", "--json",
              cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert "A0->A1.k" in doc["added_by_training"] and doc["dropped_by_training"] == []
    for method in ("acdc", "eap", "eap-ig"):
        m = doc["methods"][method]
        assert sorted(m["added_found"] + m["added_missed"]) == sorted(doc["added_by_training"])


def test_checkpoint_that_is_not_one_is_exit_2(tmp_path):
    res = cli("discover", "--checkpoint", tmp_path, cwd=tmp_path)
    assert res.returncode == 2 and "--checkpoint" in res.stderr and len(res.stderr.strip().splitlines()) == 1
