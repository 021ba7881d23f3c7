"""Issue 42, section 6: exit codes and NaN, by class.

* every command with ``--device``: a device that is not there is exit 2 in one line, and ``--device cuda`` for
  what runs on the CPU only (a construction, a trained checkpoint, the numpy reference) is refused, not ignored;
* a knob of 1e308 is an error without a RuntimeWarning before it;
* a checkpoint is untrusted input: weights of 3e38 pass every check of the file and make the model's numbers
  overflow, which is exit 2 ("an unusable checkpoint"), nothing printed or written, never a document of NaN;
* every JSON document printed or written is strict JSON (no NaN or Infinity), a diverged training's log too.

In-process through ``analysis.cli.main``, as tests/integration/test_cli_bad_input.py.
"""

from __future__ import annotations

import argparse
import json
import os
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from analysis.cli import build_parser, main
from circuits.strict_json import NonFiniteError, dumps, first_nonfinite, nulled

from test_cli_bad_input import base_commands, checkpoint, usage_error, with_option  # noqa: F401 (a fixture)


def strict_loads(text: str):
    """``json.loads`` that refuses NaN, Infinity and -Infinity, as JSON.parse does."""
    def refuse(literal):
        raise ValueError(f"{literal} is not JSON")
    return json.loads(text, parse_constant=refuse)


def commands_with(flag: str) -> list[str]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sorted(name for name, p in sub.choices.items()
                  if any(flag in a.option_strings for a in p._actions) and name != "discover")


@pytest.mark.parametrize("command", commands_with("--device"))
def test_a_device_that_is_not_there_is_one_line_for_every_command(command, checkpoint, tmp_path, capsys,
                                                                  monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.chdir(tmp_path)
    argv = [command] + with_option(base_commands(tmp_path, checkpoint)[command], "--device", "cuda")
    usage_error(capsys, argv, "--device cuda: no CUDA device is available")
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("argv, needle", [
    # The case: ran the swap construction on the CPU and exited 0.
    (["report", "--dataset", "iris", "--k", 3, "--construction", "swap", "--out", "{tmp}/r.html"], "--construction"),
    (["cluster", "--dataset", "iris", "--k", 3, "--construction", "learned"], "--construction"),
    (["sweep", "--grid", "tiny", "--runner", "reference", "--out", "{tmp}/s"], "--runner reference"),
    (["evaluate", "--construction", "swap", "--tasks", 1], "--construction"),
])
def test_cuda_for_what_runs_on_the_cpu_is_refused_where_cuda_exists(argv, needle, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # as on a GPU machine: nothing may reach CUDA
    usage_error(capsys, [str(a).format(tmp=tmp_path) for a in argv] + ["--device", "cuda"],
                f"{needle}", "runs on the CPU: --device cuda does not apply")
    assert os.listdir(tmp_path) == []


KNOBS = [("train", flag) for flag in ("--beta", "--beta-update", "--growth", "--lr", "--gamma", "--clip")] + \
        [(command, flag) for command in ("cluster", "report", "patch", "prove")
         for flag in ("--beta", "--beta-update", "--tie-break")]


@pytest.mark.parametrize("command, flag", KNOBS)
def test_a_knob_of_1e308_is_a_result_or_one_line_without_a_warning(command, flag, checkpoint, tmp_path, capsys,
                                                                  monkeypatch):
    """``train --beta 1e308`` printed numpy's RuntimeWarning (inf / inf in the weights' preconditioning) before its
    one-line error; now the construction's overflow is found before it: one line, no warning."""
    monkeypatch.chdir(tmp_path)
    argv = [command] + with_option(base_commands(tmp_path, checkpoint)[command], flag, "1e308")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        code = main(argv)
    err = capsys.readouterr().err
    assert code in (0, 1, 2) and "Traceback" not in err, (argv, err)
    assert not [w for w in caught if issubclass(w.category, RuntimeWarning)], [str(w.message) for w in caught]
    if code == 2:
        assert len(err.strip().splitlines()) == 1, err


def overflowing(checkpoint: Path, tmp_path: Path) -> Path:
    """``checkpoint`` with every trained weight 3e38 (finite float32, within the file's checks)."""
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file

    from circuits.training.checkpoint import load_model

    bad = tmp_path / "big"
    bad.mkdir()
    for entry in checkpoint.iterdir():
        (bad / entry.name).write_bytes(entry.read_bytes())
    model, _ = load_model(bad)
    scales = dict(model.named_buffers())
    params = {name for name, _ in model.named_parameters()}
    tensors = load_file(str(bad / "model.safetensors"))
    with safe_open(str(bad / "model.safetensors"), "pt") as f:
        meta = f.metadata()
    save_file({name: torch.full_like(t, 3e38) / scales[name + "_scale"] if name in params else t
               for name, t in tensors.items()}, str(bad / "model.safetensors"), metadata=meta)
    load_model(bad)  # passes every check of the file
    return bad


@pytest.mark.parametrize("command", ["evaluate", "cluster", "drift"])
@pytest.mark.parametrize("as_json", [True, False])
def test_a_checkpoint_whose_numbers_overflow_is_unusable_not_nan(command, as_json, checkpoint, tmp_path, capsys):
    """A checkpoint with weights of 3e38: evaluate printed 333 NaN literals and exited 0 ("ratio_mean": NaN)."""
    bad = overflowing(checkpoint, tmp_path)
    out = tmp_path / ("d.html" if command == "drift" else "out")
    np.save(tmp_path / "x.npy", np.random.default_rng(0).random((12, 2)))
    argv = {"evaluate": ["evaluate", "--tasks", 2, "--steps", 2, "--datasets", "none"],
            "cluster": ["cluster", "--data", tmp_path / "x.npy", "--k", 3, "--iterations", 2, "--out", out],
            "drift": ["drift", "--tasks", 1, "--steps", 2, "--no-ablations", "--out", out]}[command]
    code = main([str(a) for a in argv + ["--checkpoint", bad] + (["--json"] if as_json else [])])
    captured = capsys.readouterr()
    assert code == 2, (code, captured.err[-2000:])
    assert "an unusable checkpoint: the model's numbers overflow" in captured.err.strip().splitlines()[-1]
    assert captured.out.strip() in ("", ) or "evaluating" in captured.out, captured.out[:300]
    assert not out.exists()


def test_the_one_json_writer_refuses_nan_and_names_it():
    with pytest.raises(NonFiniteError, match=r"tasks\.per_step\[1\]\.ratio is nan"):
        dumps({"tasks": {"per_step": [{"ratio": 1.0}, {"ratio": float("nan")}]}})
    with pytest.raises(NonFiniteError, match=r"\[0\] is -inf"):
        dumps([np.float64(-np.inf)])
    assert first_nonfinite({"a": [1, 2.5, "nan"]}) is None
    assert nulled({"a": [float("inf"), 2.0], "b": (np.nan,)}) == {"a": [None, 2.0], "b": [None]}
    assert strict_loads(dumps({"a": 1e308, "b": None})) == {"a": 1e308, "b": None}


def test_every_json_output_of_the_commands_is_strict(checkpoint, tmp_path, capsys, monkeypatch):
    """``--json`` of every command that has it, and every JSON file they write, parse as strict JSON."""
    monkeypatch.chdir(tmp_path)
    for command in commands_with("--json"):
        (tmp_path / command).mkdir()
        base = base_commands(tmp_path / command, checkpoint)[command]
        code = main([command] + base + ["--json"])
        out = capsys.readouterr().out
        assert code in (0, 1), (command, code)
        strict_loads(out.strip().splitlines()[-1])
    written = [p for p in tmp_path.rglob("*") if p.suffix in (".json", ".jsonl")]
    assert written
    for path in written:
        for line in path.read_text().splitlines() if path.suffix == ".jsonl" else [path.read_text()]:
            strict_loads(line)


def test_a_diverged_training_logs_null_and_its_checkpoint_still_reads(tmp_path):
    """A validation whose numbers are not finite (a diverged run) was logged as NaN literals; it is null now, in
    strict JSON, and the log reads back (the drift and knobs of a diverged model included)."""
    from circuits.training.schema import read_log
    from circuits.training.loop import TrainConfig, train

    cfg = TrainConfig(d=2, k=2, n=8, steps=2, batch=1, lr=3e37, train_iterations=1, eval_iterations=1, val_tasks=1,
                      val_every=1, dtype="float32")
    train(tmp_path / "ck", cfg)
    lines = (tmp_path / "ck" / "log.jsonl").read_text().splitlines()
    records = [strict_loads(line) for line in lines]
    assert any(r["val_ratio"] is None for r in records), records
    assert len(read_log(tmp_path / "ck")) == len(records)
    strict_loads((tmp_path / "ck" / "config.json").read_text())
