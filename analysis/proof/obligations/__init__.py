"""The obligations: what the weights must satisfy, stated in the named basis and checked exactly on the model.

* :mod:`~analysis.proof.obligations.circuit` lists a circuit's obligations (:func:`circuit_obligations`): the
  configuration and TransformerLens' forward pass (:mod:`~analysis.proof.obligations.architecture`), then every
  block against its spec (:mod:`~analysis.proof.obligations.block_check`), on the valid domain
  (:mod:`~analysis.proof.obligations.domain`).
* The specs are data (:mod:`~analysis.proof.obligations.specs`): Lloyd's blocks
  (:mod:`~analysis.proof.obligations.lloyd`) and the exact variants' changes to them
  (:mod:`~analysis.proof.obligations.variants`), written independently of :mod:`circuits.blocks`.
"""

from analysis.proof.obligations.circuit import SpecOfLayer, circuit_obligations

__all__ = ["SpecOfLayer", "circuit_obligations"]
