"""The distance memo and the kept windows shared by threads (the prefetched reference run; the step checks two at a
time, analysis.verify.steps): evictions from several threads at once neither raise nor hand out other values."""

from __future__ import annotations

import contextvars
import sys
import threading

import numpy as np
import pytest

from analysis.verify import checks
from circuits import memo
from circuits.reference import memoised_distances, sq_distances

pytestmark = pytest.mark.fast


def _hammer(work, threads: int = 8) -> list[BaseException]:
    """``work(i)`` in ``threads`` threads at once, with the interpreter switching threads as often as it can."""
    errors: list[BaseException] = []
    context = contextvars.copy_context()

    def run(i: int) -> None:
        try:
            work(i)
        except BaseException as exc:  # noqa: BLE001 (reported by the test)
            errors.append(exc)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        pool = [threading.Thread(target=context.copy().run, args=(run, i)) for i in range(threads)]
        for t in pool:
            t.start()
        for t in pool:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    return errors


def test_threads_evicting_distances_get_their_own_values(monkeypatch):
    """A budget of one matrix (every keep evicts), eight threads: each one's distances are sq_distances' own.
    (Before the memo took a lock, this raised KeyError in keep_distances.)"""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(64, 3))
    centroid_sets = [rng.normal(size=(4, 3)) for _ in range(6)]
    expected = [sq_distances(X, C) for C in centroid_sets]
    monkeypatch.setattr(memo, "MEMO_BYTES", 0)
    monkeypatch.setattr(memo, "DISTANCES_KEPT", 1)
    with memoised_distances():
        def work(i: int) -> None:
            for step in range(1200):
                j = (i + step) % len(centroid_sets)
                assert np.array_equal(sq_distances(X, centroid_sets[j]), expected[j])

        assert _hammer(work) == []


def test_threads_evicting_kept_windows_get_their_own_values():
    """checks._kept with room for two windows, eight threads asking for six: each gets its own window's values.
    (Before _kept took a lock, this raised "dictionary changed size during iteration".)"""
    seen: dict = {}
    windows = [np.full((300_000,), float(j)) for j in range(6)]  # large: _kept keeps DISTANCES_KEPT of them
    keys = [np.array([[float(j)]]) for j in range(6)]

    def work(i: int) -> None:
        for step in range(1200):
            j = (i + step) % 6
            got = checks._kept(seen, keys[j], (), lambda: windows[j].copy())
            assert got[0] == j and got[-1] == j

    assert _hammer(work) == []
    assert len(seen) <= memo.DISTANCES_KEPT
