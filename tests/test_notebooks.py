"""Every notebook in ``notebooks/`` runs top to bottom, and is committed without outputs.

Notebooks run with nbclient on the kernel named ``python3``. So that the kernel is the Python running the tests
(the project's virtual environment, not whatever ``python`` is first on ``PATH``), a ``python3`` kernel spec
pointing at ``sys.executable`` is registered in a temporary ``JUPYTER_PATH``, which Jupyter searches first; a
test checks that the kernel really runs in this environment. New notebooks are picked up by the glob.
"""

import json
import os
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK_DIR = ROOT / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.ipynb"))
#: Per cell. Notebooks are meant to run in well under a minute; this only stops a hung kernel.
CELL_TIMEOUT = 600

sys.path.insert(0, str(NOTEBOOK_DIR))
from strip_outputs import problems as unstripped  # noqa: E402
from strip_outputs import strip  # noqa: E402


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    """Register a ``python3`` kernel running this interpreter, ahead of any other on the Jupyter path."""
    spec_dir = tmp_path_factory.mktemp("jupyter")
    kernel_dir = spec_dir / "kernels" / "python3"
    kernel_dir.mkdir(parents=True)
    (kernel_dir / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python 3 (kmeans-circuits tests)",
        "language": "python",
    }))
    old = os.environ.get("JUPYTER_PATH")
    os.environ["JUPYTER_PATH"] = os.pathsep.join([str(spec_dir), *([old] if old else [])])
    try:
        yield "python3"
    finally:
        if old is None:
            os.environ.pop("JUPYTER_PATH", None)
        else:
            os.environ["JUPYTER_PATH"] = old


def execute(nb, kernel_name: str):
    client = NotebookClient(nb, timeout=CELL_TIMEOUT, startup_timeout=120, kernel_name=kernel_name,
                            resources={"metadata": {"path": str(NOTEBOOK_DIR)}})
    client.execute()
    return nb


def test_the_kernel_runs_in_this_environment(kernel):
    nb = nbformat.v4.new_notebook()
    nb.cells.append(nbformat.v4.new_code_cell("import sys, analysis, circuits\nprint(sys.prefix)"))
    execute(nb, kernel)
    printed = "".join(o.get("text", "") for o in nb.cells[0].outputs).strip()
    assert printed == sys.prefix


def test_there_are_notebooks():
    assert (NOTEBOOK_DIR / "01_exact_circuit.ipynb") in NOTEBOOKS


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_runs_top_to_bottom(path, kernel):
    nb = nbformat.read(path, as_version=4)
    assert nb.metadata.get("kernelspec", {}).get("name") == "python3"
    execute(nb, kernel)  # raises CellExecutionError, with the cell and its traceback, if any cell fails
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code and all(c.execution_count is not None for c in code)
    errors = [o for c in code for o in c.outputs if o.output_type == "error"]
    assert errors == []


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_is_committed_stripped(path):
    nb = nbformat.read(path, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.outputs == [] for c in code), f"{path.name} has outputs: run python notebooks/strip_outputs.py"
    assert all(c.execution_count is None for c in code), f"{path.name} has execution counts"
    assert unstripped(nb, strict=False) == [], "run python notebooks/strip_outputs.py"


def test_strip_helper_removes_what_a_run_leaves(kernel):
    nb = nbformat.v4.new_notebook(metadata={"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                           "language": "python"}})
    nb.cells.append(nbformat.v4.new_code_cell("print('hello')"))
    nb.cells.append(nbformat.v4.new_markdown_cell("text"))
    nb.metadata["language_info"] = {"name": "python", "version": "3.x"}
    nb.cells[0].metadata["execution"] = {"iopub.status.idle": "now"}
    execute(nb, kernel)
    assert unstripped(nb) != [] and nb.cells[0].outputs
    assert strip(nb) and unstripped(nb) == [] and not strip(nb)
    assert nb.cells[0].source == "print('hello')" and nb.metadata["kernelspec"]["name"] == "python3"
