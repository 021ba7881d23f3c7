"""The README and the docs stay true: their Python examples run, the layout table matches the code, and the
quickstart's commands are the CI's."""

import re
from pathlib import Path

import pytest

from circuits.layout import SUBSPACE_DOCS, standard_subspaces

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
DOCS = sorted((ROOT / "docs").glob("*.md"))


def python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def test_python_examples_run(capsys):
    """Every ``python`` block of the README and of every docs page runs as written."""
    assert python_blocks(README), "the README has a Python example"
    sources = [(ROOT / "README.md", README)] + [(page, page.read_text()) for page in DOCS]
    ran = 0
    for path, text in sources:
        for code in python_blocks(text):
            exec(compile(code, str(path.relative_to(ROOT)), "exec"), {"__name__": "readme"})
            ran += 1
    assert ran >= 4  # README, In Python, the report's views, patching
    out = capsys.readouterr().out
    assert "True" in out and "VERIFIED" in out


@pytest.mark.parametrize("page", ["README.md", "docs/circuit.md"])
def test_layout_table_matches_the_code(page):
    text = (ROOT / page).read_text()
    rows = re.findall(r"^\| (\w+) \| (\w+) \| (.+?) \|$", text, flags=re.M)
    table = [(name, width, holds.replace("\\|", "|")) for name, width, holds in rows if name != "subspace"]
    symbol = {2: "d", 3: "k", 1: "1"}
    expected = [(name, symbol[width], SUBSPACE_DOCS[name]) for name, width in standard_subspaces(d=2, k=3)]
    assert table == expected


def test_quickstart_commands_are_the_ci_commands():
    """.ci/run runs the README's set-up step by step: each step a line of it, a `pip install ARGS` through uv's pip
    interface (`"${PIP[@]}" install -q [options] ARGS`, pip where uv cannot be had) with the same ARGS."""
    ci = (ROOT / ".ci" / "run").read_text()
    setup = re.search(r"```bash\n(python3 -m venv .*?)\n```", README).group(1)
    for part in setup.split(" && "):
        step = part.strip()
        if step.startswith("pip install "):
            args = re.escape(step.removeprefix("pip install "))
            line = rf'^"\$\{{PIP\[@\]\}}" install -q (\S+ )*{args}$'
        else:
            line = rf"^{re.escape(step)}$"
        assert re.search(line, ci, flags=re.M), step


def test_the_test_command_is_the_ci_command_in_two_workers():
    """The README's command for every test, and docs/contributing.md's, are the line .ci/run runs: in two
    pytest-xdist workers (-n 2), one per core of the 2-core machines the suite's time is measured on."""
    ci = (ROOT / ".ci" / "run").read_text()
    everything = re.compile(r"^(python -m pytest [^#\n]*?)\s+# every", flags=re.M)
    commands = {page: everything.search((ROOT / page).read_text()).group(1)
                for page in ("README.md", "docs/contributing.md")}
    assert commands["README.md"] == commands["docs/contributing.md"], commands
    assert re.search(rf"^{re.escape(commands['README.md'])}$", ci, flags=re.M), (commands, "not a line of .ci/run")
    assert re.search(r"(^| )-n 2( |$)", commands["README.md"]), commands
