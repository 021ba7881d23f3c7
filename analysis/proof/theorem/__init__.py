"""The hard-attention theorem: the proven obligations compose into one Lloyd iteration per (update, assign) pair.

:func:`lloyd_theorem` (:mod:`~analysis.proof.theorem.compose`, with the theorem's statement) executes each step
symbolically on the weights (:mod:`~analysis.proof.theorem.symbolic`; what every step shares is
:mod:`~analysis.proof.theorem.steps`, the block steps :mod:`~analysis.proof.theorem.assign` and
:mod:`~analysis.proof.theorem.update`), then runs the whole circuit in exact arithmetic with hardmax attention
(:mod:`~analysis.proof.theorem.hard_forward`) against exact Lloyd's (:mod:`~analysis.proof.theorem.exact_lloyd`) as
evidence (:mod:`~analysis.proof.theorem.examples`).
"""

from analysis.proof.theorem.compose import lloyd_theorem

__all__ = ["lloyd_theorem"]
