"""What every step of the theorem shares: the circuit's knobs as exact rationals, generic tokens, the step rows.

A step is one claim about a block under hard attention, computed on the weights; :class:`Steps` records it as an
:class:`~analysis.proof.obligation.Obligation` (component ``theorem``) that fails when the computation found a
problem or when an obligation it uses failed or was not checked.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction

from analysis.proof.exact import ModelParams
from analysis.proof.obligation import Obligation, Status
from analysis.proof.obligations.circuit import SpecOfLayer
from analysis.proof.theorem.symbolic import SymbolicTokens, rational
from circuits.blocks import ASSIGN, UPDATE


class Steps:
    """The theorem's rows, in order, checked against the obligations they use."""

    def __init__(self, obligations: dict[str, Obligation]):
        self.rows: list[Obligation] = []
        self.obligations = obligations

    def add(self, name: str, statement: str, problems: list[str], uses: tuple[str, ...] = (), detail: str = "",
            status_ok: Status = Status.PROVED) -> None:
        broken = [u for u in uses if u in self.obligations and not self.obligations[u].ok]
        missing = [u for u in uses if u not in self.obligations]
        why = list(problems)
        if broken:
            why.append("depends on failed obligation(s) " + ", ".join(broken))
        if missing:
            why.append("obligation(s) not checked: " + ", ".join(missing))
        method = "uses " + ", ".join(uses) if uses else "symbolic computation on the weights"
        text = "; ".join(why[:4]) if why else detail
        self.rows.append(Obligation(name, "theorem", statement, Status.FAILED if why else status_ok, method, [], text))


@dataclass
class TheoremContext:
    """The circuit under proof, its knobs as sympy rationals, and the layers each set of tied weights covers."""

    circuit: object
    params: ModelParams
    specs: SpecOfLayer
    steps: Steps
    tokens: SymbolicTokens = field(init=False)
    #: First layer of each group of layers sharing one kind, one set of weights and one spec -> all its layers.
    roles: dict[int, list[int]] = field(init=False)
    #: Block kind -> the first layer of each of its groups: the theorem runs once for each (layers are usually tied).
    first_layers: dict[str, list[int]] = field(init=False)

    def __post_init__(self) -> None:
        self.tokens = SymbolicTokens(self.circuit.layout)
        groups: dict[tuple[str, str, int], list[int]] = {}
        for lp in self.params.layers:
            kind = self.circuit.schedule[lp.layer]
            groups.setdefault((kind, lp.fingerprint(), id(self.specs(lp.layer))), []).append(lp.layer)
        self.roles = {layers[0]: layers for layers in groups.values()}
        self.first_layers = {kind: [layers[0] for (of_kind, _, _), layers in groups.items() if of_kind == kind]
                             for kind in (ASSIGN, UPDATE)}

    @property
    def layout(self):
        return self.circuit.layout

    @property
    def sharp(self):
        return self.circuit.sharpness

    @property
    def beta(self):
        return rational(Fraction(self.sharp.beta))

    @property
    def mask(self):
        return rational(Fraction(self.sharp.mask))

    @property
    def beta_update(self):
        return rational(Fraction(self.sharp.beta_update))

    @property
    def first_update(self) -> int:
        """The update that commits the initial centroids (``C = 0``, ``C_stage = c0`` before it)."""
        return self.circuit.schedule.index(UPDATE)

    @property
    def later_step(self) -> Fraction:
        """The step ``eta`` of the update blocks after the first (1 for Lloyd's)."""
        later = [layer for layer, kind in enumerate(self.circuit.schedule) if kind == UPDATE and layer > self.first_update]
        return self.specs(later[0]).step if later else Fraction(1)

    def tag(self, layer: int) -> str:
        """``[L<layer>]`` after a step's name when the layer's kind has several sets of weights."""
        return f"[L{layer}]" if len(self.first_layers[self.circuit.schedule[layer]]) > 1 else ""
