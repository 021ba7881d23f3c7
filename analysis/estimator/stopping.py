"""How ``CircuitKMeans.fit`` runs one initialisation: Lloyd's circuit up to its stopping point, not beyond.

``KMeans`` stops after the first iteration ``t`` whose assignment repeats the previous one (or whose centroids moved
by at most ``tol``); the estimator reports ``n_iter_ = t`` and reads ``labels_``, ``cluster_centers_`` and
``inertia_`` there (:func:`stopping_point`). Nothing after iteration ``t`` enters the result, so running the
circuit's remaining iterations (and verifying them) only costs time.

**The rule** (:func:`run_to_stop`). Lloyd's circuit has tied weights: its schedule is ``U A U A ... U A`` and the
circuit of ``t`` iterations is exactly the first ``2 t + 2`` blocks of the circuit of ``max_iter`` iterations (the
same parameters, :func:`analysis.estimator.with_assign_knobs` derives it so), so a run of it computes, bit for bit,
the first ``2 t + 2`` layers of the long run. A cheap float64 reference (:func:`reference_stop`) guesses ``t``;
the circuit of ``t`` iterations runs and is verified layer by layer; if *the circuit's own* decoded states show a
stop at some ``t' <= t`` (:func:`first_stop`), that is the stop the long run would show too (the criterion at
``t'`` reads only layers up to ``2 t' + 1``), and the result is the long run's. Otherwise (the guess was short: the
reference and the circuit disagreed, which verification would report) the circuit of ``max_iter`` iterations
runs, as before. With ``tol=0`` the stop is a fixed point: the assignment repeated, so every later iteration
repeats the same centroids and labels exactly. Variants other than Lloyd's always run all ``max_iter``
iterations (their circuit of fewer iterations need not be a prefix).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from analysis.pipeline import RunOptions, RunResult, run_problem
from circuits import reference
from circuits.variants import get_variant


def first_stop(cap, tol: float, b: int = 0) -> int | None:
    """``n_iter_`` as ``KMeans`` counts it, from the iterations the run holds: the first iteration ``t`` after
    which the assignment repeats the previous one, or the centroids moved by at most ``tol`` (sum of squared
    shifts, in the data's units; 0 means not at all); ``None`` if neither happens within the run."""
    for t in range(1, cap.circuit.iterations + 1):
        previous = cap.assignments(t - 2)[b] if t >= 2 else None
        if stops(cap.assignments(t - 1)[b], previous, cap.centroids(t)[b], cap.centroids(t - 1)[b], tol):
            return t
    return None


def stops(labels: np.ndarray, previous: np.ndarray | None, C_next: np.ndarray, C: np.ndarray, tol: float) -> bool:
    """``KMeans``'s stop after the iteration that assigned ``labels`` (``previous``: the iteration before's, or
    ``None``) and moved the centroids from ``C`` to ``C_next``: the assignment repeated, or the sum of squared
    shifts is at most ``tol``."""
    return (previous is not None and np.array_equal(labels, previous)) or float(((C_next - C) ** 2).sum()) <= tol


def stopping_point(cap, tol: float, b: int = 0) -> int:
    """:func:`first_stop`, or the number of iterations run if the run never stops."""
    t = first_stop(cap, tol, b)
    return cap.circuit.iterations if t is None else t


def reference_stop(X: np.ndarray, C0: np.ndarray, max_iter: int, tol: float) -> int:
    """Where float64 Lloyd's from ``C0`` stops (the criterion of :func:`first_stop`), at most ``max_iter``: a
    guess of the circuit's stop, which the circuit's own run then confirms or not."""
    C, previous = np.asarray(C0, dtype=np.float64), None
    labels = reference.assign(X, C)
    for t in range(1, max_iter + 1):
        C_next = reference.update(X, labels, C)
        if stops(labels, previous, C_next, C, tol):
            return t
        C, previous = C_next, labels
        labels = reference.assign(X, C)
    return max_iter


def run_to_stop(X: np.ndarray, C0: np.ndarray, max_iter: int, tol: float, variant: str,
                circuit_for: Callable[[int], object], path: str, resolution,
                threads: int | None = None) -> tuple[RunResult, int]:
    """The verified run of ``C0`` that the fit reads, and ``n_iter_`` (the module docstring states the rule).

    ``circuit_for(iterations)`` gives the circuit of that many iterations (with the fit's knobs). The result
    equals that of running all ``max_iter`` iterations in ``labels_``, ``cluster_centers_``, ``inertia_`` and
    ``n_iter_``; the run, its capture and its report cover the iterations run (``circuit.iterations``).
    """
    options = RunOptions(path=path, threads=threads)
    if get_variant(variant).unaltered and max_iter > 1:
        guess = reference_stop(X, C0, max_iter, tol)
        if guess < max_iter:
            result = run_problem(X, C0, guess, variant, circuit=circuit_for(guess), resolution=resolution,
                                 options=options)
            t = first_stop(result.capture, tol)
            if t is not None:
                return result, t
    result = run_problem(X, C0, max_iter, variant, circuit=circuit_for(max_iter), resolution=resolution,
                         options=options)
    return result, stopping_point(result.capture, tol)
