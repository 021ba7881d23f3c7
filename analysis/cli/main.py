"""The ``kmeans-circuits`` parser and dispatch.

Each command is a module of :mod:`analysis.cli` with ``NAME``, ``HELP``, ``add_arguments(parser)`` and
``run(args) -> int``; they are discovered, so adding a command touches no other file. Exit codes are those of
:mod:`analysis.cli.exits`. Heavy modules (torch, TransformerLens) are imported only inside ``run``, so ``--help``
and input validation stay fast.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import pkgutil
import sys
import warnings

from analysis.cli.exits import bad_input_message, message, report_internal_error
from analysis.cli.limits import check_limits
from analysis.cli.options import check_device, check_numbers, check_path_options
from analysis.errors import ProblemError

#: The package whose modules are the commands (and the shared modules, which define no ``NAME``).
PACKAGE = "analysis.cli"


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
    """The command modules, by name: every module of :mod:`analysis.cli` that defines ``NAME`` and ``run``."""
    package = importlib.import_module(PACKAGE)
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{PACKAGE}.{info.name}")
        if hasattr(module, "NAME") and hasattr(module, "run"):
            yield module


def package_version() -> str:
    """The installed package's version (its metadata, from pyproject.toml), or "unknown" when run uninstalled."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("kmeans-circuits")
    except PackageNotFoundError:
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="kmeans-circuits",
        description="A transformer with hand-written weights that runs Lloyd's k-means exactly, and tools to look inside it.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {package_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=OneLineParser)
    for module in command_modules():
        p = sub.add_parser(module.NAME, help=module.HELP, description=module.HELP, formatter_class=DefaultsFormatter)
        module.add_arguments(p)
        p.set_defaults(run=module.run)
    return parser


def command_parser(parser: argparse.ArgumentParser, command: str) -> argparse.ArgumentParser:
    """The subparser of ``command``."""
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[command]


def keep_freed_memory() -> None:
    """Ask glibc to keep freed memory in the heap instead of returning large blocks to the kernel.

    A structured run over a million points allocates and frees many large temporaries; by default each comes from
    a fresh ``mmap`` whose pages the kernel must fault in and zero: 9-10 s of system time at n = 1e6, d = 8, k = 10
    against 4-4.5 s with the heap reused, for about 0.1 GB more peak (docs/performance.md, "The textbook core and
    one scheduler"). The command line calls this once; the library never does. No effect (and no error) off glibc.
    """
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        M_TRIM_THRESHOLD, M_MMAP_MAX, M_ARENA_MAX = -1, -4, -8
        libc.mallopt(M_MMAP_MAX, 0)
        libc.mallopt(M_TRIM_THRESHOLD, 2**31 - 1)
        # One heap for every thread (a verification's background bound, analysis.verify.procedure): a thread's own
        # arena would hold freed memory of its own beside the main heap's.
        libc.mallopt(M_ARENA_MAX, 1)
    except (OSError, AttributeError):
        pass


def release_freed_memory() -> None:
    """Give the heap's free pages back to the kernel (glibc's ``malloc_trim``), once, between a run at scale and its
    report: :func:`keep_freed_memory` keeps the run's freed temporaries in the heap, and the report's allocations
    (TransformerLens's modules, the figures) landed beside them rather than in them, adding 0.24 GB to the peak of
    ``cluster --out`` at n = 10^6 (docs/performance.md, "Writing the results at scale"). No effect off glibc."""
    import ctypes
    import ctypes.util

    try:
        ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


@contextlib.contextmanager
def settled_for_the_report(at_scale: bool):
    """What the command line does around the report of a run, process-wide (the library never does).

    At scale the heap's free pages go back to the kernel first (:func:`release_freed_memory`). Then the cyclic
    garbage there is now is collected, TransformerLens, which the report's model and weight views need, is imported
    (with the collector paused: :mod:`circuits.tl`), and every object alive is frozen (``gc.freeze``) while the report
    is made: the run's results, which the report reads, and the modules imported so far. Collecting before the
    import walks the run's objects alone: after it, the collection walked TransformerLens's too (0.27 s against
    0.06-0.07 s in ``cluster --out`` at a million points), to find some twenty unreachable objects among them
    (frozen now, until the unfreeze). The collections that the report's own imports and figures set off
    (scikit-learn, plotly) then no longer walk them again and again. With the freeze at the process's end
    (:func:`program`), ``report --dataset iris --k 3`` took 4.8-5.2 s of CPU against 6.2-6.4 s (docs/performance.md,
    "The eighth round"). A frozen object is still freed when its last reference goes, and at the end they are
    unfrozen (collectable again). Where something else in the process froze objects already, nothing is frozen (its
    unfreeze would be ours)."""
    import gc

    from circuits import tl

    if at_scale:
        release_freed_memory()
    freeze = gc.get_freeze_count() == 0
    if freeze:
        gc.collect()
    tl.FactoredMatrix  # noqa: B018 (the import, on first access)
    if freeze:
        gc.freeze()
    try:
        yield
    finally:
        if freeze:
            gc.unfreeze()


#: The exit status when stdout's reader has gone: a shell's for a process ended by SIGPIPE (128 + 13).
BROKEN_PIPE = 141


def _drop_stdout() -> None:
    import os

    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # no file descriptor (a captured stdout): nothing to flush there
        pass


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        sub = command_parser(parser, args.command)
        check_numbers(sub, args)
        check_limits(sub, args)
        check_path_options(args)
        check_device(args)
    except ProblemError as exc:
        print(f"kmeans-circuits {args.command}: error: {message(exc)}", file=sys.stderr)
        return 2
    keep_freed_memory()
    # TransformerLens 3.x warns at every HookedTransformer build; our models are built on purpose.
    warnings.filterwarnings("ignore", message="HookedTransformer is deprecated", category=DeprecationWarning)
    try:
        return int(args.run(args))
    except KeyboardInterrupt:
        print(f"kmeans-circuits {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # stdout's reader has gone (`| head`): what is left to print has nowhere to go, which is no bug. Python
        # would print another BrokenPipeError when it flushes stdout at exit; send that flush to /dev/null.
        _drop_stdout()
        return BROKEN_PIPE
    except Exception as exc:
        text = bad_input_message(exc)
        if text is None:
            report_internal_error(args.command)
            return 3
        print(f"kmeans-circuits {args.command}: error: {text}", file=sys.stderr)
        return 2


def program() -> None:
    """The ``kmeans-circuits`` script and ``python -m analysis.cli``: :func:`main` on the process's arguments, and the
    process ends with its exit status. Before it ends, every object left is frozen (``gc.freeze``), so that the
    interpreter's collections at exit do not walk them all once more for nothing: after importing TransformerLens
    that walk is 0.8 s of CPU (``python -c "import torch, transformer_lens"``: 4.7 s, and 3.9 s with a freeze at the
    end; docs/performance.md, "The eighth round"). Objects are still freed as their references go; what a freeze
    keeps from the collector is only cycles, which the process's end reclaims. Tests call :func:`main` in their own
    process, whose collector it leaves as it was."""
    import gc

    code = main()
    gc.freeze()
    sys.exit(code)


if __name__ == "__main__":
    program()
