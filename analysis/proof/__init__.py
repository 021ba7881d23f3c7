"""An executable proof that the circuit is exact: obligations on the weights, the theorem, the sharpness bound.

* :mod:`analysis.proof.obligations` (a package) lists what the weights must satisfy (specs in the named basis) and
  checks it exactly on the ``HookedTransformer``'s own state dict (:mod:`~analysis.proof.exact`; rational
  arithmetic, region by region for the MLPs, :mod:`~analysis.proof.algebra`).
* :mod:`analysis.proof.theorem` (a package) composes the proven pieces under hard attention into one Lloyd iteration
  per (update, assign) pair, executing each step symbolically on the weights, and runs the hardmax circuit against
  exact Lloyd's as evidence.
* :mod:`analysis.proof.bound` bounds, for a concrete problem, how far the finite-sharpness softmax is from hardmax
  and what that does to assignments and centroids; the verification report shows it next to the observed error.
* :mod:`analysis.proof.prover` runs it all per variant (``kmeans-circuits prove``; each exact variant's proof is
  :mod:`analysis.proof.variant_proofs`) and :mod:`analysis.proof.report` reports it, one
  :class:`~analysis.proof.obligation.Obligation` per checked statement; which variants have an obligation set or a
  bound is :mod:`analysis.proof.registry`.

Entry point: ``prove_circuit(circuit) -> ProofReport``.
"""

from analysis.proof.prover import OBLIGATION_SETS, ProofReport, prove_circuit

__all__ = ["OBLIGATION_SETS", "ProofReport", "prove_circuit"]
