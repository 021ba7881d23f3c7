"""Limits on the work and memory an option can ask for: declared with the option, stated in ``--help``, checked
before any work.

Two kinds, one mechanism for every command:

* :func:`limit` puts a ceiling on one option (iterations, tasks, seeds, threads): its ``--help`` says "at most N",
  and :func:`check_limits`, which :func:`analysis.cli.main.main` runs for every command before the command
  starts, refuses a value above it in one line that names the limit and why it is there (exit code 2).
* A :class:`Budget` bounds work that grows with several options together (tasks x points x steps): the command
  declares it with :func:`add_budgets` (its ``--help`` lists it after the options) and checks it with
  :meth:`Budget.check` once the factors are known (a checkpoint's default ``n``, a grid's cells), still before any
  work.

Each limit is set so that a run at it, the other options at their defaults, takes minutes and a few GB on the
2-core machine the project is measured on (docs/cli.md, "Limits", gives the measurements); a typo of a few
zeros (``--steps 100000``) is refused at once instead of running for days or exhausting memory.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Iterable
from dataclasses import dataclass

from analysis.errors import ProblemError
from analysis.scheduler import usable_cpus


@dataclass(frozen=True)
class Limit:
    """The largest value an option takes (each value, for a comma-separated list), and why."""

    high: int
    why: str


def limit(action: argparse.Action, high: int, why: str) -> argparse.Action:
    """Give the option ``action`` (as ``add_argument`` returned it) the ceiling ``high``, stated in its help."""
    action.limit = Limit(high, why)
    each = "each " if action.type is not int else ""
    action.help = f"{action.help or ''}; {each}at most {amount(high)}".lstrip("; ")
    return action


def limit_threads(action: argparse.Action) -> argparse.Action:
    """``--threads``: at most this machine's CPUs (``torch.set_num_threads(100000)`` ends in a segmentation fault)."""
    return limit(action, usable_cpus(), "the CPUs this machine gives this process; more threads only wait on each"
                 " other")


def amount(x: float) -> str:
    """A count as people read it (1,000,000), or a large or fractional amount in three digits."""
    return f"{int(x):,}" if float(x).is_integer() and abs(x) < 1e15 else f"{x:.3g}"


def _values(value) -> Iterable:
    return value if isinstance(value, (tuple, list)) else (value,)


def check_limits(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refuse any option of the command ``parser`` whose value is above its :func:`limit`."""
    for action in parser._actions:
        bound = getattr(action, "limit", None)
        value = getattr(args, action.dest, None)
        if bound is None or value is None:
            continue
        for v in _values(value):
            if isinstance(v, (int, float)) and v > bound.high:
                raise ProblemError(f"{action.option_strings[0]} {v} is above its limit of {amount(bound.high)}:"
                                   f" {bound.why}")


@dataclass(frozen=True)
class Budget:
    """At most ``high`` units of work (``unit``), the product of several factors; ``why`` says what the limit keeps
    a run within (measured, docs/cli.md)."""

    factors: str
    high: float
    why: str
    #: What the factors are, for ``--help`` only (the error names each factor with its value).
    detail: str = ""

    def help(self) -> str:
        detail = f"; {self.detail}" if self.detail else ""
        return f"{self.factors} at most {amount(self.high)} ({self.why}{detail})"

    def check(self, factors: dict[str, float], total: float | None = None, instead: str = "") -> None:
        """Refuse the run when the product of ``factors`` (``{"--tasks": 320, ...}``, named as the user gave
        them) or ``total`` (a sum of such products, e.g. over a grid's cells) is above the budget; ``instead``: what
        else the user may do, after "lower one of them"."""
        work = math.prod(factors.values()) if total is None else total
        if work > self.high:
            given = ", ".join(f"{name} {value}" for name, value in factors.items())
            raise ProblemError(f"{given}: {self.factors} is {amount(work)}, above its limit of {amount(self.high)}"
                               f" ({self.why}); lower one of them{instead}")


def add_budgets(parser: argparse.ArgumentParser, *budgets: Budget) -> None:
    """State ``budgets`` in the command's ``--help``, after its options."""
    parser.budgets = getattr(parser, "budgets", ()) + budgets
    parser.epilog = "limits on work: " + "; ".join(b.help() for b in parser.budgets)
