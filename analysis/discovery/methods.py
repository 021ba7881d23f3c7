"""Discovery methods: the protocol a method follows, the built-in ones, and plug-ins named ``module:function``.

A method is a callable taking a :class:`Task` and returning a :class:`MethodOutput` (or just the scores, an
array with one number per candidate edge, higher meaning "more in the circuit"). The task holds the patcher
(:class:`~analysis.discovery.edges.EdgePatcher`: the graph's candidate edges, ``run(removed)`` for the metric of
any subgraphs, ``run(.., probe=True)`` for gradients at every port, ``source_difference(src)`` for what removing
an edge of ``src`` changes) and the options the built-ins read. It never holds the ground truth: scoring is done
afterwards (:mod:`analysis.discovery.scoring`), the same way for every method.

Built-ins (:data:`METHODS`): ``acdc`` (:mod:`~analysis.discovery.acdc`: its threshold sweep is the family of
subgraphs scored; it reports the subgraph at ``threshold``), ``eap`` and ``eap-ig``
(:mod:`~analysis.discovery.eap`). A plug-in is named on the command line as ``package.module:function`` (the
module must be importable: on ``PYTHONPATH``, or installed) and is scored like them.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np


@dataclass
class Task:
    """What a method is given: the patcher (edges, patched runs, gradients) and the run's options."""

    patcher: object
    threshold: float = 1e-3
    thresholds: tuple[float, ...] | None = None
    steps: int = 8
    group: bool = False

    @property
    def graph(self):
        return self.patcher.graph


@dataclass
class MethodOutput:
    """``scores`` ``(E,)``; optionally the family of subgraphs ``(R, E)`` to score instead of the scores'
    thresholds (a threshold sweep), the subgraph the method reports ``(E,)`` (default: the top scores, as many
    as the ground truth has), and anything worth reporting (JSON-able)."""

    scores: np.ndarray
    subgraphs: np.ndarray | None = None
    reported: np.ndarray | None = None
    threshold: float | None = None
    details: dict = field(default_factory=dict)


@runtime_checkable
class DiscoveryMethod(Protocol):
    def __call__(self, task: Task) -> MethodOutput | np.ndarray: ...


def acdc_method(task: Task) -> MethodOutput:
    from analysis.discovery.acdc import DEFAULT_THRESHOLDS, acdc

    sweep = np.unique(np.array([*(DEFAULT_THRESHOLDS if task.thresholds is None else task.thresholds),
                                task.threshold]))
    result = acdc(task.patcher, sweep, group=task.group)
    chosen = int(np.flatnonzero(result.thresholds == task.threshold)[0])
    # An edge's score: the largest threshold at which it survives (-1 if none).
    scores = np.where(result.kept, result.thresholds[:, None], -1.0).max(axis=0)
    return MethodOutput(scores, result.kept, result.kept[chosen], task.threshold,
                        {"forward_passes": result.runs, "grouped": task.group, "thresholds": result.thresholds.tolist(),
                         "metric_at_threshold": result.metric[chosen].tolist()})


def eap_method(task: Task) -> MethodOutput:
    from analysis.discovery.eap import eap

    return _attribution(eap(task.patcher), {})


def eap_ig_method(task: Task) -> MethodOutput:
    from analysis.discovery.eap import eap_ig

    return _attribution(eap_ig(task.patcher, task.steps), {"steps": task.steps})


def _attribution(raw: np.ndarray, details: dict) -> MethodOutput:
    """Attribution scores as evidence: a NaN (an undefined gradient) ranks as none, and so does a score within
    ACDC's rounding margin of 0 (the ``kl`` metric's gradient at the clean run is 0 up to the rounding of
    ``softmax``, whose noise would otherwise rank edges); both counts are reported."""
    from analysis.discovery.edges import ROUNDING

    scores = np.nan_to_num(raw, nan=0.0)
    rounding = (scores != 0) & (np.abs(scores) <= ROUNDING)
    return MethodOutput(np.where(rounding, 0.0, scores),
                        details={"nan_scores": int(np.isnan(raw).sum()), "rounding_scores": int(rounding.sum()),
                                 **details})


#: The built-in methods, by name.
METHODS: dict[str, DiscoveryMethod] = {"acdc": acdc_method, "eap": eap_method, "eap-ig": eap_ig_method}


class MethodError(ValueError):
    """A plug-in that cannot be loaded, or whose output is not a method's (one line)."""


def load_method(name: str) -> DiscoveryMethod:
    """A built-in by name, or the function ``module:function``."""
    if name in METHODS:
        return METHODS[name]
    module_name, colon, attribute = name.partition(":")
    if not colon or not module_name or not attribute:
        raise MethodError(f"unknown method {name!r}: give one of {', '.join(METHODS)} or a plug-in as module:function")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # an import error of the user's module, whatever it is, is bad input
        raise MethodError(f"method {name!r}: cannot import {module_name!r} ({type(exc).__name__}: {exc})") from None
    method = getattr(module, attribute, None)
    if not callable(method):
        raise MethodError(f"method {name!r}: {module_name!r} has no function {attribute!r}")
    return method


def run_method(method: DiscoveryMethod, task: Task, name: str) -> MethodOutput:
    """Call ``method`` and check what it returns (shapes, finite scores, boolean subgraphs)."""
    E = task.patcher.E
    out = method(task)
    if not isinstance(out, MethodOutput):
        out = MethodOutput(np.asarray(out))
    try:
        scores = np.asarray(out.scores, dtype=np.float64)
    except (TypeError, ValueError):
        raise MethodError(f"method {name!r} returned scores that are not numbers") from None
    if scores.shape != (E,) or not np.isfinite(scores).all():
        raise MethodError(f"method {name!r} must return {E} finite scores (one per candidate edge), got shape"
                          f" {scores.shape}{'' if scores.shape != (E,) else ' with non-finite values'}")
    for what in ("subgraphs", "reported"):
        value = getattr(out, what)
        if value is not None:
            value = np.asarray(value)
            ok = value.dtype == bool and value.shape[-1:] == (E,) and value.ndim == (2 if what == "subgraphs" else 1)
            if not ok:
                raise MethodError(f"method {name!r}: {what} must be boolean with {E} edges per row, got"
                                  f" {value.dtype} {value.shape}")
            setattr(out, what, value)
    out.scores = scores
    return out
