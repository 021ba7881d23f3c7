"""What ``kmeans-circuits prove`` reports: the obligations and theorem steps of one circuit, as text or JSON."""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, field

from analysis.proof.obligation import Obligation, Status
from circuits.blocks import ASSIGN, UPDATE


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
        rows = self.obligations + self.theorem
        if self.obligations and all(o.status in (Status.NOT_APPLICABLE, Status.NOT_PROVEN) for o in self.obligations):
            # A variant without an obligation set: one sentence saying why.
            verdict = "NOT APPLICABLE" if self.ok else "NOT PROVEN"
            reasons = "; ".join(o.statement for o in self.obligations)
            return f"variant {self.variant}: d={self.d}, k={self.k}\n{verdict}: {reasons}"
        kinds = "".join({UPDATE: "U", ASSIGN: "A"}.get(s, "?") for s in self.schedule)
        knobs = ", ".join(f"{k}={v:g}" for k, v in self.sharpness.items())
        lines = [f"variant {self.variant}: d={self.d}, k={self.k}, {self.n_layers} layers ({kinds}); {knobs}", ""]
        name_w = max(len(o.name) for o in rows) if self.obligations else 20
        lines += _section("Obligations (exact, on the model's state dict):", self.obligations, name_w, width)
        lines += _section("Hard-attention theorem (composed from the obligations):", self.theorem, name_w, width)
        lines.extend(f"note: {n}" for n in self.notes)
        n_fail = len(self.failed)
        proved = sum(o.status is Status.PROVED for o in rows)
        checked = sum(o.status is Status.CHECKED for o in rows)
        verdict = "ALL OBLIGATIONS PROVED" if not n_fail else f"{n_fail} FAILED"
        lines.append(f"{verdict}: {proved} proved, {checked} checked numerically, {n_fail} failed")
        return "\n".join(lines)


def _section(title: str, rows: list[Obligation], name_w: int, width: int) -> list[str]:
    """A titled block of rows: status and name, then the statement and any detail wrapped under them."""
    if not rows:
        return []
    lines = [title]
    for o in rows:
        where = f" [layers {_ranges(o.layers)}]" if o.layers else ""
        lines.append(f"  {o.status:<8} {o.name:<{name_w}}{where}")
        lines += [f"{'':13}{part}" for part in textwrap.wrap(o.statement, width=width - 13)]
        for d in (o.detail.split("\n") if o.detail else []):
            lines += [f"{'':13}{part}" for part in textwrap.wrap(d, width=width - 13, subsequent_indent="  ")]
    return lines + [""]


def _ranges(layers: list[int]) -> str:
    layers = sorted(layers)
    if len(layers) > 2 and layers == list(range(layers[0], layers[-1] + 1)):
        return f"{layers[0]}-{layers[-1]}"
    return ",".join(map(str, layers))
