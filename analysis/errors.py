"""The library's error for a problem it cannot pose or run: bad data, bad parameters, an unusable engine.

:class:`ProblemError` is a ``ValueError`` with a plain message. Where one parameter is at fault, ``field`` names it
(``"k"``, ``"iterations"``, ``"address"``) and the message reads ``"<field> <detail>"``; a front end may name the
parameter its own way (the command line says ``--k``, see :mod:`analysis.cli.exits`). Nothing here knows about
flags, exit codes or printing.
"""

from __future__ import annotations


class ProblemError(ValueError):
    """Bad input: data, parameters or an environment the library cannot use; ``field`` is the parameter at fault."""

    def __init__(self, detail: str, field: str | None = None):
        self.detail, self.field = detail, field
        super().__init__(f"{field} {detail}" if field is not None else detail)

    def __reduce__(self):
        # Pickled whole (a Ray cell's error travels back to the driver), field included.
        return type(self), (self.detail, self.field)
