"""Every notebook in ``notebooks/`` runs top to bottom, is committed without outputs, and stays light once run.

Notebooks run with nbclient on the kernel named ``python3``. So that the kernel is the Python running the tests
(the project's virtual environment, not whatever ``python`` is first on ``PATH``), a ``python3`` kernel spec
pointing at ``sys.executable`` is registered in a temporary ``JUPYTER_PATH``, which Jupyter searches first; a
test checks that the kernel really runs in this environment. New notebooks are picked up by the glob.

Executed, a notebook holds plotly.js once (the "notebook" renderer's offline initialisation, so that exported HTML
draws without a network) and each figure as plotly's MIME type (what JupyterLab draws) with a small HTML fallback:
every figure used to embed its own 4.8 MB copy of plotly.js (01_exact_circuit ran to 40.5 MB).
"""

import ast
import copy
import json
import os
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK_DIR = ROOT / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.ipynb"))
#: Per cell. Notebooks are meant to run in well under a minute; this only stops a hung kernel.
CELL_TIMEOUT = 600
#: An executed notebook's size budget, in bytes: plotly.js once (4.8 MB) and the figures.
MAX_EXECUTED_BYTES = 6_000_000

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
    # shutdown_kernel="immediate": the outputs are in by then, and a graceful shutdown waited 2.4 s a notebook.
    client = NotebookClient(nb, timeout=CELL_TIMEOUT, startup_timeout=120, kernel_name=kernel_name,
                            resources={"metadata": {"path": str(NOTEBOOK_DIR)}}, shutdown_kernel="immediate")
    client.execute()
    return nb


@pytest.fixture(scope="module")
def executed(kernel):
    """Each notebook run once for the module's tests (a run takes tens of seconds): path -> executed notebook.

    A notebook named in :data:`APPENDED` runs with that cell added at its end, which only reads what the
    notebook's own cells left (their outputs are unchanged); its test reads the added cell's output."""
    runs = {}

    def run(path: Path):
        if path not in runs:
            nb = nbformat.read(path, as_version=4)
            assert nb.metadata.get("kernelspec", {}).get("name") == "python3"
            if path.name in APPENDED:
                nb.cells.append(nbformat.v4.new_code_cell(APPENDED[path.name]))
            runs[path] = execute(nb, kernel)  # raises CellExecutionError, with the cell and its traceback
        return runs[path]

    return run


#: Added at the end of the first notebook: where its kernel's Python lives.
PRINT_PREFIX = "import sys, analysis, circuits\nprint(sys.prefix)"


def stdout_of_last_cell(nb) -> str:
    return "".join(o.get("text", "") for o in nb.cells[-1].outputs if o.get("name") == "stdout")


def test_the_kernel_runs_in_this_environment(executed):
    nb = executed(NOTEBOOK_DIR / "01_exact_circuit.ipynb")
    assert nb.cells[-1].source == PRINT_PREFIX
    assert stdout_of_last_cell(nb).strip() == sys.prefix


def test_there_are_notebooks():
    assert (NOTEBOOK_DIR / "01_exact_circuit.ipynb") in NOTEBOOKS


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_runs_top_to_bottom(path, executed):
    nb = executed(path)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code and all(c.execution_count is not None for c in code)
    errors = [o for c in code for o in c.outputs if o.output_type == "error"]
    assert errors == []


#: ipywidgets' calls that run a function at once when displayed, unless told {"manual": True}.
RUN_ON_DISPLAY = frozenset({"interactive", "interact"})


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_widgets_run_on_their_button(path):
    """Every widget that calls a function runs it on its button, not when the cell runs: output written into a
    widget's output area as the cell runs (a figure, a print) held the headless runs of these tests about ten
    minutes on that cell (05_interactive's figure, then its ablation; a browser front end would consume it)."""
    nb = nbformat.read(path, as_version=4)
    eager = []
    for cell in (c for c in nb.cells if c.cell_type == "code"):
        for node in ast.walk(ast.parse(cell.source)):
            name = getattr(node, "func", None) and getattr(node.func, "attr", getattr(node.func, "id", None))
            if not isinstance(node, ast.Call) or name not in RUN_ON_DISPLAY:
                continue
            options = [dict(zip((getattr(k, "value", None) for k in arg.keys), arg.values))
                       for arg in node.args if isinstance(arg, ast.Dict)]
            manual = any(getattr(o.get("manual"), "value", None) is True for o in options)
            eager += [] if manual else [ast.get_source_segment(cell.source, node).splitlines()[0]]
    assert eager == [], f"{path.name}: give these {{\"manual\": True}}: {eager}"


def plotly_js_copies(text: str) -> int:
    """How many copies of plotly.js ``text`` embeds (each begins with its banner comment)."""
    from plotly.offline import get_plotlyjs, get_plotlyjs_version

    banner = f"plotly.js v{get_plotlyjs_version()}"
    assert banner in get_plotlyjs()[:200]  # the banner this counts is the bundle's own first lines
    return text.count(banner)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_executed_notebook_holds_plotly_js_once_and_stays_small(path, executed):
    """Executed, a notebook is at most MAX_EXECUTED_BYTES, holds plotly.js at most once (embedded: exported HTML
    draws offline, not from a CDN), and gives every figure plotly's MIME type, which JupyterLab draws."""
    nb = executed(path)
    text = nbformat.writes(nb)
    size = len(text.encode())
    assert size <= MAX_EXECUTED_BYTES, f"{path.name} runs to {size / 1e6:.1f} MB"
    figures = [o.data for c in nb.cells if c.cell_type == "code" for o in c.outputs
               if "plotly-graph-div" in o.get("data", {}).get("text/html", "")]
    assert plotly_js_copies(text) == (1 if figures else 0), path.name
    assert 'src="https://cdn.plot.ly' not in text
    assert all("application/vnd.plotly.v1+json" in data for data in figures), path.name


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_is_committed_stripped(path):
    nb = nbformat.read(path, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.outputs == [] for c in code), f"{path.name} has outputs: run python notebooks/strip_outputs.py"
    assert all(c.execution_count is None for c in code), f"{path.name} has execution counts"
    assert unstripped(nb, strict=False) == [], "run python notebooks/strip_outputs.py"


def test_strip_helper_removes_what_a_run_leaves(executed):
    """Run on a copy of an executed notebook, the helper removes what the run left (outputs, execution counts and
    timings, the kernel's language_info) and gives back the committed cells."""
    path = NOTEBOOK_DIR / "02_activation_patching.ipynb"
    nb, committed = copy.deepcopy(executed(path)), nbformat.read(path, as_version=4)
    assert any(c.outputs for c in nb.cells if c.cell_type == "code") and "language_info" in nb.metadata
    assert unstripped(nb) != []
    assert strip(nb) and unstripped(nb) == [] and not strip(nb)
    assert [(c.cell_type, c.source) for c in nb.cells] == [(c.cell_type, c.source) for c in committed.cells]
    assert nb.metadata["kernelspec"] == committed.metadata["kernelspec"]


CHECK_INTERACTIVE = '''
import json as _json
_out = {"X": X.tolist(), "C0": C0.tolist(), "assign_layers": list(base.circuit.assignment_layers),
        "update_layers": list(base.circuit.centroid_layers)}
_out["beta"] = {}
for _b in (14, 4, 2, 1):
    _r = assign_pattern(log10_beta=_b)
    _out["beta"][_b] = {"pattern": _r["pattern"].tolist(), "leak": _r["leak_bound"], "margin": _r["min_margin"],
                        "verified": _r["verified"], "figure_z": _r["figure"].data[-1].z.tolist()}
_m = assign_pattern(centroid=2, x=0.5, y=4.0)
_out["moved"] = {"C0": _m["C0"].tolist(), "labels": _m["labels"].tolist()}
_out["ablate"] = {L: ablate(L) for L in base.circuit.assignment_layers}
print(_json.dumps(_out))
'''


#: Notebook name -> a cell the ``executed`` fixture adds at its end, for a test that reads its output.
APPENDED = {"01_exact_circuit.ipynb": PRINT_PREFIX, "05_interactive.ipynb": CHECK_INTERACTIVE}


def test_interactive_notebook_callbacks_against_references(executed):
    """05_interactive's widget callbacks, called with given values in the executed notebook, against numpy Lloyd."""
    import numpy as np

    from circuits import reference

    nb = executed(NOTEBOOK_DIR / "05_interactive.ipynb")
    assert nb.cells[-1].source == CHECK_INTERACTIVE
    out = json.loads(stdout_of_last_cell(nb))
    X, C0 = np.array(out["X"]), np.array(out["C0"])
    nearest = reference.assign(X, C0)
    sharp = out["beta"]["14"]
    # Sharp: the first assign head is exactly the one-hot of the nearest initial centroid, certified, verified.
    np.testing.assert_array_equal(np.array(sharp["pattern"]), np.eye(3)[nearest])
    assert sharp["leak"] == 0 and sharp["verified"]
    # Lowering beta: margins fall in proportion to beta, leak bounds rise, the pattern goes soft, verification fails.
    betas = [14, 4, 2, 1]
    margins = [out["beta"][str(b)]["margin"] for b in betas]
    leaks = [out["beta"][str(b)]["leak"] for b in betas]
    assert all(a > b for a, b in zip(margins, margins[1:])) and all(a <= b for a, b in zip(leaks, leaks[1:]))
    assert margins[2] / margins[3] == pytest.approx(10.0, rel=1e-6)
    soft = np.array(out["beta"]["1"]["pattern"])
    assert soft.max(axis=1).min() < 0.9 and leaks[-1] > 0.5 and not out["beta"]["1"]["verified"]
    np.testing.assert_allclose(soft.sum(axis=1), 1.0, atol=1e-12)
    assert soft.argmax(axis=1).tolist() == nearest.tolist()  # still the nearest centroid, only softer
    # The figure draws the same pattern (rows reordered by attended centroid).
    z = np.array(out["beta"]["1"]["figure_z"])
    assert sorted(map(tuple, z.round(12))) == sorted(map(tuple, soft.round(12)))
    # Moving a centroid: the labels are the nearest of the moved centroids.
    assert out["moved"]["labels"] == reference.assign(X, np.array(out["moved"]["C0"])).tolist()
    assert out["moved"]["C0"][2] == [0.5, 4.0]
    # Ablating an assign head: the verifier names that layer first.
    for L in out["assign_layers"]:
        r = out["ablate"][str(L)]
        assert not r["verified"] and r["broken_layer"] == L, (L, r)
