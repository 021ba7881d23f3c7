"""The documentation builds strictly, its links resolve, and the README stays a short front page.

``mkdocs build --strict`` needs the ``docs`` extra (``pip install -e ".[docs]"``, which ``.ci/run`` installs); the
build test is skipped only when mkdocs itself is not importable.
"""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.glob("*.md"))
NAV_PAGES = ["index.md", "circuit.md", "exactness.md", "cli.md", "report.md", "patching.md", "variants.md",
             "training.md", "performance.md", "python.md", "extending.md"]

LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", flags=re.S | re.M)
CODE = re.compile(r"`[^`\n]*`")


def links(text: str) -> list[str]:
    """Markdown link targets outside code blocks and code spans."""
    return LINK.findall(CODE.sub("", FENCE.sub("", text)))


def slug(heading: str) -> str:
    """The anchor of a heading, as mkdocs (Python-Markdown's toc) and GitHub both make it for these headings."""
    text = re.sub(r"[^\w\s-]", "", heading.strip().lower())
    return re.sub(r"[\s]+", "-", text)


def anchors(path: Path) -> set[str]:
    text = FENCE.sub("", path.read_text())
    return {slug(h) for h in re.findall(r"^#{1,6} (.+?)\s*$", text, flags=re.M)}


def test_docs_pages_exist():
    assert [p.name for p in PAGES if p.name in NAV_PAGES] == sorted(NAV_PAGES)
    nav = (ROOT / "mkdocs.yml").read_text()
    for name in NAV_PAGES:
        assert f": {name}" in nav, name


@pytest.mark.parametrize("path", [README, *PAGES], ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(path):
    found = links(path.read_text())
    if path == README:
        assert any(t.startswith("docs/") for t in found), "the README links into docs/"
    for target in found:
        if re.match(r"[a-z]+:", target):
            continue  # http(s), mailto: not checked here
        file, _, anchor = target.partition("#")
        dest = (path.parent / file).resolve() if file else path
        assert dest.is_file(), f"{path.name}: {target} -> {dest} does not exist"
        if path.parent == DOCS:
            assert dest.parent == DOCS, f"{path.name}: {target} leaves docs/, which mkdocs cannot resolve"
        if anchor and dest.suffix == ".md":
            assert anchor in anchors(dest), f"{path.name}: {target}: no heading #{anchor} in {dest.name}"


def test_readme_is_a_short_front_page():
    lines = README.read_text().splitlines()
    assert len(lines) <= 300, len(lines)
    long = [(i, len(line)) for i, line in enumerate(lines, 1) if len(line) > 120]
    assert not long, long


def test_mkdocs_build_strict(tmp_path):
    pytest.importorskip("mkdocs")
    site = tmp_path / "site"
    res = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml"),
                          "-d", str(site)], capture_output=True, text=True, timeout=300, cwd=ROOT,
                         env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert res.returncode == 0, res.stdout + res.stderr
    assert "WARNING" not in res.stderr, res.stderr
    for name in NAV_PAGES:
        page = "index.html" if name == "index.md" else f"{name[:-3]}/index.html"
        assert (site / page).is_file(), page
