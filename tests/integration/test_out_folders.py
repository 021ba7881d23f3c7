"""Issue 42, section 5: a writer killed at any moment leaves the complete previous output or the complete new one.

A new process (tests/command_server.py's ``run_python``) runs :func:`circuits.files.write_folder_atomic` (the one
writer of every ``--out`` folder and of every checkpoint) over an existing folder and is killed with ``os._exit``
at its n-th step — each file written, each entry linked, each rename, the swap — for every n until it completes;
then ``cluster --out`` itself is killed at the swap, and failed (in-process) at every step.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from analysis.cli import main
from circuits import files
from command_server import run_python
from test_files import KEPT, NEW, OLD, contents, make_previous


#: Kills the writer at its n-th step (argv: n, then what to run); "renames": as on a system without renameat2.
KILLER = textwrap.dedent("""
    import json, os, runpy, sys
    from circuits import files
    n, mode = int(sys.argv[1]), sys.argv[2]
    if mode == "renames":
        files.exchange = lambda a, b: False
    count = [0]
    def killing(owner, name):
        real = getattr(owner, name)
        def step(*args, **kwargs):
            count[0] += 1
            if count[0] == n:
                os._exit(9)  # killed here: no cleanup, no finally
            return real(*args, **kwargs)
        setattr(owner, name, step)
    for name in ("_write", "_link_or_copy", "exchange"):
        killing(files, name)
    killing(os, "rename")
    if sys.argv[3] == "write":
        files.write_folder_atomic(sys.argv[4], json.loads(sys.argv[5]))
    else:
        from analysis.cli import main
        sys.exit(main(sys.argv[4:]))
""")


def can_exchange(tmp_path: Path) -> bool:
    a, b = tmp_path / ".probe-a", tmp_path / ".probe-b"
    a.mkdir()
    b.mkdir()
    try:
        return files.exchange(a, b)
    finally:
        a.rmdir()
        b.rmdir()


@pytest.mark.parametrize("swap", ["exchange", "renames"])
def test_a_writer_killed_at_any_step_leaves_a_complete_folder(tmp_path, swap):
    """Killed at its n-th step for every n: the folder is the complete previous or the complete new output. Where
    the system swaps by two renames, a kill between them leaves the previous output whole beside the folder."""
    if swap == "exchange" and not can_exchange(tmp_path):
        pytest.skip("this system cannot swap two paths (renameat2 RENAME_EXCHANGE)")
    old, new = {**OLD, **KEPT, "link": "mine\n"}, {**NEW, **KEPT, "link": "mine\n"}
    seen = []
    for n in range(1, 30):
        root = tmp_path / f"run{n}"
        out = root / "out"
        make_previous(out)
        done = run_python(KILLER, n, swap, "write", out, json.dumps(NEW))
        assert done.returncode in (0, 9), done.stderr
        if out.exists():
            state = contents(out)
            assert state in (old, new), (n, state)
            seen.append("new" if state == new else "old")
        else:  # only between the two renames of the fallback
            assert swap == "renames", n
            aside = [p for p in root.iterdir() if p.name.startswith(".out.previous-")]
            assert len(aside) == 1 and contents(aside[0]) == old, (n, list(root.iterdir()))
            seen.append("aside")
        if done.returncode == 0:
            break
    assert done.returncode == 0 and seen[-1] == "new" and set(seen[:-1]) <= {"old", "aside"}, seen
    assert len(seen) >= len(NEW) + 4


CLUSTER = ["cluster", "--dataset", "iris", "--k", "3", "--iterations", "1"]
CLUSTER_FILES = ("labels.csv", "centroids.csv", "verification.json", "report.html")


def test_cluster_killed_at_the_swap_keeps_the_previous_output(tmp_path):
    """The issue's case: ``cluster --out`` over its previous output, killed at the swap (its last step) and just
    before it: the previous four files stay, byte for byte; let through, the new four are there."""
    out = tmp_path / "out"
    assert main(CLUSTER + ["--seed", "1", "--out", str(out)]) in (0, 1)
    before = contents(out)
    assert sorted(before) == sorted(CLUSTER_FILES)
    for n, expected in ((4, "old"), (5, "old"), (6, "new")):  # 4 files written, then the swap (5th step)
        done = run_python(KILLER, n, "exchange", "cli", *CLUSTER, "--seed", "2", "--out", out)
        state = contents(out)
        if expected == "old":
            assert done.returncode == 9 and state == before, (n, done.stderr[-2000:])
        else:
            assert done.returncode in (0, 1) and sorted(state) == sorted(CLUSTER_FILES) and state != before
    # A kill leaves its temporary sibling (hidden, never the output's name); the completed run leaves none.
    assert sorted(p.name.split(".tmp-")[0] for p in tmp_path.iterdir()) == [".out", ".out", "out"]


def test_cluster_failing_at_any_step_keeps_the_previous_output(tmp_path, monkeypatch, capsys):
    """In-process, a write failing at each step in turn: exit 2, one error line, the previous files byte for byte."""
    from test_files import failing_at

    out = tmp_path / "out"
    assert main(CLUSTER + ["--out", str(out)]) in (0, 1)
    before = contents(out)
    capsys.readouterr()
    for n in range(1, 6):
        calls: list = []
        with monkeypatch.context() as m:
            failing_at(m, n, calls)
            code = main(CLUSTER + ["--seed", "3", "--out", str(out)])
        err = capsys.readouterr().err
        # Progress lines (stderr, off a terminal), then the error's one line.
        assert code == 2 and "Traceback" not in err, (n, calls, err)
        assert err.strip().splitlines()[-1].startswith("kmeans-circuits cluster: error: cannot write --out"), err
        assert "No space left" in err, err
        assert contents(out) == before and [p.name for p in tmp_path.iterdir()] == ["out"], (n, calls)
