"""Moved to :mod:`analysis.cli.progress`; kept for one release."""

from analysis.cli.progress import Cells, Stages  # noqa: F401
