"""The ``kmeans-circuits`` command line: the only part of the project that knows flags, exit codes and argparse.

:mod:`analysis.cli.main` builds the parser and dispatches; :mod:`analysis.cli.options` holds the options several
commands share and their validation, :mod:`analysis.cli.output` writes ``--out``, :mod:`analysis.cli.progress`
shows progress and :mod:`analysis.cli.exits` turns exceptions into exit codes and one-line messages. Every other
module of this package is one command, discovered by :func:`analysis.cli.main.command_modules`; a command imports
those shared modules and the library, never another command.
"""

from analysis.cli.exits import bad_input_message
from analysis.cli.main import build_parser, command_modules, keep_freed_memory, main

__all__ = ["bad_input_message", "build_parser", "command_modules", "keep_freed_memory", "main"]
