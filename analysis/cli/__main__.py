"""``python -m analysis.cli``: the same as the ``kmeans-circuits`` script."""

import sys

from analysis.cli.main import main

sys.exit(main())
