"""The circuit as TransformerLens-hooked torch modules of our own: the model TransformerLens 4.x runs.

TransformerLens 4.0 removed ``HookedTransformer`` but kept ``HookedRootModule`` and ``HookPoint``, "the supported way
to hook arbitrary nn.Modules". :class:`~circuits.hooked.model.HookedCircuit` is a ``HookedRootModule`` holding the
circuit's architecture (bidirectional attention, no normalisation, gated ReLU MLP, one head) in small components,
one per file (:mod:`~circuits.hooked.attention`, :mod:`~circuits.hooked.mlp`, :mod:`~circuits.hooked.block`,
:mod:`~circuits.hooked.unembed`, :mod:`~circuits.hooked.norm`), with the hook names, cache keys, state-dict keys and
methods a ``HookedTransformer`` of that architecture has, and the same float arithmetic operation for operation, so
that both give the same numbers bit for bit (``tests/unit/test_hooked_circuit.py`` compares them on TransformerLens
3.x, where both exist).

On TransformerLens 3.x the circuit stays a ``HookedTransformer`` (:class:`circuits.model.CircuitTransformer`); on 4.x
``CircuitTransformer`` is :class:`HookedCircuit`. :mod:`circuits.tl` decides which.
"""

from __future__ import annotations
