"""The general constructions' run as the commands share it (``cluster --construction``, ``cluster --checkpoint`` of a
learned checkpoint, ``report --construction``): which construction the options select, its options checked, the
run, and optionally its page."""

from __future__ import annotations

import argparse

from analysis.cli.exits import message
from analysis.cli.options import LoadedProblem, circuit_options_given
from analysis.errors import ProblemError


def selected_construction(args: argparse.Namespace):
    """The construction the options select and the checkpoint file of its factors: a trained construction's
    checkpoint that ``--checkpoint`` names (:func:`analysis.constructions.checkpoint_construction`), else
    ``--construction`` (with the shipped factors); ``(None, None)`` for neither."""
    from analysis.constructions import CONSTRUCTIONS, checkpoint_construction

    found = checkpoint_construction(getattr(args, "checkpoint", None))
    if found is not None:
        return found
    name = getattr(args, "construction", None)
    return (CONSTRUCTIONS[name], None) if name is not None else (None, None)


def construction_result(args: argparse.Namespace, problem: LoadedProblem, construction, checkpoint, command: str,
                        page: bool = False):
    """Check the options of ``cluster --construction NAME`` (or ``--checkpoint`` of a trained construction's
    checkpoint file ``checkpoint``; ``report --construction NAME``) and run ``construction`` (its declaration):
    a :class:`~analysis.constructions.common.ConstructionResult`. ``page``: also draw its report
    (:mod:`analysis.report.construction`), returned as the second element."""
    flag = f"--checkpoint {args.checkpoint}" if checkpoint is not None else f"--construction {construction.name}"
    if circuit_options_given(args):
        raise ProblemError(f"{flag} has its own knobs: --variant and the exactness knobs do not apply")
    if problem.k < 2:
        raise ProblemError(f"{flag} needs --k >= 2")
    if problem.iterations < 1:
        raise ProblemError(f"{flag} needs --iterations >= 1 (each iteration is one step)")
    if args.dtype != "float64":
        raise ProblemError(f"{flag} is exact only in float64: --dtype float32 does not apply")
    from analysis.cli.progress import Stages
    from analysis.constructions.common import SwapPathUnavailable

    try:
        factors = construction.factors(checkpoint)
    except ValueError as exc:
        raise ProblemError(f"{flag}: {exc}") from None
    with Stages(command, [f"{construction.name} circuit"] + (["report"] if page else [])) as stages:
        try:
            result = construction.run(problem.X, problem.C0, problem.iterations, args.path, factors)
        except (SwapPathUnavailable, ProblemError) as exc:
            raise ProblemError(f"{flag}: {message(exc)}") from None
        if not page:
            return result, None
        stages.start("report")
        from analysis.report.construction import construction_report

        return result, construction_report(result, problem.source, problem.init)
