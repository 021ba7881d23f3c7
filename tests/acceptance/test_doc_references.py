"""Every file the documentation and the code's own prose cite exists: a path such as ``docs/contributing.md`` or
``tests/unit/test_views.py`` in docs/*.md and README.md (text and code blocks), and in the docstrings and comments
of circuits/, analysis/, benchmarks/ and tests/. The tree is read when the test runs, so a module or test file that
moves without its citations moving too fails here. (The Markdown links of the same pages, anchors included, are
checked by ``test_docs.py``'s ``test_relative_links_resolve``.)

What counts as a citation of a repository file, so that an output a page describes (``report.html``,
``out/labels.csv``) is not taken for one:

- a path with a folder, whose first folder is one of the repository's (``circuits/plain.py``, ``docs/cli.md``)
  or one beside the citing file or above it (``verify/procedure.py`` cited in analysis/): it must exist there,
  unless its name is a placeholder in capitals (``circuits/variants/NAME.py``, as in ``--variant NAME``);
- a bare ``.md`` or ``.py`` name (``README.md``, ``layout.py``): some file of the repository has that name;
- ``../shared/...`` (a folder beside the repository, not part of a clone): only where it exists.
"""

from __future__ import annotations

import ast
import functools
import io
import re
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: Where citations are read: pages whole, Python files' docstrings and comments.
PAGES = ("README.md", "docs/*.md")
PACKAGES = ("circuits", "analysis", "benchmarks", "tests")
#: A file name with one of the repository's own kinds of file, after an optional chain of folders.
CITED = re.compile(r"(?<![\w./-])((?:\.\./)*(?:[\w.-]+/)*[\w-][\w.-]*\.(?:md|py|yml|yaml|toml|ipynb|npz|json|csv))"
                   r"(?![\w/-])")
SKIP = {".git", ".venv", "site", "__pycache__", ".pytest_cache", ".hypothesis"}


@functools.lru_cache(maxsize=1)
def repository_names() -> frozenset[str]:
    """The name of every file of the repository (a bare citation such as ``layout.py`` must be one of them)."""
    return frozenset(p.name for p in ROOT.rglob("*") if p.is_file() and not SKIP & set(p.relative_to(ROOT).parts))


def python_prose(path: Path) -> str:
    """A Python file's docstrings and comments, one per line."""
    source = path.read_text()
    parts = [tok.string for tok in tokenize.generate_tokens(io.StringIO(source).readline)
             if tok.type == tokenize.COMMENT]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            parts.append(ast.get_docstring(node, clean=False) or "")
    return "\n".join(parts)


def sources() -> list[Path]:
    pages = [p for pattern in PAGES for p in sorted(ROOT.glob(pattern))]
    code = [p for package in PACKAGES for p in sorted((ROOT / package).rglob("*.py"))
            if "__pycache__" not in p.parts]
    return pages + code


def unresolved(path: Path, text: str, names: frozenset[str]) -> list[str]:
    """The citations in ``text`` (read from ``path``) that name no file of the repository."""
    top = {p.name for p in ROOT.iterdir() if p.is_dir()}
    bad = []
    for cited in sorted(set(CITED.findall(text))):
        if cited.startswith("../"):
            if cited.startswith("../shared/") and not (ROOT / cited).resolve().is_file():
                bad.append(cited)
            continue  # a path above the repository is not a citation of it, except the shared folder
        if "/" not in cited:
            if cited.endswith((".md", ".py")) and cited not in names:
                bad.append(cited)
            continue
        first, stem = cited.split("/")[0], Path(cited).stem
        if stem.isupper():
            continue  # a placeholder: circuits/variants/NAME.py
        bases = [ROOT, *(d for d in path.parents if d.is_relative_to(ROOT))]
        if first in top or any((base / first).is_dir() for base in bases):
            if not any((base / cited).is_file() for base in bases):
                bad.append(cited)
    return bad


@pytest.mark.parametrize("path", sources(), ids=lambda p: str(p.relative_to(ROOT)))
def test_cited_files_exist(path):
    text = python_prose(path) if path.suffix == ".py" else path.read_text()
    bad = unresolved(path, text, repository_names())
    assert not bad, f"{path.relative_to(ROOT)} cites files that do not exist: {bad}"


def test_a_missing_file_is_found():
    """The check can fail: a moved module, a renamed test and a file outside the repository are each reported."""
    names = repository_names()
    here = ROOT / "analysis" / "pipeline.py"
    text = ("see circuits/no_such_module.py, tests/test_cli.py, NO_SUCH_DESIGN.md and ../shared/NO_SUCH.md; "
            "circuits/layout.py, docs/contributing.md, layout.py, out/report.html and docs/NAME.md are fine")
    assert unresolved(here, text, names) == ["../shared/NO_SUCH.md", "NO_SUCH_DESIGN.md",
                                             "circuits/no_such_module.py", "tests/test_cli.py"]
