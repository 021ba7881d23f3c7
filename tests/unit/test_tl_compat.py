"""circuits/tl.py, the one module that imports TransformerLens, on whichever major is installed: it reports the
version, hands out the names both majors share, says clearly what 4.x removed, imports nothing until asked, and no
other module of the project imports TransformerLens itself. The version snippet of docs/python.md runs and says
what is installed."""

import ast
import contextlib
import gc
import io
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from circuits import tl

ROOT = Path(__file__).resolve().parents[2]


def test_the_version_is_the_installed_packages():
    version = metadata.version("transformer-lens")
    assert tl.TL_VERSION == version and tl.TL_MAJOR == int(version.split(".")[0]) and tl.TL_MAJOR in (3, 4)
    import transformer_lens

    for name in ("HookedRootModule", "ActivationCache", "FactoredMatrix"):
        assert getattr(tl, name) is getattr(transformer_lens, name)
    assert tl.HookPoint is transformer_lens.hook_points.HookPoint
    assert tl.patching is transformer_lens.patching and tl.utilities is transformer_lens.utilities


def test_what_4x_removed_is_said_by_name():
    if tl.TL_MAJOR >= 4:
        for name in ("HookedTransformer", "HookedTransformerConfig"):
            with pytest.raises(ImportError, match=f"has no {name}.*circuits.hooked.model.HookedCircuit"):
                getattr(tl, name)
    else:
        import transformer_lens

        assert tl.HookedTransformer is transformer_lens.HookedTransformer
    with pytest.raises(AttributeError):
        tl.NoSuchThing


def test_importing_it_imports_no_transformer_lens():
    code = "import sys, circuits.tl as tl; print(tl.TL_MAJOR, 'transformer_lens' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.split() == [str(tl.TL_MAJOR), "False"]


def test_transformer_lens_is_imported_with_the_collector_paused_and_left_as_it_was():
    """No collection runs while TransformerLens is imported (its objects are not garbage: docs/performance.md), and
    the collector is left as the caller had it, enabled or disabled, also when the import fails."""
    code = ("import gc, sys, circuits.tl as tl\n"
            "starts = []\n"
            "gc.callbacks.append(lambda phase, info: starts.append(info['generation']) if phase == 'start' else None)\n"
            "if sys.argv[1] == 'disabled': gc.disable()\n"
            "tl.FactoredMatrix\n"
            "print(len(starts), 'transformer_lens' in sys.modules, gc.isenabled())")
    for before, enabled in (("enabled", "True"), ("disabled", "False")):
        out = subprocess.run([sys.executable, "-c", code, before], capture_output=True, text=True, check=True,
                             cwd=ROOT)
        assert out.stdout.split() == ["0", "True", enabled]
    assert gc.isenabled()
    with pytest.raises(ModuleNotFoundError):
        tl._import_uncollected("kmeans_circuits_no_such_module")
    assert gc.isenabled()


def _imports_transformer_lens(path: Path) -> list[int]:
    lines = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] == "transformer_lens" for a in node.names):
            lines.append(node.lineno)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "transformer_lens":
            lines.append(node.lineno)
    return lines


def test_no_other_module_imports_transformer_lens():
    """So a new major touches circuits/tl.py only (and circuits/hooked/, which builds on what it hands out). This
    file is the one exception: it compares circuits/tl.py with the package itself."""
    allowed = {ROOT / "circuits" / "tl.py", Path(__file__).resolve()}
    offenders = {}
    for package in ("circuits", "analysis", "benchmarks", "tests"):
        for path in (ROOT / package).rglob("*.py"):
            if path in allowed or "__pycache__" in path.parts:
                continue
            if lines := _imports_transformer_lens(path):
                offenders[str(path.relative_to(ROOT))] = lines
    assert not offenders


def test_the_version_snippet_in_the_docs_runs_and_tells_the_truth():
    page = (ROOT / "docs" / "python.md").read_text()
    snippet, = [block for block in re.findall(r"```python\n(.*?)```", page, flags=re.S) if "TL_MAJOR" in block]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(snippet, "docs/python.md", "exec"), {})
    version, is_root, base = out.getvalue().splitlines()
    assert version == f"{tl.TL_VERSION} {tl.TL_MAJOR}" and is_root == "True"
    assert base == ("HookedTransformer" if tl.TL_MAJOR < 4 else "HookedRootModule")
