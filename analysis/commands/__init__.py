"""Moved to :mod:`analysis.cli` (one module per command there); kept for one release.

Only the shared helpers that docs/extending.md named are kept here, as re-exports: ``_problem`` is
:mod:`analysis.cli.options`, ``_output`` is :mod:`analysis.cli.output`, ``_progress`` is :mod:`analysis.cli.progress`.
"""
