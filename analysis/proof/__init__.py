"""An executable proof that the circuit is exact: obligations on the weights, the theorem, the sharpness bound.

* :mod:`analysis.proof.obligations` states what every block must satisfy in the named basis and checks it exactly
  (rational arithmetic; region by region for the MLPs, :mod:`analysis.proof.algebra`) on the ``HookedTransformer``'s
  own state dict (:mod:`analysis.proof.exact`).
* :mod:`analysis.proof.theorem` composes the proven pieces under hard attention into one Lloyd iteration per
  (update, assign) pair, executing each step symbolically on the weights.
* :mod:`analysis.proof.bound` bounds, for a concrete problem, how far the finite-sharpness softmax is from hardmax
  and what that does to assignments and centroids; the verification report shows it next to the observed error.
* :mod:`analysis.proof.prover` runs it all per variant (``kmeans-circuits prove``).

Entry point: ``prove_circuit(circuit) -> ProofReport``.
"""

from analysis.proof.prover import OBLIGATION_SETS, ProofReport, prove_circuit

__all__ = ["OBLIGATION_SETS", "ProofReport", "prove_circuit"]
