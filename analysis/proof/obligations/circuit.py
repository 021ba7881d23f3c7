"""The obligations of a circuit: every statement the theorem uses, checked on the model's actual weights.

``model.*`` rows check the configuration and the library's forward pass (:mod:`analysis.proof.obligations.architecture`)
and the block schedule; one row per block obligation (:mod:`analysis.proof.obligations.block_check`) is merged over the
layers it covers (layers with bit-identical parameters share one check, which is sound: the same numbers satisfy the
same statements); ``unembed.reads_y`` closes the list.
"""

from __future__ import annotations

from collections.abc import Callable

from analysis.proof.obligations.architecture import (
    ARCHITECTURE_STATEMENT, SEMANTICS_STATEMENT, check_architecture, check_semantics,
)
from analysis.proof.obligations.block_check import UNEMBED_STATEMENT, check_block, check_unembed
from analysis.proof.exact import ModelParams, read_params
from analysis.proof.obligation import Obligation, Status, verdict
from analysis.proof.obligations.specs import BlockSpec
from circuits.blocks import ASSIGN, UPDATE, lloyd_schedule

#: ``layer -> the spec its weights must satisfy``.
SpecOfLayer = Callable[[int], BlockSpec]

SCHEDULE_STATEMENT = (
    "The layers run U, A, U, A, ..., U, A (2T + 2 blocks): the first update commits the initial centroids, each"
    " following (U, A) pair is one Lloyd iteration, the last A assigns the points to the final centroids."
)


def _merge(name: str, component: str, statement: str, method: str, per_layer: list[tuple[int, list[str]]]) -> Obligation:
    """One row for an obligation checked on several layers: the first failing layer's problems, every layer listed."""
    failing = [(layer, problems) for layer, problems in per_layer if problems]
    detail = ""
    if failing:
        layer, problems = failing[0]
        others = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
        bad_layers = ",".join(str(layer) for layer, _ in failing)
        detail = f"layer {bad_layers}: " + "; ".join(problems[:3]) + others
    return Obligation(name, component, statement, verdict(failing), method, [layer for layer, _ in per_layer], detail)


def block_obligations(circuit, params: ModelParams, spec_of_layer: SpecOfLayer) -> list[Obligation]:
    """Check each layer against its spec; one :class:`Obligation` per statement, merged over the layers it covers."""
    cache: dict[tuple[int, str], dict[str, tuple[str, list[str]]]] = {}
    results: dict[str, list[tuple[int, list[str]]]] = {}
    methods: dict[str, str] = {}
    rows: dict[str, tuple[str, str]] = {}
    for lp in params.layers:
        spec = spec_of_layer(lp.layer)
        key = (id(spec), lp.fingerprint())
        if key not in cache:
            cache[key] = check_block(circuit.layout, lp, spec)
        for name, component, statement in spec.statements():
            rows.setdefault(name, (component, statement))
        for name, (method, problems) in cache[key].items():
            results.setdefault(name, []).append((lp.layer, problems))
            methods[name] = method
    # Assign obligations first, then update ones, each in the order their spec states them.
    order = {ASSIGN: 0, UPDATE: 1}
    names = sorted(rows, key=lambda n: (order.get(n.split(".")[0], 2), list(rows).index(n)))
    return [_merge(name, *rows[name], methods[name], results[name]) for name in names]


def architecture_obligations(circuit, params: ModelParams, config: dict[str, object] | None) -> list[Obligation]:
    """``model.architecture``, ``model.semantics`` and ``model.schedule``."""
    arch = check_architecture(circuit.model.cfg, config)
    sem = check_semantics(circuit.model, params)
    expected = lloyd_schedule(circuit.iterations)
    schedule_ok = list(circuit.schedule) == expected and len(params.layers) == len(expected)
    return [
        Obligation("model.architecture", "architecture", ARCHITECTURE_STATEMENT, verdict(arch),
                   "configuration fields, exact", detail="; ".join(arch)),
        Obligation("model.semantics", "architecture", SEMANTICS_STATEMENT, verdict(sem, Status.CHECKED),
                   "float comparison of hooked activations", detail="; ".join(sem)),
        Obligation("model.schedule", "architecture", SCHEDULE_STATEMENT,
                   Status.PROVED if schedule_ok else Status.FAILED, "layer kinds of the circuit",
                   detail="" if list(circuit.schedule) == expected else f"schedule {circuit.schedule}, intended {expected}"),
    ]


def circuit_obligations(circuit, spec_of_layer: SpecOfLayer,
                        config: dict[str, object] | None = None) -> tuple[list[Obligation], ModelParams]:
    """All obligations of ``circuit`` against its layers' specs, and the parameters checked."""
    params = read_params(circuit.model)
    obligations = architecture_obligations(circuit, params, config)
    obligations += block_obligations(circuit, params, spec_of_layer)
    unembed = check_unembed(circuit.layout, params)
    obligations.append(Obligation("unembed.reads_y", "unembed", UNEMBED_STATEMENT, verdict(unembed),
                                  "exact rational entries of (W_U; b_U)", detail="; ".join(unembed[:3])))
    return obligations, params
