"""Run every obligation of a circuit's variant on its actual weights, then the hard-attention theorem.

:func:`prove_circuit` is the entry point: it reads the ``HookedTransformer``'s state dict, checks the obligations of
the circuit's variant layer by layer (layers with bit-identical parameters share one check, which is sound: the
same numbers satisfy the same statements), and executes the theorem on top of them. The result is a
:class:`ProofReport` whose ``ok`` is the one-bit verdict and whose rows say what was proven, how, and where it
failed.

Obligation sets are per variant (:data:`OBLIGATION_SETS`): exact variants map to a function producing their
obligations; approximate variants map to a sentence saying why no exactness obligation applies.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from analysis.proof.obligations import (
    ARCHITECTURE_STATEMENT, CHECKED, FAILED, NOT_APPLICABLE, PROVED, SEMANTICS_STATEMENT, UNEMBED_STATEMENT, BlockSpec,
    Obligation, block_statements, check_architecture, check_block, check_semantics, check_unembed, lloyd_assign_spec,
    lloyd_update_spec,
)


@dataclass
class ProofReport:
    """Obligations and theorem steps for one circuit."""

    variant: str
    d: int
    k: int
    n_layers: int
    schedule: list[str]
    sharpness: dict[str, float]
    obligations: list[Obligation]
    theorem: list[Obligation] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(o.ok for o in self.obligations + self.theorem)

    @property
    def failed(self) -> list[Obligation]:
        return [o for o in self.obligations + self.theorem if not o.ok]

    def get(self, name: str) -> Obligation:
        for o in self.obligations + self.theorem:
            if o.name == name:
                return o
        raise KeyError(name)

    def to_dict(self) -> dict:
        return {
            "variant": self.variant, "d": self.d, "k": self.k, "n_layers": self.n_layers, "schedule": self.schedule,
            "sharpness": self.sharpness, "ok": self.ok,
            "obligations": [o.to_dict() for o in self.obligations],
            "theorem": [o.to_dict() for o in self.theorem],
            "notes": self.notes,
        }

    def render(self, width: int = 110) -> str:
        """The text the command line prints: one line per obligation, then the theorem."""
        import textwrap

        kinds = "".join("U" if s == "update" else "A" if s == "assign" else "?" for s in self.schedule)
        knobs = ", ".join(f"{k}={v:g}" for k, v in self.sharpness.items())
        if all(o.status == NOT_APPLICABLE for o in self.obligations + self.theorem):
            reasons = "; ".join(o.statement for o in self.obligations)
            return f"variant {self.variant}: d={self.d}, k={self.k}\nNOT APPLICABLE: {reasons}"
        lines = [f"variant {self.variant}: d={self.d}, k={self.k}, {self.n_layers} layers ({kinds}); {knobs}", ""]
        name_w = max(len(o.name) for o in self.obligations + self.theorem) if self.obligations else 20

        def block(title: str, rows: list[Obligation]) -> None:
            if not rows:
                return
            lines.append(title)
            for o in rows:
                where = f" [layers {_ranges(o.layers)}]" if o.layers else ""
                lines.append(f"  {o.status:<8} {o.name:<{name_w}}{where}")
                for part in textwrap.wrap(o.statement, width=width - 13):
                    lines.append(f"{'':13}{part}")
                if o.detail:
                    for d in o.detail.split("\n"):
                        lines.extend(f"{'':13}{part}" for part in textwrap.wrap(d, width=width - 13,
                                                                                    subsequent_indent="  "))
            lines.append("")

        block("Obligations (exact, on the model's state dict):", self.obligations)
        block("Hard-attention theorem (composed from the obligations):", self.theorem)
        lines.extend(f"note: {n}" for n in self.notes)
        n_fail = len(self.failed)
        proved = sum(o.status == PROVED for o in self.obligations + self.theorem)
        checked = sum(o.status == CHECKED for o in self.obligations + self.theorem)
        verdict = "ALL OBLIGATIONS PROVED" if not n_fail else f"{n_fail} FAILED"
        lines.append(f"{verdict}: {proved} proved, {checked} checked numerically, {n_fail} failed")
        return "\n".join(lines)


def _ranges(layers: list[int]) -> str:
    layers = sorted(layers)
    if len(layers) > 2 and layers == list(range(layers[0], layers[-1] + 1)):
        return f"{layers[0]}-{layers[-1]}"
    return ",".join(map(str, layers))


def _merge(name: str, component: str, statement: str, method: str, per_layer: list[tuple[int, list[str]]]) -> Obligation:
    failing = [(layer, problems) for layer, problems in per_layer if problems]
    detail = ""
    if failing:
        layer, problems = failing[0]
        others = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
        bad_layers = ",".join(str(layer) for layer, _ in failing)
        detail = f"layer {bad_layers}: " + "; ".join(problems[:3]) + others
    return Obligation(name, component, statement, FAILED if failing else PROVED, method,
                      [layer for layer, _ in per_layer], detail)


def block_obligations(circuit, params, specs: dict[str, BlockSpec]) -> list[Obligation]:
    """Check each layer against the spec of its kind; one :class:`Obligation` per statement, merged over layers."""
    cache: dict[tuple[str, str], dict[str, tuple[str, list[str]]]] = {}
    results: dict[str, list[tuple[int, list[str]]]] = {}
    methods: dict[str, str] = {}
    for lp in params.layers:
        kind = circuit.schedule[lp.layer]
        if kind not in specs:
            results.setdefault(f"model.layer_kinds", []).append((lp.layer, [f"layer {lp.layer} has unknown kind {kind!r}"]))
            continue
        key = (kind, lp.fingerprint())
        if key not in cache:
            cache[key] = check_block(circuit.layout, lp, specs[kind])
        for name, (method, problems) in cache[key].items():
            results.setdefault(name, []).append((lp.layer, problems))
            methods[name] = method
    out = []
    for kind, spec in specs.items():
        for name, component, statement in block_statements(spec):
            if name in results:
                out.append(_merge(name, component, statement, methods[name], results[name]))
    return out


def lloyd_obligations(circuit) -> tuple[list[Obligation], object]:
    """All obligations of the exact Lloyd circuit, and the parameters they were checked on."""
    from analysis.proof.exact import read_params
    from circuits.blocks import ASSIGN, UPDATE, lloyd_schedule

    params = read_params(circuit.model)
    layout, sharp = circuit.layout, circuit.sharpness
    obligations = [
        Obligation("model.architecture", "architecture", ARCHITECTURE_STATEMENT,
                   FAILED if (p := check_architecture(circuit.model.cfg)) else PROVED, "configuration fields, exact",
                   detail="; ".join(p)),
    ]
    sem = check_semantics(circuit.model, params)
    obligations.append(Obligation("model.semantics", "architecture", SEMANTICS_STATEMENT,
                                  FAILED if sem else CHECKED, "float comparison of hooked activations",
                                  detail="; ".join(sem)))
    expected = lloyd_schedule(circuit.iterations)
    obligations.append(Obligation(
        "model.schedule", "architecture",
        "The layers run U, A, U, A, ..., U, A (2T + 2 blocks): the first update commits the initial centroids, each"
        " following (U, A) pair is one Lloyd iteration, the last A assigns the points to the final centroids.",
        PROVED if list(circuit.schedule) == expected and len(params.layers) == len(expected) else FAILED,
        "layer kinds of the circuit",
        detail="" if list(circuit.schedule) == expected else f"schedule {circuit.schedule}, intended {expected}",
    ))
    specs = {ASSIGN: lloyd_assign_spec(layout, sharp), UPDATE: lloyd_update_spec(layout, sharp)}
    obligations += block_obligations(circuit, params, specs)
    unembed = check_unembed(layout, params)
    obligations.append(Obligation("unembed.reads_y", "unembed", UNEMBED_STATEMENT, FAILED if unembed else PROVED,
                                  "exact rational entries of (W_U; b_U)", detail="; ".join(unembed[:3])))
    return obligations, params


def prove_lloyd(circuit, examples: int = 1) -> ProofReport:
    from analysis.proof.theorem import lloyd_theorem

    obligations, params = lloyd_obligations(circuit)
    report = ProofReport(circuit.variant, circuit.layout.d, circuit.layout.k, len(circuit.schedule),
                         list(circuit.schedule), circuit.sharpness.to_dict(), obligations)
    report.theorem = lloyd_theorem(circuit, params, {o.name: o for o in obligations}, examples=examples)
    return report


#: Variant name -> prover (a function of the built circuit), or a sentence saying why no exactness obligation applies.
OBLIGATION_SETS: dict[str, Callable | str] = {
    "lloyd": prove_lloyd,
}


def register(name: str, prover: Callable | str) -> None:
    """Add the obligations of a variant (or the reason it has none)."""
    OBLIGATION_SETS[name] = prover


def not_applicable(variant: str, d: int, k: int, reason: str | None) -> ProofReport:
    """The report of a variant without exactness obligations: one N/A row saying why."""
    reason = reason or f"no obligation set is registered for variant {variant!r}"
    return ProofReport(variant, d, k, 0, [], {}, [Obligation(f"{variant}.exactness", "variant", reason,
                                                           NOT_APPLICABLE, "none")])


def prove_circuit(circuit, examples: int = 1) -> ProofReport:
    """Prove ``circuit`` against the obligations of its variant."""
    prover = OBLIGATION_SETS.get(circuit.variant)
    if prover is None or isinstance(prover, str):
        return not_applicable(circuit.variant, circuit.layout.d, circuit.layout.k, prover)
    return prover(circuit, examples=examples)
