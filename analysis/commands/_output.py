"""Moved to :mod:`analysis.cli.output`; kept for one release."""

from analysis.cli.options import check_path_options  # noqa: F401
from analysis.cli.output import (  # noqa: F401
    check_out_dir, check_out_file, check_path_length, write_output_dir, write_output_file,
)
