"""Folders written all at once (:func:`circuits.files.write_folder_atomic`), the one writer of every ``--out``
folder and every checkpoint: at every instant the folder is the complete previous output or the complete new one.

Issue 42: rewriting an existing ``cluster --out`` folder swapped its files one by one, so a writer killed at its
first rename left 3 of 4 files, or old and new files mixed. Here a writer is failed (in-process) or killed
(``os._exit`` in a subprocess, tests/integration/test_out_folders.py) at each of its steps in turn — each file
written, each link, each rename, the swap — and the folder is compared with the previous and the new output.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from circuits import files
from circuits.files import exchange, write_folder_atomic

OLD = {"labels.csv": "old labels\n", "centroids.csv": "old centroids\n", "verification.json": "{\"old\": 1}\n",
       "report.html": "<p>old</p>\n"}
NEW = {"labels.csv": "new labels\n", "centroids.csv": "new centroids\n", "verification.json": "{\"new\": 1}\n",
       "report.html": "<p>new</p>\n"}
#: The user's own entries in the folder, kept through every rewrite.
KEPT = {"notes.txt": "mine\n", "sub/deep.txt": "deeper\n"}


def contents(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): p.read_text() for p in folder.rglob("*") if p.is_file()}


def make_previous(folder: Path) -> None:
    write_folder_atomic(folder, OLD)
    (folder / "sub").mkdir()
    for name, text in KEPT.items():
        (folder / name).write_text(text)
    os.symlink("notes.txt", folder / "link")


def test_a_new_folder_and_a_rewrite_keep_the_users_entries(tmp_path):
    out = tmp_path / "out"
    make_previous(out)
    assert contents(out) == {**OLD, **KEPT, "link": "mine\n"}
    os.chmod(out, 0o750)
    write_folder_atomic(out, {**NEW, "extra.csv": b"bytes\n", "written.txt": lambda p: Path(p).write_text("fn\n")})
    assert contents(out) == {**NEW, **KEPT, "link": "mine\n", "extra.csv": "bytes\n", "written.txt": "fn\n"}
    assert os.path.islink(out / "link") and oct(os.stat(out).st_mode & 0o777) == oct(0o750)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no temporary sibling left


def test_a_folder_where_a_file_goes_is_refused_and_kept(tmp_path):
    out = tmp_path / "out"
    make_previous(out)
    with pytest.raises(IsADirectoryError):
        write_folder_atomic(out, {"sub": "a file over a folder"})
    assert contents(out) == {**OLD, **KEPT, "link": "mine\n"}


def test_exchange_swaps_two_folders_in_one_step(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    (a / "x").write_text("a")
    (b / "x").write_text("b")
    if not exchange(a, b):
        pytest.skip("this system cannot swap two paths (renameat2 RENAME_EXCHANGE)")
    assert (a / "x").read_text() == "b" and (b / "x").read_text() == "a"


#: The operations of a rewrite a failure or a kill can fall on (module attribute or os function, by name).
STEPS = ("_write", "_link_or_copy", "exchange", "rename", "replace")


def failing_at(monkeypatch, n: int, calls: list) -> None:
    """Make the ``n``-th step of a rewrite (counted over :data:`STEPS`) raise ``OSError``."""
    for name in STEPS:
        owner = os if name in ("rename", "replace") else files
        real = getattr(owner, name)

        def step(*args, real=real, name=name, **kwargs):
            calls.append(name)
            if len(calls) == n:
                raise OSError(28, f"No space left on device (at {name})")
            return real(*args, **kwargs)

        monkeypatch.setattr(owner, name, step)


@pytest.mark.parametrize("swap", ["exchange", "renames"])
def test_a_rewrite_failing_at_any_step_leaves_the_previous_folder(tmp_path, monkeypatch, swap):
    if swap == "renames":
        monkeypatch.setattr(files, "exchange", lambda a, b: False)  # a system without renameat2
    n, steps = 1, None
    while True:
        out = tmp_path / f"out{n}"
        make_previous(out)
        calls: list = []
        with monkeypatch.context() as m:
            failing_at(m, n, calls)
            try:
                write_folder_atomic(out, NEW)
                failed = False
            except OSError:
                failed = True
        if not failed:
            steps = n - 1
            assert contents(out) == {**NEW, **KEPT, "link": "mine\n"}
            break
        assert contents(out) == {**OLD, **KEPT, "link": "mine\n"}, (n, calls)
        assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == [], (n, calls)
        n += 1
    assert steps >= len(NEW) + 3  # each file, each kept entry, the swap: every one of them was failed in turn


def test_a_checkpoint_save_failing_at_any_step_leaves_the_previous_checkpoint(tmp_path, monkeypatch):
    """A checkpoint is four files saved at every validation; a save failing part-way left weights of one step beside
    the config of another. Now the previous checkpoint stays, byte for byte, and still loads."""
    import torch

    from circuits.training.checkpoint import load_model, save_checkpoint
    from circuits.training.loop import TrainConfig
    from circuits.training.model import RecurrentKMeans

    cfg = TrainConfig(d=2, k=3, n=8, steps=2, batch=1, train_iterations=1, eval_iterations=1, val_tasks=1)
    model = RecurrentKMeans(cfg.model_config())
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr)

    def save(folder: Path, step: int) -> None:
        config = {"model": cfg.model_config().to_dict(), "dtype": cfg.dtype, "training": cfg.to_dict(),
                  "progress": {"step": step, "best_step": step}}
        save_checkpoint(folder, model, config, optimizer=optimizer, log=[{"step": step, "val_ratio": 1.0}])

    for n in range(1, 5):
        folder = tmp_path / f"ck{n}"
        save(folder, 1)
        before = {p.name: p.read_bytes() for p in folder.iterdir()}
        model.weight("assign", "W_Q").sum().backward()
        optimizer.step()  # the next save has other weights, moments, log and progress
        calls: list = []
        with monkeypatch.context() as m:
            failing_at(m, n, calls)
            with pytest.raises(OSError):
                save(folder, 2)
        assert {p.name: p.read_bytes() for p in folder.iterdir()} == before, (n, calls)
        load_model(folder)
