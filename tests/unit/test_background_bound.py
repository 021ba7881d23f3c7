"""The sharpness bound evaluated in a background thread (analysis.verify.report.Deferred.start; large runs): the
same value and report as evaluated on first read, picklable while running, and an error raised where it is read."""

from __future__ import annotations

import json
import pickle

import pytest

from analysis.pipeline import RunOptions, run_problem
from analysis.verify import procedure
from analysis.verify.report import Deferred
from tests.unit.test_lean_verify import corner_problem


def test_a_started_value_is_the_lazy_value_and_pickles():
    started = Deferred(lambda: 7).start()
    assert started.value() == 7 and started.value() == 7
    running = Deferred(_Square(3)).start()
    copy = pickle.loads(pickle.dumps(running))  # waits for the thread, then pickles the value
    assert copy.value() == 9 and running.value() == 9
    assert pickle.loads(pickle.dumps(Deferred(_Square(4)))).value() == 16  # never started: carries compute


class _Square:
    """A picklable callable that returns the square of ``x``."""

    def __init__(self, x):
        self.x = x

    def __call__(self):
        return self.x * self.x


def test_an_error_in_the_thread_is_raised_by_the_read():
    calls = []

    def fails():
        calls.append(1)
        raise ValueError("no bound")

    deferred = Deferred(fails).start()
    with pytest.raises(ValueError, match="no bound"):
        deferred.value()
    assert len(calls) == 2  # the thread's attempt, then the read's own


@pytest.mark.parametrize("variant", ["lloyd", "trimmed"])
def test_background_bound_gives_the_same_report(monkeypatch, variant):
    X, C0 = corner_problem(n=60)
    lazy = run_problem(X, C0, 3, variant=variant, options=RunOptions(path="structured"))
    monkeypatch.setattr(procedure, "BACKGROUND_BOUND_MIN_POINTS", 1)
    threads = []
    original = Deferred.start

    def spy(self):
        threads.append(self)
        return original(self)

    monkeypatch.setattr(Deferred, "start", spy)
    background = run_problem(X, C0, 3, variant=variant, options=RunOptions(path="structured"))
    assert threads  # the bound was started in the background
    assert json.dumps(background.report.to_dict(), sort_keys=True, default=str) == json.dumps(
        lazy.report.to_dict(), sort_keys=True, default=str)
