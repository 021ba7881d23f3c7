"""The reference's run of a problem, and its proven sharpness bound, started on the run's workers before the
circuit runs.

The reference algorithm needs only the problem and the circuit's knobs, not the circuit's run, so at scale it runs
on a worker (:mod:`analysis.scheduler`) while the structured forward (one torch thread) runs on the calling thread;
the bound, submitted after it, follows on the same worker. :func:`analysis.verify.verify_problem` takes their results
in place of computing them itself; the numbers are the same either way.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from analysis.capture import Capture
from analysis.scheduler import Scheduler, Task
from analysis.verify.checks import run_reference
from analysis.verify.procedure import sharpness_task


@dataclass
class Prefetched:
    """Problem ``b``'s reference run (a task of ``(reference, run)``: a :class:`CertifiedRun` or a trace) and its
    sharpness bound (a task, or ``None`` where none applies), for the circuit and encoding they were made of."""

    circuit: object
    encoded: object
    b: int
    reference: Task
    bound: Task | None

    def result(self, cap, b: int):
        """``(reference, run)`` of ``cap``'s problem ``b``, which must be the one prefetched (the same circuit, points
        and initial centroids); raises what the run raised."""
        if cap.circuit is not self.circuit or b != self.b or cap.encoded.X is not self.encoded.X or (
                cap.encoded.C0 is not self.encoded.C0):
            raise ValueError("the prefetched reference run is of another problem")
        return self.reference.value()


def prefetch(scheduler: Scheduler, circuit, encoded, b: int = 0) -> Prefetched:
    """Submit problem ``b``'s reference run, then its sharpness bound, to ``scheduler``'s workers."""
    # run_reference and the bound's inputs read a capture's circuit and problem only: a capture of no layers
    # stands for the run.
    problem = Capture(circuit, encoded, [], np.zeros((encoded.batch, encoded.n, 0)))
    reference = scheduler.submit(functools.partial(run_reference, problem, b))
    return Prefetched(circuit, encoded, b, reference, sharpness_task(problem, b, scheduler))


