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
    Obligation, block_statements, check_architecture, check_block, check_semantics, check_unembed, damped_update_spec,
    lloyd_assign_spec, lloyd_update_spec, trimmed_specs,
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
        if self.obligations and all(o.method == "none" for o in self.obligations):
            verdict = "NOT APPLICABLE" if self.ok else "NOT PROVEN"
            reasons = "; ".join(o.statement for o in self.obligations)
            return f"variant {self.variant}: d={self.d}, k={self.k}\n{verdict}: {reasons}"
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


def block_obligations(circuit, params, spec_of_layer: Callable[[int], BlockSpec]) -> list[Obligation]:
    """Check each layer against its spec; one :class:`Obligation` per statement, merged over the layers it covers."""
    cache: dict[tuple[int, str], dict[str, tuple[str, list[str]]]] = {}
    results: dict[str, list[tuple[int, list[str]]]] = {}
    methods: dict[str, str] = {}
    rows: dict[str, tuple[str, str]] = {}
    order: dict[str, int] = {"assign": 0, "update": 1}
    for lp in params.layers:
        spec = spec_of_layer(lp.layer)
        key = (id(spec), lp.fingerprint())
        if key not in cache:
            cache[key] = check_block(circuit.layout, lp, spec)
        for name, component, statement in block_statements(spec):
            rows.setdefault(name, (component, statement))
        for name, (method, problems) in cache[key].items():
            results.setdefault(name, []).append((lp.layer, problems))
            methods[name] = method
    names = sorted(rows, key=lambda n: (order.get(n.split(".")[0], 2), list(rows).index(n)))
    return [_merge(name, *rows[name], methods[name], results[name]) for name in names]


def lloyd_specs(circuit) -> Callable[[int], BlockSpec]:
    """The spec of each layer of Lloyd's circuit: one assign and one update spec (weights are tied)."""
    from circuits.blocks import ASSIGN

    assign, update = lloyd_assign_spec(circuit.layout, circuit.sharpness), lloyd_update_spec(circuit.layout, circuit.sharpness)
    return lambda layer: assign if circuit.schedule[layer] == ASSIGN else update


def damped_specs(circuit) -> Callable[[int], BlockSpec]:
    """Damped Lloyd: Lloyd's blocks, except that updates after the first move C a fraction eta of the way."""
    from circuits.blocks import ASSIGN

    layout, sharp = circuit.layout, circuit.sharpness
    assign, commit = lloyd_assign_spec(layout, sharp), lloyd_update_spec(layout, sharp)
    damped = damped_update_spec(layout, sharp, circuit.params["eta"])
    return lambda layer: assign if circuit.schedule[layer] == ASSIGN else commit if layer == 0 else damped


def trimmed_spec_of(circuit) -> Callable[[int], BlockSpec]:
    from circuits.blocks import ASSIGN

    assign, update = trimmed_specs(circuit.layout, circuit.sharpness, circuit.params["radius"])
    return lambda layer: assign if circuit.schedule[layer] == ASSIGN else update


def lloyd_obligations(circuit, spec_of_layer: Callable[[int], BlockSpec] | None = None,
                      config: dict[str, object] | None = None) -> tuple[list[Obligation], object]:
    """All obligations of the exact Lloyd circuit (or of a variant given its specs), and the parameters checked."""
    from analysis.proof.exact import read_params
    from circuits.blocks import lloyd_schedule

    params = read_params(circuit.model)
    layout, sharp = circuit.layout, circuit.sharpness
    obligations = [
        Obligation("model.architecture", "architecture", ARCHITECTURE_STATEMENT,
                   FAILED if (p := check_architecture(circuit.model.cfg, config)) else PROVED,
                   "configuration fields, exact",
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
    obligations += block_obligations(circuit, params, spec_of_layer or lloyd_specs(circuit))
    unembed = check_unembed(layout, params)
    obligations.append(Obligation("unembed.reads_y", "unembed", UNEMBED_STATEMENT, FAILED if unembed else PROVED,
                                  "exact rational entries of (W_U; b_U)", detail="; ".join(unembed[:3])))
    return obligations, params


def prove_lloyd(circuit, examples: int = 1, specs: Callable[[int], BlockSpec] | None = None,
                config: dict[str, object] | None = None) -> ProofReport:
    from analysis.proof.theorem import lloyd_theorem

    specs = specs or lloyd_specs(circuit)
    obligations, params = lloyd_obligations(circuit, specs, config)
    report = ProofReport(circuit.variant, circuit.layout.d, circuit.layout.k, len(circuit.schedule),
                         list(circuit.schedule), {**circuit.sharpness.to_dict(), **circuit.params}, obligations)
    report.theorem = lloyd_theorem(circuit, params, {o.name: o for o in obligations}, examples=examples, specs=specs)
    return report


def prove_damped(circuit, examples: int = 1) -> ProofReport:
    return prove_lloyd(circuit, examples, damped_specs(circuit))


def prove_trimmed(circuit, examples: int = 1) -> ProofReport:
    return prove_lloyd(circuit, examples, trimmed_spec_of(circuit), config={"use_attention_sinks": True})


@dataclass(frozen=True)
class NoObligations:
    """A variant without an obligation set: soft by design (``N/A``, no hardmax theorem to prove), or claimed exact
    but not covered by the prover (``NOT PROVEN``, which fails: exactness is a claim that needs a certificate)."""

    reason: str
    exact: bool


SOFT_BY_DESIGN = ("soft by design, so there is no hardmax theorem to prove (its attention is a finite-temperature"
               " softmax, transcendental, outside exact rational arithmetic); the circuit is held to its own reference"
               " within float64 rounding by `kmeans-circuits cluster --variant {name}`, block by block")

#: Variant name -> prover (a function of the built circuit), or why there is no obligation set.
OBLIGATION_SETS: dict[str, Callable | NoObligations] = {
    "lloyd": prove_lloyd,
    "damped": prove_damped,
    "trimmed": prove_trimmed,
    "soft": NoObligations("soft k-means: finite temperature is the algorithm; " + SOFT_BY_DESIGN.format(name="soft"), False),
    "annealed": NoObligations("deterministic annealing: soft assignments at every temperature; "
                              + SOFT_BY_DESIGN.format(name="annealed"), False),
    "sparse": NoObligations(
        "sparsemax-weighted k-means normalises its update with a Python hook on hook_attn_scores, not with weights;"
        " obligations on the state dict cannot cover it, so it is not proven here (the verifier checks its weights"
        " against the reference's sparsemax)", True),
    "spherical": NoObligations(
        "spherical k-means runs its scores through RMSNorm (use_qk_norm: q / sqrt(mean(q^2) + eps)), which is neither"
        " polynomial nor exactly a normalisation (eps); no obligation set covers it yet, so it is not proven here"
        " (the verifier checks it numerically)", True),
    "gumbel": NoObligations(
        "Gumbel k-means draws its update with a Python hook on hook_attn_scores, not with weights; obligations on the"
        " state dict cannot cover it, so it is not proven here (the verifier checks it draw for draw)", True),
}


def register(name: str, prover: Callable | NoObligations) -> None:
    """Add the obligations of a variant (or why it has none)."""
    OBLIGATION_SETS[name] = prover


NOT_PROVEN = "NOT PROVEN"


def without_obligations(variant: str, d: int, k: int, entry: NoObligations | None) -> ProofReport:
    """The report of a variant without an obligation set: one row saying why (``N/A`` or ``NOT PROVEN``)."""
    entry = entry or NoObligations(f"no obligation set is registered for variant {variant!r}", True)
    status = NOT_PROVEN if entry.exact else NOT_APPLICABLE
    return ProofReport(variant, d, k, 0, [], {}, [Obligation(f"{variant}.exactness", "variant", entry.reason, status,
                                                           "none")])


def prove_circuit(circuit, examples: int = 1) -> ProofReport:
    """Prove ``circuit`` against the obligations of its variant."""
    prover = OBLIGATION_SETS.get(circuit.variant)
    if prover is None or isinstance(prover, NoObligations):
        return without_obligations(circuit.variant, circuit.layout.d, circuit.layout.k, prover)
    return prover(circuit, examples=examples)
