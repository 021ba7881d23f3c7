"""Issue 30's text items on the command line: --version, counts in words, one meaning of "step" in train's line."""

import re
from importlib.metadata import version

import pytest

from analysis.cli import main
from analysis.wording import count


def test_version_is_the_package_s(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["--version"])
    assert stop.value.code == 0
    assert capsys.readouterr().out.strip() == f"kmeans-circuits {version('kmeans-circuits')}"


def test_count():
    assert [count(n, "iteration") for n in (0, 1, 2)] == ["0 iterations", "1 iteration", "2 iterations"]
    assert count(1, "k-means iteration") == "1 k-means iteration" and count(3, "child", "children") == "3 children"


BLOBS = ["--dataset", "blobs", "--n", 8, "--d", 2, "--centers", 2, "--k", 2, "--iterations", 1]


@pytest.mark.parametrize("argv, expected", [
    (["cluster", *BLOBS], "1 iteration,"),
    (["cluster", *BLOBS, "--construction", "swap"], "1 step,"),
    (["patch", *BLOBS, "--corruption", "move-point", "--sweeps", "layer-subspace"], "1 iteration;"),
])
def test_one_is_singular(capsys, argv, expected):
    main([str(a) for a in argv])
    # The header line; the verdict line's "converged after N iterations" is the verdict vocabulary's (issue 30 goal 1).
    out = capsys.readouterr().out.splitlines()[0]
    assert expected in out and not re.search(r"\b1 (iterations|steps)\b", out), out


def test_train_says_training_steps_and_k_means_iterations(tmp_path, capsys):
    """It printed "step 1: ... after 1 steps on 1 held-out tasks": a training step and a k-means step."""
    code = main([str(a) for a in ["train", "--d", 2, "--k", 2, "--n", 4, "--steps", 1, "--batch", 1, "--val-tasks", 1,
                                  "--iterations", 1, "--eval-iterations", 1, "--val-every", 2, "--device", "cpu",
                                  "--out", tmp_path / "ck"]])
    out = capsys.readouterr().out
    assert code == 0
    assert out.startswith("after 1 training step: validation ratio model/Lloyd's ")
    assert "(objectives after 1 k-means iteration, on 1 held-out task)" in out and "training step 1," in out
    assert not re.search(r"\b1 (steps|tasks|iterations)\b", out), out
