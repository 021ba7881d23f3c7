"""Moved to :mod:`analysis.cli.options`; kept for one release."""

from analysis.cli.options import (  # noqa: F401
    Problem, add_path_argument, add_problem_arguments, check_checkpoint, check_variant_arg, load_problem, seed,
    sharpness_from, variant_help,
)
