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
from analysis.verify.checks import by_distance, make_reference, tie_window_at
from analysis.verify.procedure import sharpness_deferred
from analysis.verify.trajectory_rows import fused_assignment, reference_near
from circuits.reference import Reference


class ReferenceRun:
    """``make_reference`` and ``Reference.run`` of problem ``b`` in a background thread, started at once."""

    def __init__(self, circuit, encoded, b: int = 0):
        self.circuit, self.encoded, self.b = circuit, encoded, b
        self._value, self._error = None, None
        #: ``tie_window_at`` of each of the reference's iterates (distance costs; else ``None``).
        self.tie_windows: list[float] | None = None
        #: The trajectory check's near rows at each iterate (:func:`analysis.verify.trajectory_rows.reference_near`;
        #: distance costs, else ``None``).
        self.trajectory_near: list | None = None
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
            X = self.encoded.X[self.b]
            windows, near = {}, {}

            def labels_at(t: int, C: np.ndarray) -> np.ndarray | None:
                # At each iterate, from the distances the assignment reads: the tie window and the trajectory
                # check's near rows, functions of the run alone (block by block where fused_assignment applies;
                # else while the distances are the memo's latest).
                fused = fused_assignment(ref, X, C, t) if type(ref)._assigned_labels is Reference._assigned_labels \
                    else None
                if fused is not None:
                    labels, window, near[t] = fused
                    windows[t] = window if window is not None else tie_window_at(C, X, ref.tie_window)
                    return labels
                labels = ref._assigned_labels(X, C, t)
                if labels is not None:
                    windows[t] = tie_window_at(C, X, ref.tie_window)
                    near[t] = reference_near(ref, X, C, t, labels)
                return labels

            distance = ref.hard and by_distance(self.circuit)
            trace = ref.run(X, self.encoded.C0[self.b], self.circuit.iterations, labels_at if distance else None)
            if distance:
                T = len(trace.centroids)
                self.tie_windows = [windows[t] if t in windows else tie_window_at(trace.centroids[t], X,
                                                                                  ref.tie_window)
                                    for t in range(T)]
                self.trajectory_near = [near.get(t) for t in range(T)]
            self._value = ref, trace
        except BaseException as exc:  # raised again by result(), in the verifying thread
            self._error = exc
            return
        if self.bound is not None:
            self.bound.start()

    def result(self, cap, b: int):
        """``(reference, trace)`` once the thread is done, for ``cap``'s problem ``b`` (which must be the one it
        ran: the same circuit, points and initial centroids); raises what the run raised."""
        if cap.circuit is not self.circuit or b != self.b or cap.encoded.X is not self.encoded.X or (
                cap.encoded.C0 is not self.encoded.C0):
            raise ValueError("the prefetched reference run is of another problem")
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._value
