"""What the command line makes of an exception: an exit code and, for bad input, one line naming the flag.

Exit codes: 0 done (and verified), 1 ran but the circuit disagrees with its reference, 2 bad input or usage (a
problem too large for memory counts as bad input) with a one-line message on stderr and no traceback, 3 an
internal error (a bug) with its traceback, 130 interrupted, 141 stdout closed by its reader (SIGPIPE).

The library raises :class:`analysis.errors.ProblemError` (a ``ValueError``) naming the *parameter* at fault
(``field``, e.g. ``"k"``); :func:`message` names the command-line flag instead (``--k``).
"""

from __future__ import annotations

import sys
import traceback

from analysis.errors import ProblemError

#: Parameters of the library whose flag is not ``--`` and the name with ``-`` for ``_``.
FLAGS = {"data": "--data", "init": "--init"}


def flag(field: str) -> str:
    """The command-line flag of the library's parameter ``field``."""
    return FLAGS.get(field, "--" + field.replace("_", "-"))


def message(exc: BaseException) -> str:
    """The one-line message of a bad-input exception, naming the flag where the library named a parameter."""
    if isinstance(exc, ProblemError) and exc.field is not None:
        return f"{flag(exc.field)} {exc.detail}"
    return str(exc)


def bad_input_message(exc: BaseException) -> str | None:
    """The one-line message of an exception that means bad input (exit 2), or ``None`` for a bug (exit 3)."""
    if isinstance(exc, ProblemError) or is_bad_knob(exc):
        return message(exc)
    if isinstance(exc, MemoryError) or (isinstance(exc, RuntimeError) and is_out_of_memory(exc)):
        # Output folders are written all at once at the end, so nothing is left half-written.
        return "the problem does not fit in memory"
    return None


#: What torch's allocators say when an allocation fails: it raises ``RuntimeError`` (CPU) or its subclass
#: ``torch.OutOfMemoryError`` (CUDA), not Python's ``MemoryError``.
OUT_OF_MEMORY = ("can't allocate memory", "out of memory", "not enough memory")


def is_out_of_memory(exc: RuntimeError) -> bool:
    text = str(exc).lower()
    return type(exc).__name__ == "OutOfMemoryError" or any(words in text for words in OUT_OF_MEMORY)


def is_bad_knob(exc: BaseException) -> bool:
    """Knobs or variant parameters whose weights overflow the chosen dtype (found when the circuit is built)."""
    build = sys.modules.get("circuits.build")  # raised there, so imported whenever it can be the cause
    return build is not None and isinstance(exc, build.WeightRangeError)


def report_internal_error(command: str) -> None:
    """Report the exception being handled as a bug: its traceback, then one line saying so."""
    # A bug, not a verdict: exit 1 means "the circuit disagrees with its reference", so a crash must not use it.
    traceback.print_exc()
    print(f"kmeans-circuits {command}: internal error (a bug: please report the traceback above)", file=sys.stderr)


def report_failures(failures: list) -> int:
    """Name every failed cell (:class:`analysis.engine.CellFailure`) on stderr, with the first one's traceback, and
    return the exit status: 2 if every failure is bad input (out of memory included), else 3 (a bug)."""
    if not failures:
        return 0
    bad_input = all(bad_input_message(f.error) is not None for f in failures)
    if not bad_input:
        print(failures[0].details.rstrip(), file=sys.stderr)
    for f in failures:
        print(f.line(), file=sys.stderr)
    print(f"{len(failures)} cell(s) failed; the results above are those of the other cells", file=sys.stderr)
    return 2 if bad_input else 3
