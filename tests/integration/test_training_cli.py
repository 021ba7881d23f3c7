"""The train / evaluate / drift / cluster --checkpoint commands as a user meets them (tiny sizes)."""

import json
from pathlib import Path

import numpy as np
import pytest

from browser import static_external_references
from circuits import reference
from circuits.training.schema import read_log
from command_server import run_command as cli

ROOT = Path(__file__).resolve().parents[2]


def assert_usage_error(res, *needles):
    assert res.returncode == 2, (res.returncode, res.stderr)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in res.stderr, res.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    out = tmp_path_factory.mktemp("ck") / "tiny"
    res = cli("train", "--d", 2, "--k", 3, "--n", 16, "--steps", 4, "--batch", 2, "--iterations", 3,
              "--eval-iterations", 3, "--val-tasks", 2, "--val-every", 2, "--out", out, "--json")
    assert res.returncode == 0, res.stderr
    last = json.loads(res.stdout)
    assert last["step"] == 4 and 0 < last["val_ratio"] < 10
    return out


def test_train_writes_a_checkpoint_and_its_log(checkpoint):
    names = sorted(p.name for p in checkpoint.iterdir())
    assert names == ["config.json", "log.jsonl", "model.safetensors", "state.safetensors"]
    log = read_log(checkpoint)
    assert [r["step"] for r in log] == [0, 2, 4]
    assert all({"val_ratio", "drift", "knobs", "wall_s", "cpu_s"} <= set(r) for r in log)


def test_evaluate_json_against_lloyds(checkpoint):
    res = cli("evaluate", "--checkpoint", checkpoint, "--tasks", 3, "--steps", 3, "--datasets", "blobs",
              "--dataset-inits", 2, "--json")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    steps = doc["tasks"]["per_step"]
    assert [r["step"] for r in steps] == [1, 2, 3] and doc["tasks"]["count"] == 3
    for r in steps:
        assert r["ratio_mean"] > 0 and 0 <= r["frac_model_better"] <= 1 and -1 <= r["model_ari"] <= 1
    # Lloyd's column is the numpy reference on the same held-out tasks from the same initial centroids.
    from circuits.training.tasks import TEST, task_stream

    tasks = task_stream(64, 16, 2, 3, 3, 0, TEST)
    lloyd = np.mean([reference.lloyd(x, c, 3).objectives[-1] for x, c in zip(tasks.X, tasks.C0)])
    assert steps[-1]["lloyd_objective"] == pytest.approx(lloyd, rel=1e-9)
    ds = doc["datasets"][0]
    assert ds["name"] == "blobs" and ds["inits"] == 2 and len(ds["per_step"]) == 3


def test_cluster_with_a_checkpoint_runs_the_hooked_transformer(checkpoint, tmp_path):
    res = cli("cluster", "--dataset", "blobs", "--n", 40, "--d", 2, "--centers", 3, "--k", 3, "--iterations", 4,
              "--checkpoint", checkpoint, "--json", "--out", tmp_path / "out")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["verified"] is True and doc["export_error"] < 1e-4 and doc["export_path"] == "masked"
    assert len(doc["labels"]) == 40 and np.array(doc["centroids"]).shape == (3, 2)
    assert [r["iteration"] for r in doc["per_iteration"]] == [1, 2, 3, 4]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["centroids.csv", "evaluation.json", "labels.csv"]


def test_drift_writes_a_self_contained_report(checkpoint, tmp_path):
    out = tmp_path / "drift.html"
    res = cli("drift", "--checkpoint", checkpoint, "--out", out, "--tasks", 2, "--n", 12, "--steps", 3, "--json")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["summary"] and len(doc["circuits"]) == 4 and len(doc["ablations"]) == 6
    html = out.read_text()
    assert static_external_references(html) == []
    assert "What the trained model does differently" in html and doc["summary"][0].split(":")[0] in html


@pytest.mark.parametrize("args, needle", [
    (["train", "--d", 2, "--k", 0, "--steps", 1, "--out", "{tmp}/x"], "--k"),
    (["train", "--d", 2, "--k", 3, "--n", 2, "--steps", 1, "--out", "{tmp}/x"], "--n"),
    (["train", "--d", 2, "--k", 3, "--steps", 1, "--lr", -1, "--out", "{tmp}/x"], "--lr"),
    (["train", "--d", 2, "--k", 3, "--steps", 1, "--resume", "--out", "{tmp}/x"], "no checkpoint"),
    (["evaluate", "--checkpoint", "{tmp}/missing"], "no checkpoint"),
    (["evaluate", "--checkpoint", "{ck}", "--tasks", -1], "--tasks"),
    (["evaluate", "--checkpoint", "{ck}", "--datasets", "mnist"], "mnist"),
    (["drift", "--checkpoint", "{ck}", "--out", "{tmp}"], "folder"),
    (["drift", "--checkpoint", "{tmp}/missing", "--out", "{tmp}/d.html"], "no checkpoint"),
    (["cluster", "--dataset", "iris", "--k", 3, "--checkpoint", "{ck}"], "d=2, k=3"),
    (["cluster", "--dataset", "blobs", "--d", 2, "--k", 3, "--variant", "soft", "--checkpoint", "{ck}"], "--variant"),
])
def test_bad_input_is_one_line_and_exit_2(checkpoint, tmp_path, args, needle):
    res = cli(*[str(a).format(tmp=tmp_path, ck=checkpoint) for a in args])
    assert_usage_error(res, needle)
    assert not (tmp_path / "x").exists() and not (tmp_path / "d.html").exists()


def test_train_refuses_a_non_empty_out_without_resume(checkpoint):
    before = (checkpoint / "model.safetensors").read_bytes()
    assert_usage_error(cli("train", "--d", 2, "--k", 3, "--steps", 1, "--out", checkpoint), "--resume")
    assert (checkpoint / "model.safetensors").read_bytes() == before


def test_a_corrupt_checkpoint_is_a_usage_error(checkpoint, tmp_path):
    import shutil

    bad = tmp_path / "bad"
    shutil.copytree(checkpoint, bad)
    (bad / "model.safetensors").write_bytes(b"not a safetensors file")
    assert_usage_error(cli("evaluate", "--checkpoint", bad, "--tasks", 1, "--datasets", "none"), "safetensors")


# ------------------------------------------------------------------------------------------------ issue 22
TINY = ["train", "--d", 2, "--k", 2, "--n", 8, "--steps", 2, "--batch", 1, "--val-tasks", 2, "--iterations", 2,
        "--eval-iterations", 2, "--val-every", 1, "--device", "cpu"]


@pytest.mark.parametrize("knob, needle", [
    # Found when the model is built (issue 42: numpy's RuntimeWarning came first, then a NaN validation).
    (["--beta", "1e300"], "an initial weight of magnitude 2e+300 overflows float32"),
    (["--growth", "1e300"], "an initial weight of magnitude 1e+300 overflows float32"),
    (["--lr", "1e308"], "--lr 1e+308 is above 3.4e+37"),  # Adam's first step would not be a float32 (a crash)
    (["--lr", "3e37"], "training diverged at step 1 "),
    (["--lr", "3e37", "--val-every", 50], "training diverged at step 2 "),  # the loss, before any validation
])
def test_a_run_that_overflows_or_diverges_is_one_line_and_leaves_nothing(knob, needle, tmp_path, capsys, monkeypatch):
    from analysis.cli import main

    code = main([str(a) for a in TINY + knob + ["--out", tmp_path / "t"]])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and needle in err, err
    assert "diverged" not in err or err.strip().endswith("; nothing written"), err
    assert not (tmp_path / "t").exists()


def test_a_run_validated_rarely_still_says_where_it_is(tmp_path, capsys, monkeypatch):
    from analysis.cli import main
    from analysis.cli import train

    monkeypatch.setattr(train, "QUIET_LINE_S", 0.0)  # a line at every step instead of every 30 s
    # Later options win: 3 steps, validated only at the end.
    assert main([str(a) for a in TINY + ["--steps", 3, "--val-every", 10, "--out", tmp_path / "t"]]) == 0
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 3 and all("(next validation at step 3)" in line for line in lines[:2]), lines
    assert lines[0].startswith("step 1/3 loss")
    assert lines[2].startswith("step 3/3 loss") and "val_ratio" in lines[2]  # the validation at the last step


def test_all_equal_points_are_as_good_as_lloyds_not_ratio_0(tmp_path, capsys):
    from analysis.cli import main

    np.savetxt(tmp_path / "same.csv", np.full((6, 2), 3.5), delimiter=",")
    assert main(["cluster", "--data", str(tmp_path / "same.csv"), "--k", "1", "--iterations", "2",
                 "--checkpoint", str(ROOT / "checkpoints" / "general"), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["inertia"] == doc["lloyd_inertia"] == 0.0 and doc["ratio_to_lloyd"] == 1.0
