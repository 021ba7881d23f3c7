"""``python -m analysis.cli``: the same as the ``kmeans-circuits`` script."""

from analysis.cli.main import program

program()
