"""The reference's run of a problem, started in a background thread before the circuit runs.

The reference algorithm needs only the problem and the circuit's knobs, not the circuit's run, so at scale it can
run on the second core while the structured forward (one torch thread) runs on the first. It shares the caller's
distance memo (:func:`circuits.reference.memoised_distances`, entered before it starts): the distances it computes
are the ones the checks then find there. :func:`analysis.verify.verify_problem` takes its result in place of running
the reference itself; the numbers are the same either way. The proven sharpness bound is started in the background as soon as the reference is done.
"""

from __future__ import annotations

import contextvars
import threading

import numpy as np

from analysis.capture import Capture
from analysis.verify.checks import certified, make_reference
from analysis.verify.fast.certified import certified_run
from analysis.verify.procedure import sharpness_deferred


class ReferenceRun:
    """``make_reference`` and the reference's run of problem ``b`` (certified at the data's precision where it
    applies) in a background thread, started at once."""

    def __init__(self, circuit, encoded, b: int = 0):
        self.circuit, self.encoded, self.b = circuit, encoded, b
        self._value, self._error = None, None
        # make_reference and the bound's inputs read a capture's circuit and problem only: a capture of no layers
        # stands for the run. The bound (a Deferred, or None) is started in the background once the reference is done.
        self._problem = Capture(circuit, encoded, [], np.zeros((encoded.batch, encoded.n, 0)))
        self.bound = sharpness_deferred(self._problem, b)
        context = contextvars.copy_context()  # the memo (a context variable's value) is shared, not copied
        self._thread = threading.Thread(target=context.run, args=(self._run,), name="reference", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            ref = make_reference(self._problem, self.b)
            X, C0, T = self.encoded.X[self.b], self.encoded.C0[self.b], self.circuit.iterations
            run = certified_run(ref, X, C0, T) if certified(ref, self.circuit) else ref.run(X, C0, T)
            self._value = ref, run
        except BaseException as exc:  # raised again by result(), in the verifying thread
            self._error = exc
            return
        if self.bound is not None:
            self.bound.start()

    def result(self, cap, b: int):
        """``(reference, run)`` once the thread is done (``run``: a :class:`CertifiedRun` or a trace), for
        ``cap``'s problem ``b`` (which must be the one it ran: the same circuit, points and initial centroids);
        raises what the run raised."""
        if cap.circuit is not self.circuit or b != self.b or cap.encoded.X is not self.encoded.X or (
                cap.encoded.C0 is not self.encoded.C0):
            raise ValueError("the prefetched reference run is of another problem")
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._value
