"""One checked statement about the weights, and the closed set of verdicts it can carry.

Every row the prover prints (obligations on the state dict, steps of the theorem, a variant's missing obligation
set) is an :class:`Obligation` with a :class:`Status`; ``--json`` and the text output spell the status as its value.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import StrEnum


class Status(StrEnum):
    """Verdict of one row; the value is what the text and the JSON print."""

    PROVED = "PROVED"
    #: Numeric evidence, not a proof (said so wherever it is printed).
    CHECKED = "CHECKED"
    FAILED = "FAILED"
    #: A variant that is soft by design: there is no hardmax theorem to prove.
    NOT_APPLICABLE = "N/A"
    #: A variant claimed exact that no obligation set covers (fails: exactness needs a certificate).
    NOT_PROVEN = "NOT PROVEN"

    @property
    def holds(self) -> bool:
        return self in (Status.PROVED, Status.CHECKED, Status.NOT_APPLICABLE)


@dataclass
class Obligation:
    """One checked statement about the weights."""

    name: str
    component: str
    statement: str
    status: Status
    method: str
    layers: list[int] = field(default_factory=list)
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.status.holds

    def to_dict(self) -> dict:
        return asdict(self) | {"status": self.status.value}


def verdict(problems: list, passed: Status = Status.PROVED) -> Status:
    """``FAILED`` when there is a problem (any entry: a message, or a failing layer with its messages), else
    ``passed``."""
    return Status.FAILED if problems else passed
