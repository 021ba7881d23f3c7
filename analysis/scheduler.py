"""How a run uses the machine's cores: one object, made at the top of a run and handed down, as scikit-learn hands
``n_threads`` to its kernels. It is the one place that starts threads, and holds the one at-scale policy.

A run at scale (:data:`AT_SCALE_POINTS` points or more) keeps only what its verification reads (a lean capture)
and puts its numpy work beside the forward, which runs on the calling thread with one torch thread: the reference's
run and then the proven sharpness bound on a worker while the circuit runs, and the step-wise checks on the
workers two blocks at a time. Below that size a run does all of it on the calling thread, in order: threads cost
more than they save there. Either way every task computes exactly what it computes alone, so the numbers do not
depend on the threads (tests/unit/test_scheduler.py).

``threads`` is the user's (``--threads``, ``CircuitKMeans(n_threads=)``): how many threads the run may use, the
caller's included; 1 runs everything on the calling thread.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

#: From this many points on, a run is at scale (module docstring).
AT_SCALE_POINTS = 50_000
#: torch's intra-op threads while the structured forward runs on the CPU. Its operations are many and short (a
#: chunk of positions, a few groups): on a loaded 2-core machine two threads waited on each other (n = 10,000,
#: d = 8, k = 10, T = 10: a forward of 7.3 s with two threads against 0.65 s with one; benchmarks/bench_device.py).
FORWARD_THREADS = 1


def usable_cpus() -> int:
    """The CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


class Task:
    """A value computed once: ``compute()``, a picklable callable, either on a worker (:meth:`Scheduler.submit`)
    or when first read. :meth:`value` waits for a worker's computation and raises what it raised; a task pickled
    before its value was read carries what computes it (a worker's value is waited for first)."""

    __slots__ = ("compute", "result", "done", "_thread_done", "_error")

    def __init__(self, compute: Callable[[], Any]):
        self.compute, self.result, self.done = compute, None, False
        self._thread_done: threading.Event | None = None
        self._error: BaseException | None = None

    def _run(self) -> None:
        try:
            self.result = self.compute()
        except BaseException as exc:  # raised again in the reading thread, by value()
            self._error = exc
        finally:
            self._thread_done.set()

    def value(self):
        if self._thread_done is not None:
            self._thread_done.wait()
            self._thread_done = None
            if self._error is not None:
                error, self._error = self._error, None
                raise error
            self.done, self.compute = True, None
        if not self.done:
            self.result, self.done = self.compute(), True
            self.compute = None  # its inputs are no longer needed
        return self.result

    def __getstate__(self) -> tuple:
        if self._thread_done is not None:  # a thread does not pickle: wait for its value instead
            self.value()
        return self.compute, self.result, self.done

    def __setstate__(self, state: tuple) -> None:
        (self.compute, self.result, self.done), self._thread_done, self._error = state, None, None


@dataclass
class Scheduler:
    """Where a run's work goes (module docstring): ``threads`` the run may use (the caller's included), whether it
    is ``at_scale``, and torch's threads for the forward."""

    threads: int = 1
    at_scale: bool = False
    forward_threads: int = FORWARD_THREADS
    _pool: ThreadPoolExecutor | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if int(self.threads) < 1:
            raise ValueError(f"threads must be at least 1, got {self.threads}")

    @classmethod
    def for_points(cls, n: int, threads: int | None = None) -> Scheduler:
        """The policy for a run of ``n`` points: at scale from :data:`AT_SCALE_POINTS` on; ``threads`` (``None``:
        two at scale where the process may use two CPUs, else one)."""
        at_scale = n >= AT_SCALE_POINTS
        if threads is None:
            threads = min(2, usable_cpus()) if at_scale else 1
        return cls(int(threads), at_scale)

    @property
    def workers(self) -> int:
        return self.threads - 1

    def _executor(self) -> ThreadPoolExecutor | None:
        if self.workers and self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="kmc-worker")
        return self._pool

    def submit(self, compute: Callable[[], Any]) -> Task:
        """A :class:`Task` of ``compute()``: started on a worker at once where the run has one (the workers take
        tasks in the order submitted), else computed when first read."""
        task = Task(compute)
        pool = self._executor()
        if pool is not None:
            task._thread_done = threading.Event()
            pool.submit(task._run)
        return task

    def map(self, fn: Callable[[Any], Any], items: Iterable) -> list:
        """``[fn(item) for item in items]``: the calling thread and the workers each take the next item until none
        is left (the results in order; a worker busy with an earlier task joins when it is free), or the calling
        thread alone where the run has no worker."""
        items = list(items)
        if not self.workers or len(items) < 2:
            return [fn(item) for item in items]
        results: list = [None] * len(items)
        order = iter(range(len(items)))
        taking = threading.Lock()  # next() of one iterator, from several threads

        def drain() -> None:
            while True:
                with taking:
                    i = next(order, None)
                if i is None:
                    return
                results[i] = fn(items[i])

        helpers = [self.submit(drain) for _ in range(min(self.workers, len(items) - 1))]
        drain()
        for helper in helpers:
            helper.value()  # raises what a worker raised
        return results

    def close(self) -> None:
        """Let the workers go once their tasks are done (a task still running, a report's bound, finishes)."""
        if self._pool is not None:
            self._pool.shutdown(wait=False)
            self._pool = None
