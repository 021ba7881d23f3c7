"""Strip outputs, execution counts and volatile metadata from notebooks, so that git holds only their source.

    python notebooks/strip_outputs.py                 # every notebooks/*.ipynb, in place
    python notebooks/strip_outputs.py NB.ipynb ...    # the given notebooks
    python notebooks/strip_outputs.py --check         # change nothing; list what is not stripped, exit 1 if any

The test suite runs every notebook (``tests/acceptance/test_notebooks.py``) and checks that the committed files are
stripped.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import nbformat

#: Notebook-level metadata that depends on who ran it last (Python version, widget state).
VOLATILE_METADATA = ("language_info", "widgets", "vscode", "toc", "varInspector")
#: Cell-level metadata written by front ends as a notebook runs.
VOLATILE_CELL_METADATA = ("execution", "collapsed", "scrolled", "ExecuteTime", "jupyter")


def problems(nb, strict: bool = True) -> list[str]:
    """What keeps ``nb`` from being stripped (empty when it is).

    Not strict: only what a run leaves in the cells (outputs, execution counts, execution timings), which is
    what the test suite requires; strict also counts volatile metadata (the Python version in ``language_info``).
    """
    out = [f"notebook metadata {key!r}" for key in VOLATILE_METADATA if strict and key in nb.metadata]
    cell_keys = VOLATILE_CELL_METADATA if strict else ("execution", "ExecuteTime")
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            if cell.get("outputs"):
                out.append(f"cell {i}: outputs")
            if cell.get("execution_count") is not None:
                out.append(f"cell {i}: execution_count")
        out.extend(f"cell {i}: metadata {key!r}" for key in cell_keys if key in cell.metadata)
    return out


def strip(nb) -> bool:
    """Strip ``nb`` in place; True if anything changed."""
    before = problems(nb)
    for key in VOLATILE_METADATA:
        nb.metadata.pop(key, None)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
        for key in VOLATILE_CELL_METADATA:
            cell.metadata.pop(key, None)
    return bool(before)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("notebooks", nargs="*", type=Path)
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a notebook is not stripped")
    args = parser.parse_args(argv)
    paths = args.notebooks or sorted(Path(__file__).resolve().parent.glob("*.ipynb"))
    dirty = 0
    for path in paths:
        nb = nbformat.read(path, as_version=4)
        if args.check:
            found = problems(nb)
            if found:
                dirty += 1
                print(f"{path}: not stripped ({', '.join(found[:5])}{' ...' if len(found) > 5 else ''})")
        elif strip(nb):
            nbformat.write(nb, path)
            print(f"stripped {path}")
    return 1 if dirty else 0


if __name__ == "__main__":
    sys.exit(main())
