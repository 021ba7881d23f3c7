"""The general constructions' run as the commands share it (``cluster --construction``, ``cluster --checkpoint`` of a
learned checkpoint, ``report --construction``): their options checked, the run, and optionally its page."""

from __future__ import annotations

import argparse

from analysis.cli.exits import message
from analysis.cli.options import LoadedProblem
from analysis.errors import ProblemError


def construction_result(args: argparse.Namespace, problem: LoadedProblem, name: str, learned, command: str,
                        page: bool = False):
    """Check the options of ``cluster --construction NAME`` (or ``--checkpoint`` of a learned checkpoint at
    ``learned``; ``report --construction NAME``) and run it: :func:`analysis.constructions.swap.run_swap` or
    :func:`analysis.constructions.learned.run_learned`, a :class:`~analysis.constructions.common.ConstructionResult`.
    ``page``: also draw its report (:mod:`analysis.report.construction`), returned as the second element."""
    flag = f"--checkpoint {args.checkpoint}" if learned is not None else f"--construction {name}"
    if args.variant != "lloyd" or any(getattr(args, knob) is not None for knob in ("beta", "beta_update", "tie_break")):
        raise ProblemError(f"{flag} has its own knobs: --variant and the exactness knobs do not apply")
    if problem.k < 2:
        raise ProblemError(f"{flag} needs --k >= 2")
    if problem.iterations < 1:
        raise ProblemError(f"{flag} needs --iterations >= 1 (each iteration is one step)")
    if args.dtype != "float64":
        raise ProblemError(f"{flag} is exact only in float64: --dtype float32 does not apply")
    from analysis.cli.progress import Stages
    from analysis.constructions.swap import SwapPathUnavailable

    alphas = None
    if name == "learned":
        from analysis.constructions.learned import load_alphas

        try:
            alphas = load_alphas(learned)
        except ValueError as exc:
            raise ProblemError(f"{flag}: {exc}") from None
    with Stages(command, [f"{name} circuit"] + (["report"] if page else [])) as stages:
        try:
            if name == "learned":
                from analysis.constructions.learned import run_learned

                result = run_learned(problem.X, problem.C0, problem.iterations, args.path, alphas)
            else:
                from analysis.constructions.swap import run_swap

                result = run_swap(problem.X, problem.C0, problem.iterations, args.path)
        except (SwapPathUnavailable, ProblemError) as exc:
            raise ProblemError(f"{flag}: {message(exc)}") from None
        if not page:
            return result, None
        stages.start("report")
        from analysis.report.construction import construction_report

        return result, construction_report(result, problem.source, problem.init)
