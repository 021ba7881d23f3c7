"""Finite sharpness: a proven bound on how far each softmax is from hardmax, and what that does to the answer.

:mod:`~analysis.proof.bound.sharpness` states the bound and evaluates it for one problem, layer after layer
(:func:`sharpness_bound`); :mod:`~analysis.proof.bound.assign` and :mod:`~analysis.proof.bound.update` derive and
evaluate each kind of layer's (their docstrings are the derivation, for Lloyd's circuit and the damped and trimmed
variants).
:mod:`~analysis.proof.bound.records` holds what it returns (:class:`SharpnessBound`, per layer :class:`LayerBound`,
the :class:`HardTrajectory`) and its outward-rounded arithmetic; :mod:`~analysis.proof.bound.check` bounds a
captured run (:func:`bound_for_capture`) and checks the run against it (:func:`bound_violations`).
"""

from analysis.proof.bound.check import bound_for_capture, bound_violations, observed_softmax_l1
from analysis.proof.bound.records import SLACK, TINY, U, HardTrajectory, LayerBound, SharpnessBound, format_bound
from analysis.proof.bound.sharpness import sharpness_bound, tie_breaks
from analysis.proof.bound.update import commit_error

__all__ = [
    "SLACK", "TINY", "U", "HardTrajectory", "LayerBound", "SharpnessBound", "bound_for_capture", "bound_violations",
    "commit_error", "format_bound", "observed_softmax_l1", "sharpness_bound", "tie_breaks",
]
