"""The proof of each exact variant: which spec every layer must satisfy, then obligations and theorem.

A prover is a function of the built circuit returning a :class:`~analysis.proof.report.ProofReport`; the registry
(:mod:`analysis.proof.registry`) maps variant names to them.
"""

from __future__ import annotations

from analysis.proof.obligations.lloyd import lloyd_assign_spec, lloyd_update_spec
from analysis.proof.obligations import SpecOfLayer, circuit_obligations
from analysis.proof.report import ProofReport
from analysis.proof.theorem import lloyd_theorem
from analysis.proof.obligations.variants import damped_update_spec, trimmed_specs
from circuits.blocks import ASSIGN


def lloyd_specs(circuit) -> SpecOfLayer:
    """The spec of each layer of Lloyd's circuit: one assign and one update spec (weights are tied)."""
    assign, update = lloyd_assign_spec(circuit.layout, circuit.sharpness), lloyd_update_spec(circuit.layout, circuit.sharpness)
    return lambda layer: assign if circuit.schedule[layer] == ASSIGN else update


def damped_specs(circuit) -> SpecOfLayer:
    """Damped Lloyd: Lloyd's blocks, except that updates after the first move C a fraction eta of the way."""
    layout, sharp = circuit.layout, circuit.sharpness
    assign, commit = lloyd_assign_spec(layout, sharp), lloyd_update_spec(layout, sharp)
    damped = damped_update_spec(layout, sharp, circuit.params["eta"])
    return lambda layer: assign if circuit.schedule[layer] == ASSIGN else commit if layer == 0 else damped


def trimmed_spec_of(circuit) -> SpecOfLayer:
    """Trimmed k-means: every assign layer has the sink's spec, every update layer keeps ``NX``."""
    assign, update = trimmed_specs(circuit.layout, circuit.sharpness, circuit.params["radius"])
    return lambda layer: assign if circuit.schedule[layer] == ASSIGN else update


def prove_lloyd(circuit, examples: int = 1, specs: SpecOfLayer | None = None,
                config: dict[str, object] | None = None) -> ProofReport:
    """Obligations of ``circuit`` against ``specs`` (default: Lloyd's), then the theorem composed from them."""
    specs = specs or lloyd_specs(circuit)
    obligations, params = circuit_obligations(circuit, specs, config)
    report = ProofReport(circuit.variant, circuit.layout.d, circuit.layout.k, len(circuit.schedule),
                         list(circuit.schedule), {**circuit.sharpness.to_dict(), **circuit.params}, obligations)
    report.theorem = lloyd_theorem(circuit, params, {o.name: o for o in obligations}, specs, examples=examples)
    return report


def prove_damped(circuit, examples: int = 1) -> ProofReport:
    return prove_lloyd(circuit, examples, damped_specs(circuit))


def prove_trimmed(circuit, examples: int = 1) -> ProofReport:
    return prove_lloyd(circuit, examples, trimmed_spec_of(circuit), config={"use_attention_sinks": True})
