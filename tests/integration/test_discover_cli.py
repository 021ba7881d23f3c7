"""``kmeans-circuits discover`` as a user meets it: a run with --out, a plug-in method, --dataset, the table, the
limits on work (each refused in one line, exit 2, stated in --help), strict JSON, and bad input."""

import json
import os
from pathlib import Path

import pytest

from command_server import run_command as cli


def strict(text: str):
    """JSON as strict parsers read it: NaN and Infinity are errors."""
    def refuse(name):
        raise ValueError(f"non-strict JSON constant {name}")
    return json.loads(text, parse_constant=refuse)


def test_acdc_run_writes_json_and_page(tmp_path):
    out = tmp_path / "disc"
    res = cli("discover", "--method", "acdc", "--k", 2, "--n", 8, "--iterations", 1, "--seed", 1, "--pairs", 3,
              "--corruption", "move-point", "--metric", "l2", "--out", out, "--json")
    assert res.returncode == 0, res.stderr
    doc = strict(res.stdout)
    assert sorted(p.name for p in out.iterdir()) == ["discovery.html", "discovery.json"]
    assert strict((out / "discovery.json").read_text())["method"] == "acdc"
    truth = doc["ground_truth"]
    assert doc["method"] == "acdc" and (doc["ablation"], doc["metric"]) == ("resample", "l2")
    assert truth["members"] == sum(e["truth"] == "member" for e in doc["edges"]) > 0
    assert truth["data_flow_edges"] == sum(e["in_data_flow"] for e in doc["edges"]) == 23
    assert all(e["truth"] in ("member", "inert", "undecided") for e in doc["edges"])
    assert 0 <= doc["step_auc"] <= doc["auroc"] <= 1 and set(doc["baselines"]) == {"random", "weights-only"}
    page = (out / "discovery.html").read_text()
    assert 'src="http' not in page and ("M0-&gt;out" in page or "M0->out" in page)


# --- issue 42: each limit refused in one line (exit 2) before the work, and named in --help.
@pytest.mark.parametrize("args, words", [
    (("--seed", 4294967296), "seed must be in [0, 2**32)"),
    (("--variant", "learned", "--iterations", 8, "--method", "eap"), "at most 4000"),
    (("--variant", "swap", "--iterations", 8, "--d", 8, "--k", 6, "--n", 200), "at most 4000"),
    (("--table", "--seeds", 20), "exceeds the table's limit 6e+08"),
    (("--iterations", 8, "--n", 200, "--k", 6, "--d", 8), "exceeds discover's limit 1e+09"),
])
def test_unbounded_work_is_refused_naming_the_limit(tmp_path, args, words):
    res = cli("discover", *args, "--out", tmp_path / "o", cwd=tmp_path, timeout=120)
    assert res.returncode == 2, res.stderr
    assert words in res.stderr and len(res.stderr.strip().splitlines()) == 1
    assert not any(tmp_path.iterdir())


def test_the_limits_are_stated_in_help():
    res = cli("discover", "--help")
    assert res.returncode == 0
    text = " ".join(res.stdout.split())
    for words in ("at most 4000 candidate edges", "1e+09 for a run", "6e+08 for --table", "--seeds 1..20",
                  "0 <= seed < 2**32"):
        assert words in text, words


def test_json_is_strict_where_precision_is_undefined(tmp_path):
    """A threshold no edge survives: the reported subgraph is empty, its precision undefined: ``null``, not NaN."""
    res = cli("discover", "--threshold", "1e300", "--json", "--k", 2, "--n", 8, "--iterations", 1, "--pairs", 2,
              cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    doc = strict(res.stdout)
    assert doc["precision"] is None and doc["found"] == 0 and doc["spurious"] == 0


def test_a_plug_in_method_is_scored_like_the_built_ins(tmp_path):
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "my_method.py").write_text(
        "import numpy as np\n\n"
        "def by_order(task):\n    return np.arange(task.patcher.E, dtype=float)\n\n"
        "def broken(task):\n    return np.ones(3)\n")
    base = ("--k", 2, "--n", 8, "--iterations", 1, "--pairs", 2)
    # Found on PYTHONPATH, from another folder, as docs/discovery.md has it: the module is imported (the refusal
    # names its missing function, not a missing module). A PYTHONPATH of its own is a new process, so this is the
    # cheapest command that imports the plug-in (3 s; a scored run is 12 s).
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(plugins), os.environ.get("PYTHONPATH", "")])}
    res = cli("discover", "--method", "my_method:nothing", *base, cwd=tmp_path, env=env)
    assert res.returncode == 2 and "has no function 'nothing'" in res.stderr, res.stderr
    # The rest from the plug-in's folder, which `python -m` puts first on the path: served by the warm process.
    res = cli("discover", "--method", "my_method:by_order", "--json", *base, cwd=plugins)
    assert res.returncode == 0, res.stderr
    doc = strict(res.stdout)
    assert doc["method"] == "my_method:by_order" and doc["baselines"]["weights-only"]["edges"]["step_auc"] >= 0
    for method, words in (("my_method:broken", "must return"), ("my_method:nothing", "no function"),
                          ("no_module_here:f", "cannot import")):
        res = cli("discover", "--method", method, *base, cwd=plugins)
        assert res.returncode == 2 and words in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr


def test_dataset_and_data_as_cluster_has(tmp_path):
    res = cli("discover", "--dataset", "iris", "--sample", 30, "--pairs", 2, "--iterations", 1, "--json",
              cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    doc = strict(res.stdout)
    assert doc["problem"]["n"] == 30 and doc["problem"]["d"] == 4 and "iris" in doc["problem"]["source"]
    import numpy as np

    np.save(tmp_path / "big.npy", np.random.default_rng(0).normal(size=(300, 2)))
    res = cli("discover", "--data", tmp_path / "big.npy", cwd=tmp_path)
    assert res.returncode == 2 and "--sample" in res.stderr and "2..200 points" in res.stderr


@pytest.mark.parametrize("args, words", [
    (("--k", 1), "--k must be in"),
    (("--corruption", "nope"), "unknown: nope"),
    (("--corruption", "add-outlier,move-point"), "run it alone"),
    (("--threshold", "nan"), "--threshold"),
    (("--method", "sp"), "unknown method"),
    (("--ablation", "half"), "invalid choice"),
    (("--sample", 5), "--dataset/--data"),
    (("--pairs", 0), "--pairs must be in"),
    (("--variant", "swap", "--iterations", 0), "at least 1"),
    (("--variant", "learned", "--corruption", "add-outlier"), "add-outlier"),
    (("--variant", "nope"), "choose one of"),
    (("--table", "--constructions", "lloyd,nope"), "unknown: nope"),
    (("--variant", "gumbel", "--k", 2, "--n", 8, "--iterations", 1, "--pairs", 1), "place in the batch"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, words):
    res = cli("discover", *args, cwd=tmp_path)
    assert res.returncode == 2, res.stderr
    assert words in res.stderr and len(res.stderr.strip().splitlines()) == 1
    assert not any(tmp_path.iterdir())


def test_swap_circuit_eap_run_scores_against_its_task(tmp_path):
    """The safeguarded swap at its tiniest shape: 827 candidates, 133 in the weights' data flow; an edge outside
    the data flow scores exactly 0 (its port reads nothing its source writes)."""
    out = tmp_path / "disc"
    res = cli("discover", "--variant", "swap", "--method", "eap", "--d", 1, "--k", 2, "--n", 8, "--iterations", 1,
              "--pairs", 2, "--metric", "l2", "--corruption", "move-point,move-centroid", "--out", out, "--json")
    assert res.returncode == 0, res.stderr
    doc = strict(res.stdout)
    assert (doc["ground_truth"]["data_flow_edges"], len(doc["edges"])) == (133, 827)
    assert all(e["score"] == 0 for e in doc["edges"] if not e["in_data_flow"])
    assert doc["ground_truth"]["corruption"] == "move-point,move-centroid"


def test_the_table_writes_its_files(tmp_path):
    out = tmp_path / "table"
    res = cli("discover", "--table", "--constructions", "distractor", "--seeds", 1, "--jobs", 1, "--out", out,
              cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert sorted(p.name for p in out.iterdir()) == ["figures.html", "table.json", "table.md"]
    doc = strict((out / "table.json").read_text())
    assert {r["method"] for r in doc["rows"]} == {"acdc", "eap", "eap-ig"}
    assert {(t["corruption"], t["ablation"]) for t in doc["truths"]} == {
        ("move-centroid", "resample"), ("move-point", "resample"), ("swap-centroids", "resample"),
        ("(clean inputs)", "zero"), ("(clean inputs)", "mean")}
    assert "step AUC, edges, metric kl" in res.stdout and "weights-only" in res.stdout


def test_out_that_is_a_file_is_refused(tmp_path):
    (tmp_path / "f").write_text("x")
    res = cli("discover", "--out", tmp_path / "f")
    assert res.returncode == 2 and "not a folder" in res.stderr


def test_headline_checkpoint_marks_the_edges_training_added(tmp_path):
    headline = Path(__file__).resolve().parents[2] / "checkpoints" / "headline"
    res = cli("discover", "--checkpoint", headline, "--seeds", 1, "--corruption", "swap-centroids", "--json",
              cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    doc = strict(res.stdout)
    assert "A0->A1.k" in doc["added_by_training"] and doc["dropped_by_training"] == []
    for method in ("acdc", "eap", "eap-ig"):
        m = doc["methods"][method]
        assert sorted(m["added_found"] + m["added_missed"]) == sorted(doc["added_by_training"])


def test_checkpoint_that_is_not_one_is_exit_2(tmp_path):
    res = cli("discover", "--checkpoint", tmp_path, cwd=tmp_path)
    assert res.returncode == 2 and "--checkpoint" in res.stderr and len(res.stderr.strip().splitlines()) == 1
