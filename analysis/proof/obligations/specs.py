"""What a block must satisfy, as data: intended entries of its exact forms and intended MLP changes.

A :class:`BlockSpec` is the statement side of the proof; :mod:`analysis.proof.obligations.block_check` checks a layer's
weights against it and :mod:`analysis.proof.obligations.lloyd` / :mod:`analysis.proof.obligations.variants` write the
specs of the construction. Labels are the residual layout's coordinate labels (``X[0]``, ``N``, ...).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from collections.abc import Callable

from analysis.proof.algebra import Poly
from circuits.layout import ResidualLayout

#: Relative size of one float64 rounding (unit roundoff).
UNIT_ROUNDOFF = Fraction(1, 2**53)


@dataclass(frozen=True)
class Entry:
    """Intended value of one entry of an exact form: ``form[row, col] == value`` (``formula`` says it in knobs)."""

    row: str
    col: str
    value: Fraction
    formula: str
    rounded: bool = False


@dataclass(frozen=True)
class FormSpec:
    """An obligation on a form: its entries."""

    name: str
    statement: str
    entries: tuple[Entry, ...]


@dataclass(frozen=True)
class MLPGroup:
    """An MLP obligation: on every token of the valid domain, the change of the coordinates in ``subspaces``
    equals ``delta(layout, flags)`` (a dict label -> polynomial in the coordinate labels)."""

    name: str
    statement: str
    subspaces: tuple[str, ...]
    delta: Callable[[ResidualLayout, dict[str, int]], dict[str, Poly]]


@dataclass(frozen=True)
class MLPSpec:
    support_statement: str
    reads: tuple[str, ...]
    writes: tuple[str, ...]
    groups: tuple[MLPGroup, ...]


@dataclass(frozen=True)
class SinkSpec:
    """The attention-sink logit a head must have (``use_attention_sinks``), within a relative rounding."""

    name: str
    statement: str
    value: Fraction
    formula: str
    rel: Fraction


@dataclass(frozen=True)
class BlockSpec:
    """Everything one block kind must satisfy (``kind``: ``circuits.blocks.ASSIGN`` or ``UPDATE``)."""

    kind: str
    qk: tuple[FormSpec, ...]
    qk_zero_statement: str
    ov: tuple[FormSpec, ...]
    ov_zero_statement: str
    mlp: MLPSpec
    #: Update blocks: the fraction of the way to the staged centroid that C moves (1 for Lloyd's commit).
    step: Fraction = Fraction(1)
    #: ``None``: the head has no sink.
    sink: SinkSpec | None = None

    def statements(self) -> list[tuple[str, str, str]]:
        """(name, component, statement) of every obligation of the block, in order."""
        rows = [(s.name, "QK", s.statement) for s in self.qk]
        rows.append((f"{self.kind}.QK.zero_elsewhere", "QK", self.qk_zero_statement))
        if self.sink is not None:
            rows.append((self.sink.name, "QK", self.sink.statement))
        rows += [(s.name, "OV", s.statement) for s in self.ov]
        rows.append((f"{self.kind}.OV.zero_elsewhere", "OV", self.ov_zero_statement))
        rows.append((f"{self.kind}.MLP.support", "MLP", self.mlp.support_statement))
        rows += [(g.name, "MLP", g.statement) for g in self.mlp.groups]
        return rows


def label(layout: ResidualLayout, name: str, i: int) -> str:
    """Coordinate label of dimension ``i`` of subspace ``name`` (``N`` for a width-1 subspace, else ``X[i]``)."""
    return name if layout.width(name) == 1 else f"{name}[{i}]"


def labels(layout: ResidualLayout, name: str) -> list[str]:
    """The coordinate labels of subspace ``name``, in order."""
    return [label(layout, name, i) for i in range(layout.width(name))]


def var(layout: ResidualLayout, name: str, i: int) -> Poly:
    """Dimension ``i`` of subspace ``name`` as a polynomial variable."""
    return Poly.var(label(layout, name, i))


def identity_block(layout: ResidualLayout, rows: str, cols: str, value: Fraction, formula: str) -> tuple[Entry, ...]:
    """The whole ``rows x cols`` block: ``value`` on the diagonal, 0 off it (the block is ``value * I``)."""
    return tuple(
        Entry(label(layout, rows, i), label(layout, cols, j), value if i == j else Fraction(0), formula if i == j else "0")
        for i in range(layout.width(rows)) for j in range(layout.width(cols))
    )


def squared_norm_change(layout: ResidualLayout, source: str, target: str) -> dict[str, Poly]:
    """``{target: |source|^2 - target}``: the change that overwrites ``target`` with the squared norm of ``source``."""
    total = -Poly.var(target)
    for m in range(layout.width(source)):
        s = var(layout, source, m)
        total = total + s * s
    return {target: total}
