"""The ``kmeans-circuits`` command line.

Each subcommand is a module of :mod:`analysis.commands` with ``NAME``, ``HELP``, ``add_arguments(parser)`` and
``run(args) -> int``; they are discovered, so adding a command touches no other file. Exit codes: 0 done (and
verified), 1 ran but the circuit disagrees with its reference, 2 bad input or usage — with a one-line message on
stderr and no traceback (a problem too large for memory counts as bad input); 3 an internal error (a bug), with its
traceback. Heavy modules (torch, TransformerLens) are imported only inside ``run``, so ``--help`` and
input validation stay fast.
"""

from __future__ import annotations

import argparse
import importlib
import math
import pkgutil
import sys
import traceback
import warnings

from analysis.data import InputError


class DefaultsFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows each option's default, unless its help already says it or there is none to show (flags, ``None``)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if "default" in text.lower() or action.default in (None, False, argparse.SUPPRESS) or not action.option_strings:
            return text
        return super()._get_help_string(action)


class OneLineParser(argparse.ArgumentParser):
    """Usage errors as one line on stderr and exit code 2 (argparse would print the usage block first)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message}\n")


def command_modules():
    from analysis import commands

    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        if not info.name.startswith("_"):
            yield importlib.import_module(f"{commands.__name__}.{info.name}")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="kmeans-circuits",
        description="A transformer with hand-written weights that runs Lloyd's k-means exactly, and tools to look inside it.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=OneLineParser)
    for module in command_modules():
        p = sub.add_parser(module.NAME, help=module.HELP, description=module.HELP, formatter_class=DefaultsFormatter)
        module.add_arguments(p)
        p.set_defaults(run=module.run)
    return parser


def keep_freed_memory() -> None:
    """Ask glibc to keep freed memory in the heap instead of returning large blocks to the kernel.

    A structured run over a million points allocates and frees hundreds of 200 MB temporaries; by default each
    comes from a fresh ``mmap`` whose pages the kernel must fault in and zero, which measured 38 s of system time
    out of 93 s at n = 1e6. Reusing the heap brings that to ~5 s. No effect (and no error) off glibc.
    """
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4
        libc.mallopt(M_MMAP_MAX, 0)
        libc.mallopt(M_TRIM_THRESHOLD, 2**31 - 1)
    except (OSError, AttributeError):
        pass


#: The largest integer an option may take: numpy's int64, which every count and index ends up in.
INT_MAX = 2**63 - 1


def check_numbers(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Reject an integer option no array can hold and a float option that is NaN or infinite, for every command.

    Each command checks its own ranges; these two classes would otherwise reach numpy or torch first (an
    ``OverflowError`` or "Maximum allowed dimension exceeded" is a traceback, not a message).
    """
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[args.command]
    for action in sub._actions:
        value = getattr(args, action.dest, None)
        flag = action.option_strings[0] if action.option_strings else action.dest
        if action.type is int and isinstance(value, int) and not -INT_MAX <= value <= INT_MAX:
            raise InputError(f"{flag} {value} is out of range: counts and indices here are at most 2**63 - 1 in"
                             " size, more than any memory holds")
        if action.type is float and isinstance(value, float) and not math.isfinite(value):
            raise InputError(f"{flag} must be a finite number, got {value}")


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        from analysis.commands._output import check_path_options

        check_numbers(parser, args)
        check_path_options(args)
    except InputError as exc:
        print(f"kmeans-circuits {args.command}: error: {exc}", file=sys.stderr)
        return 2
    keep_freed_memory()
    # TransformerLens 3.x warns at every HookedTransformer build; our models are built on purpose.
    warnings.filterwarnings("ignore", message="HookedTransformer is deprecated", category=DeprecationWarning)
    try:
        return int(args.run(args))
    except KeyboardInterrupt:
        print(f"kmeans-circuits {args.command}: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        message = bad_input_message(exc)
        if message is None:
            report_internal_error(args.command)
            return 3
        print(f"kmeans-circuits {args.command}: error: {message}", file=sys.stderr)
        return 2


def bad_input_message(exc: Exception) -> str | None:
    """The one-line message of an exception that means bad input (exit 2), or ``None`` for a bug (exit 3)."""
    if isinstance(exc, InputError) or is_bad_knob(exc):
        return str(exc)
    if isinstance(exc, MemoryError) or (isinstance(exc, RuntimeError) and is_out_of_memory(exc)):
        # Output folders are written all at once at the end, so nothing is left half-written.
        return "the problem does not fit in memory"
    return None


#: What torch's allocators say when an allocation fails: it raises ``RuntimeError`` (CPU) or its subclass
#: ``torch.OutOfMemoryError`` (CUDA), not Python's ``MemoryError``.
OUT_OF_MEMORY = ("can't allocate memory", "out of memory", "not enough memory")


def is_out_of_memory(exc: RuntimeError) -> bool:
    message = str(exc).lower()
    return type(exc).__name__ == "OutOfMemoryError" or any(text in message for text in OUT_OF_MEMORY)


def is_bad_knob(exc: Exception) -> bool:
    """Knobs or variant parameters whose weights overflow the chosen dtype (found when the circuit is built)."""
    build = sys.modules.get("circuits.build")  # raised there, so imported whenever it can be the cause
    return build is not None and isinstance(exc, build.WeightRangeError)


def report_internal_error(command: str) -> None:
    """Report the exception being handled as a bug: its traceback, then one line saying so."""
    # A bug, not a verdict: exit 1 means "the circuit disagrees with its reference", so a crash must not use it.
    traceback.print_exc()
    print(f"kmeans-circuits {command}: internal error (a bug: please report the traceback above)", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
