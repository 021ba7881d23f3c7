"""Learned safeguarded swap: the safeguarded swap (:mod:`circuits.swap`) with one more, *trained*, candidate.

* :mod:`circuits.learned.reference`: the algorithm in numpy (each step keeps the best of Lloyd's step, the swap
  step, the learned step, Lloyd's own trajectory and the untrained safeguarded swap's own trajectory);
* :mod:`circuits.learned.checkpoint`: the trained parameters as a small JSON file, validated as untrusted input;
* :mod:`circuits.learned.train`: the derivative-free training on the general and paper task families;
* :mod:`circuits.learned.stages`, :mod:`circuits.learned.chain`, :mod:`circuits.learned.build`: the algorithm as
  transformer weights (``build_learned_circuit(d, k, steps, alphas)`` and ``LearnedCircuit.run(X, C0)``).

The trained part is a handful of numbers (one extrapolation factor per step), so it is read directly: see
``docs/training.md``. ``from circuits.learned import build_learned_circuit`` works; torch loads only then.
"""

from __future__ import annotations

_BUILD_NAMES = ("build_learned_circuit", "LearnedCircuit", "LearnedRun")


def __getattr__(name: str):
    if name in _BUILD_NAMES:
        from circuits.learned import build

        return getattr(build, name)
    raise AttributeError(f"module 'circuits.learned' has no attribute {name!r}")
