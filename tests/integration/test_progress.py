"""Long commands report progress: a bar on a terminal, one line per stage otherwise (here: captured stderr)."""

import io
import json
import re

import pytest

from analysis.cli import main
from analysis.cli.progress import Cells, Stages
from analysis.drift import stages_of


class FakeTerminal(io.StringIO):
    def isatty(self):
        return True


def test_stages_print_one_line_each_off_a_terminal():
    stream = io.StringIO()
    with Stages("demo", ["load", "run", "write"], stream) as stages:
        for name in ("load", "run", "write"):
            stages.start(name)
    lines = stream.getvalue().splitlines()
    assert lines[:3] == ["kmeans-circuits demo: [1/3] load", "kmeans-circuits demo: [2/3] run",
                         "kmeans-circuits demo: [3/3] write"]
    assert re.fullmatch(r"kmeans-circuits demo: done in \d+\.\d s", lines[3]) and len(lines) == 4


def test_stages_draw_a_bar_on_a_terminal():
    stream = FakeTerminal()
    with Stages("demo", ["load", "run"], stream) as stages:
        stages.start("load")
        stages.start("run")
        assert stages.done == 1
    out = stream.getvalue()
    assert "demo" in out and "run" in out and "[1/2]" not in out and "\n" not in out.strip("\r\n")
    assert stages.done == 2


def test_cells_print_one_line_per_finished_cell_off_a_terminal():
    stream = io.StringIO()
    with Cells("demo", 3, stream) as cells:
        cells.update(1)
        cells.update(2)
    lines = stream.getvalue().splitlines()
    assert lines[:3] == [f"kmeans-circuits demo: [{i}/3] cells done" for i in (1, 2, 3)] and len(lines) == 4


def test_a_failed_stage_prints_no_done_line():
    stream = io.StringIO()
    with pytest.raises(RuntimeError):
        with Stages("demo", ["load"], stream) as stages:
            stages.start("load")
            raise RuntimeError("boom")
    assert stream.getvalue().splitlines() == ["kmeans-circuits demo: [1/1] load"]


def test_steps_begin_their_stage_at_the_first_step_and_print_no_line_per_step():
    stream = io.StringIO()
    with Stages("demo", ["circuit", "report"], stream) as stages:
        step = stages.steps("circuit", 4, "layer")
        assert stream.getvalue() == ""  # nothing before the first step: a refusal stays the only line
        for layer in range(4):
            step(layer)
        stages.start("report")
    lines = stream.getvalue().splitlines()
    assert lines[:2] == ["kmeans-circuits demo: [1/2] circuit", "kmeans-circuits demo: [2/2] report"]
    assert len(lines) == 3 and lines[2].startswith("kmeans-circuits demo: done in")


def test_steps_are_counted_in_the_bar_label_on_a_terminal():
    stream = FakeTerminal()
    with Stages("demo", ["circuit"], stream) as stages:
        step = stages.steps("circuit", 22, "layer")
        step(0)
        assert "circuit 1/22 layers" in stream.getvalue() and stages.current == "circuit"
        step(4)
        # Only the last label counts: the bar redraws in place.
        assert stream.getvalue().rsplit("\r", 1)[-1].count("circuit 5/22 layers") == 1
    assert stages.done == 1 and "[1/1]" not in stream.getvalue()


def _stage_lines(err: str, command: str) -> list[str]:
    return [line.split("] ", 1)[1] for line in err.splitlines()
            if line.startswith(f"kmeans-circuits {command}: [")]


def test_patch_reports_each_stage(tmp_path, capsys):
    code = main(["patch", "--dataset", "blobs", "--n", "12", "--centers", "2", "--k", "2", "--iterations", "1",
                 "--corruption", "move-centroid", "--sweeps", "layer-position,components", "--out",
                 str(tmp_path / "p"), "--json"])
    err = capsys.readouterr().err
    assert code == 0, err
    assert _stage_lines(err, "patch") == ["clean and corrupted runs", "sweep layer-position", "sweep components",
                                          "pages"]


TINY = ["--dataset", "blobs", "--n", "12", "--centers", "2", "--k", "2", "--iterations", "1"]


def test_cluster_and_report_report_their_stages_on_stderr_only(tmp_path, capsys):
    capsys.readouterr()
    assert main(["cluster", *TINY, "--json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["verified"] and out.count("\n") == 1  # stdout is the JSON object alone
    assert _stage_lines(err, "cluster") == ["circuit"] and re.search(r"cluster: done in \d+\.\d s$", err.strip())
    assert main(["cluster", *TINY, "--json", "--out", str(tmp_path / "c")]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["verified"] and _stage_lines(err, "cluster") == ["circuit", "report"]
    assert main(["report", *TINY, "--max-points", "10", "--out", str(tmp_path / "r.html")]) == 0
    out, err = capsys.readouterr()
    assert _stage_lines(err, "report") == ["circuit", "report"] and "kmeans-circuits" not in out


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    out = tmp_path_factory.mktemp("ck") / "tiny"
    code = main(["train", "--d", "2", "--k", "3", "--n", "16", "--steps", "2", "--batch", "2", "--iterations", "2",
                 "--eval-iterations", "2", "--val-tasks", "2", "--val-every", "2", "--out", str(out), "--json"])
    assert code == 0
    return out


def test_evaluate_and_drift_report_each_stage(checkpoint, tmp_path, capsys):
    capsys.readouterr()
    assert main(["evaluate", "--checkpoint", str(checkpoint), "--tasks", "2", "--steps", "2", "--datasets", "blobs",
                 "--dataset-inits", "1", "--json"]) == 0
    # Two cells (one chunk of held-out tasks, one dataset), each reported as it finishes.
    assert _stage_lines(capsys.readouterr().err, "evaluate") == ["cells done", "cells done"]
    assert main(["drift", "--checkpoint", str(checkpoint), "--out", str(tmp_path / "d.html"), "--tasks", "2", "--n",
                 "12", "--steps", "2", "--no-ablations", "--json"]) == 0
    stages = _stage_lines(capsys.readouterr().err, "drift")
    assert stages == stages_of(with_ablations=False) + ["report"]
    assert stages == ["weights", "behaviour", "attention patterns", "report"]


def test_help_lists_variants_and_shows_defaults(capsys):
    with pytest.raises(SystemExit):
        main(["cluster", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    from circuits.variants import REGISTERED

    assert "NAME:KEY=VALUE" in out and all(v.name in out for v in REGISTERED) and "soft (beta=30)" in out
    assert "(default: float64)" in out and "(default 10)" in out and "(default: 10)" not in out
