"""The one scheduler of a run (analysis.scheduler): tasks computed on a worker or when read, the same values either
way; map's results in order, each item once, on the calling thread and the workers; the at-scale policy; and a run
whose numbers do not depend on its threads."""

from __future__ import annotations

import json
import pickle
import threading
import time

import pytest

from analysis import scheduler as scheduling
from analysis.pipeline import RunOptions, run_problem
from analysis.scheduler import AT_SCALE_POINTS, Scheduler, Task
from tests.unit.test_lean_verify import corner_problem


class _Square:
    """A picklable callable that returns the square of ``x`` and names the thread it ran on."""

    def __init__(self, x, ran_on=None):
        self.x, self.ran_on = x, ran_on

    def __call__(self):
        if self.ran_on is not None:
            self.ran_on.append(threading.current_thread().name)
        return self.x * self.x


def test_a_submitted_task_is_the_lazy_value_computed_on_a_worker_and_pickles():
    ran_on: list[str] = []
    scheduler = Scheduler(threads=2)
    task = scheduler.submit(_Square(3, ran_on))
    assert task.value() == 9 and task.value() == 9
    assert ran_on and ran_on[0].startswith("kmc-worker")
    copy = pickle.loads(pickle.dumps(scheduler.submit(_Square(5))))  # waits for the worker, pickles the value
    assert copy.value() == 25
    lazy = Task(_Square(4, ran_on))
    assert pickle.loads(pickle.dumps(lazy)).value() == 16  # never run: carries its computation
    alone = Scheduler(threads=1).submit(_Square(6, ran_on))
    assert alone.value() == 36 and ran_on[-1] == threading.current_thread().name  # no worker: when read
    scheduler.close()


def test_an_error_on_a_worker_is_raised_where_the_value_is_read():
    def fails():
        raise ValueError("no bound")

    scheduler = Scheduler(threads=2)
    task = scheduler.submit(fails)
    with pytest.raises(ValueError, match="no bound"):
        task.value()
    with pytest.raises(ValueError, match="no bound"):
        scheduler.map(lambda x: fails() if x == 3 else x, range(6))
    scheduler.close()


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_map_gives_every_result_in_order_once(threads):
    seen: list[int] = []
    names: set[str] = set()

    def work(x):
        seen.append(x)
        names.add(threading.current_thread().name)
        time.sleep(0.005)  # long enough that a worker takes items too
        return x * x

    scheduler = Scheduler(threads=threads)
    busy = scheduler.submit(_Square(2)) if threads > 1 else None  # a worker busy first: the caller goes on
    assert scheduler.map(work, range(40)) == [x * x for x in range(40)]
    assert sorted(seen) == list(range(40))
    assert (len(names) == 1) == (threads == 1)
    if busy is not None:
        assert busy.value() == 4
    scheduler.close()


def test_the_policy_is_one_threshold():
    assert not Scheduler.for_points(AT_SCALE_POINTS - 1).at_scale
    assert Scheduler.for_points(AT_SCALE_POINTS).at_scale
    assert Scheduler.for_points(10).threads == 1
    assert Scheduler.for_points(AT_SCALE_POINTS).threads == min(2, scheduling.usable_cpus())
    assert Scheduler.for_points(10, threads=3).threads == 3
    with pytest.raises(ValueError, match="at least 1"):
        Scheduler(threads=0)


@pytest.mark.parametrize("variant", ["lloyd", "trimmed", "soft"])
def test_a_runs_numbers_do_not_depend_on_its_threads(monkeypatch, variant):
    """At scale (the threshold lowered to this problem) with one thread and with three: the same report, bit for
    bit; with three, the bound and the step checks ran on workers."""
    X, C0 = corner_problem(n=60)
    monkeypatch.setattr(scheduling, "AT_SCALE_POINTS", len(X))
    names: set[str] = set()
    submit = Scheduler.submit

    def watched(self, compute):
        def named():
            names.add(threading.current_thread().name)
            return compute()
        return submit(self, named)

    monkeypatch.setattr(Scheduler, "submit", watched)
    alone = run_problem(X, C0, 3, variant=variant, options=RunOptions(path="structured", lean=None, threads=1))
    assert alone.capture.lean and names == {threading.current_thread().name}  # the bound, when read
    names.clear()
    spread = run_problem(X, C0, 3, variant=variant, options=RunOptions(path="structured", lean=None, threads=3))
    assert spread.capture.lean and any(name.startswith("kmc-worker") for name in names)
    assert json.dumps(alone.report.to_dict(), sort_keys=True, default=str) == json.dumps(
        spread.report.to_dict(), sort_keys=True, default=str)
    assert json.dumps(alone.to_json(), sort_keys=True) == json.dumps(spread.to_json(), sort_keys=True)
