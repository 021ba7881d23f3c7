"""Safeguarded swap as an exact transformer: each step keeps the best of Lloyd's step, Lloyd's step after a swap,
and Lloyd's own trajectory, so its objective never rises and is never above Lloyd's.

* :mod:`circuits.swap.reference`: the algorithm in numpy (the reference the circuit is tested against);
* :mod:`circuits.swap.layout`, :mod:`circuits.swap.stages`, :mod:`circuits.swap.knobs`: the construction;
* :mod:`circuits.swap.build`: ``build_swap_circuit(d, k, steps)`` and ``SwapCircuit.run(X, C0)``.

``from circuits.swap import build_swap_circuit`` works; torch and TransformerLens load only then, so the numpy
reference stays light.
"""

from __future__ import annotations

_BUILD_NAMES = ("build_swap_circuit", "SwapCircuit", "SwapRun")


def __getattr__(name: str):
    if name in _BUILD_NAMES:
        from circuits.swap import build

        return getattr(build, name)
    raise AttributeError(f"module 'circuits.swap' has no attribute {name!r}")
