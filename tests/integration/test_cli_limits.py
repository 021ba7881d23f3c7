"""Issue 42, section 4: no option of any command admits unbounded work or memory.

Every count option of every command (discovered from the parser, so a new option is covered without touching
this file) given a billion is refused before any work: exit 2, one line naming the limit, nothing written. Work
that grows with several options together is bounded by the command's budgets (analysis.cli.limits), each stated
in ``--help``. The commands run in-process (``analysis.cli.main``); the moment a command would start its work
(its progress display) raises, so a command that is not refused fails the test at once instead of running for days.
"""

from __future__ import annotations

import argparse
import os

import pytest

from analysis.cli import build_parser, main
from analysis.cli.limits import Budget
from analysis.scheduler import usable_cpus as cpu_count

from test_cli_bad_input import base_commands, checkpoint, usage_error, with_option  # noqa: F401 (a fixture)

#: Commands whose options this file covers (discover has its own owner and file).
COMMANDS = ("cluster", "report", "patch", "prove", "train", "sweep", "drift", "evaluate")
#: Count options that set no amount of work, and why.
NOT_WORK = {
    ("report", "--max-points"): "points drawn per figure: at most the data's n",
    ("evaluate", "--chunk"): "tasks per forward: at most --tasks",
    ("train", "--val-every"): "a period: validations happen at most --steps times",
    **{("patch", flag): "an index, checked against k or n by the corruption that reads it"
       for flag in ("--centroid", "--other", "--point")},
}
HUGE = 10**9
#: Options that set work only beside another: the base leaves that other out.
BESIDE = {("evaluate", "--dataset-inits"): ("--datasets", "iris")}


class WorkStarted(Exception):
    """A command reached its work: it was not refused up front."""


@pytest.fixture
def no_work(monkeypatch):
    """Every command's progress display raises :class:`WorkStarted` when its work would begin."""
    from analysis.cli import evaluate, progress, sweep, train

    def started(*args, **kwargs):
        raise WorkStarted

    for module, name in ((progress, "Stages"), (progress, "Cells"), (evaluate, "Cells"), (sweep, "Cells"),
                         (train, "TrainProgress")):
        monkeypatch.setattr(module, name, started)
    import analysis.proof.prover

    monkeypatch.setattr(analysis.proof.prover, "prove_circuit", started)


def subparser(command: str) -> argparse.ArgumentParser:
    parser = build_parser()
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[command]


def count_options(command: str) -> list[str]:
    """Every option of ``command`` that takes an integer or a list of integers."""
    return [a.option_strings[0] for a in subparser(command)._actions
            if a.option_strings and (a.type is int or getattr(a.type, "__name__", "") == "_ints")]


CASES = [(c, flag) for c in COMMANDS for flag in count_options(c) if (c, flag) not in NOT_WORK]


def test_every_count_option_is_drawn_or_declared_not_work():
    assert {(c, f) for c in COMMANDS for f in count_options(c)} >= set(NOT_WORK)
    assert ("drift", "--steps") in CASES and ("sweep", "--seeds") in CASES and ("train", "--d") in CASES


@pytest.mark.parametrize("command, flag", CASES)
def test_a_billion_of_any_count_is_refused_before_any_work(command, flag, checkpoint, tmp_path, capsys, monkeypatch,
                                                           no_work):
    """A count of a billion is refused in one line (exit 2) before any work starts, and nothing is written."""
    monkeypatch.chdir(tmp_path)
    base = base_commands(tmp_path, checkpoint)[command]
    if (command, flag) in BESIDE:
        base = with_option(base, *BESIDE[command, flag])
    argv = [command] + with_option(base, flag, str(HUGE))
    line = usage_error(capsys, argv)
    assert os.listdir(tmp_path) == [], (argv, os.listdir(tmp_path))
    assert flag.lstrip("-").split("-")[0] in line or "limit" in line or "exceeds" in line, line


#: The issue's reproductions and their neighbours: each refused with its limit named, before any work.
REFUSED = [
    (["drift", "--steps", 100000], "--steps 100000 is above its limit of 1,000"),
    (["evaluate", "--steps", 100000], "--steps 100000 is above its limit of 1,000"),
    (["sweep", "--seeds", 1000000], "--seeds 1000000 is above its limit of 1,000"),
    (["sweep", "--iterations", 100000], "--iterations 100000 is above its limit of 1,000"),
    (["train", "--d", 100000], "--d 100000 is above its limit of 1,024"),
    (["train", "--iterations", 100000], "--iterations 100000 is above its limit of 1,000"),
    (["sweep", "--full", "--grid", "tiny"], "--full is --grid full --runner structured: it cannot be combined with"
                                            " --grid tiny"),
    (["sweep", "--full", "--runner", "circuit"], "cannot be combined with --runner circuit"),
    (["prove", "--d", 128, "--k", 2], "--d 128 is above its limit of 64"),
    (["drift", "--threads", 100000], "--threads 100000 is above its limit of"),
    (["train", "--threads", 100000], "--threads 100000 is above its limit of"),
    # Budgets: several options together.
    (["drift", "--tasks", 200, "--n", 512], "--tasks x --n x --steps x shapes is 2,048,000, above its limit of 1,000,000"),
    (["evaluate", "--tasks", 5000, "--n", 512], "above its limit of 10,000,000"),
    (["evaluate", "--tasks", 2000, "--n", 512, "--steps", 1, "--datasets", "none"], "--tasks x --n is 1,024,000"),
    (["sweep", "--grid", "large", "--runner", "circuit"], "or use --runner structured"),
    (["sweep", "--grid", "tiny", "--runner", "reference", "--n", 100000000], "above its limit of 4,000,000,000"),
    (["train", "--d", 32, "--k", 10, "--iterations", 100], "--batch x --n x --iterations x width is 67,174,400"),
    (["train", "--d", 2, "--k", 2, "--val-tasks", 10000, "--eval-iterations", 100],
     "--val-tasks x --n x --eval-iterations is 512,000,000"),
    (["train", "--d", 2, "--k", 2, "--lr", "1e300"], "--lr 1e+300 is above 3.4e+37: Adam's first step"),
    (["cluster", "--dataset", "blobs", "--n", 100000000, "--k", 3], "n x (d + k) x (--iterations + 1) is 5,500,000,000"),
    # Under the at-scale threshold (50,000 points) a report keeps every layer's scores; from it on, a sample's rows.
    (["report", "--dataset", "blobs", "--n", 40000, "--k", 100, "--out", "{tmp}/r.html"],
     "n x k x (--iterations + 1) is 44,000,000"),
    (["cluster", "--dataset", "blobs", "--n", 40000, "--k", 100, "--out", "{tmp}/o"], "n x k x (--iterations + 1)"),
    (["patch", "--dataset", "blobs", "--n", 2000, "--k", 3, "--corruption", "move-point"],
     "tokens^2 x layers^2 x positions is 15,550,013,952"),
    (["patch", "--dataset", "blobs", "--n", 300, "--k", 3, "--corruption", "move-point", "--positions", "each"],
     "positions 307"),
]
#: Options a command of REFUSED needs, where the case does not give them.
NEEDS = {"drift": {"--out": "{tmp}/d.html"}, "train": {"--d": 32, "--k": 10, "--steps": 1, "--out": "{tmp}/t"}}


@pytest.mark.parametrize("argv, needle", REFUSED, ids=lambda v: " ".join(map(str, v))[:60] if isinstance(v, list) else "")
def test_the_issues_unbounded_runs_are_refused_with_their_limit(argv, needle, checkpoint, tmp_path, capsys,
                                                                 monkeypatch, no_work):
    monkeypatch.chdir(tmp_path)
    command = argv[0]
    if command in ("drift", "evaluate"):
        argv = argv + ["--checkpoint", str(checkpoint)]
    for flag, value in NEEDS.get(command, {}).items():
        if flag not in argv:
            argv = argv + [flag, value]
    argv = [str(a).format(tmp=tmp_path) for a in argv]
    usage_error(capsys, argv, needle)
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("command", COMMANDS)
def test_every_limit_and_budget_is_stated_in_help(command, capsys):
    """``--help`` states each option's ceiling and each budget of the command, with the numbers checked."""
    parser = subparser(command)
    text = " ".join(parser.format_help().split())
    for action in parser._actions:
        bound = getattr(action, "limit", None)
        if bound is not None:
            assert f"at most {bound.high:,}" in " ".join(action.help.split()), action.option_strings
            assert f"at most {bound.high:,}" in text
    for budget in getattr(parser, "budgets", ()):
        assert " ".join(budget.help().split()) in text


def test_a_budget_admits_its_limit_and_refuses_one_more():
    budget = Budget("a x b", 12, "a test")
    budget.check({"a": 3, "b": 4})
    budget.check({"cells": 2}, total=12)
    with pytest.raises(ValueError, match=r"a 13, b 1: a x b is 13, above its limit of 12 \(a test\)"):
        budget.check({"a": 13, "b": 1})


def test_threads_are_limited_to_this_machines_cpus(checkpoint, tmp_path, capsys, no_work):
    usage_error(capsys, ["evaluate", "--checkpoint", checkpoint, "--threads", cpu_count() + 1],
                f"above its limit of {cpu_count():,}")


def test_the_largest_learning_rate_allowed_reaches_the_optimiser():
    """Just below the limit the config is accepted (its first step is a float32 number, which diverges honestly at
    run time); at the limit's next float it is refused, by the library too."""
    import numpy as np

    from circuits.training.loop import TrainConfig
    from circuits.training.schema import max_lr

    top = max_lr("float32")
    assert np.float32(top / (1 - 0.9)) < np.inf
    TrainConfig(d=2, k=2, n=4, lr=top)
    with pytest.raises(ValueError, match="Adam's first step"):
        TrainConfig(d=2, k=2, n=4, lr=float(np.nextafter(top, np.inf)))
