"""The README stays true: its Python example runs, and its layout table matches the code."""

import re
from pathlib import Path

from circuits.layout import SUBSPACE_DOCS, standard_subspaces

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()


def test_python_example_runs(capsys):
    blocks = re.findall(r"```python\n(.*?)```", README, flags=re.S)
    assert blocks, "the README has a Python example"
    for code in blocks:
        exec(compile(code, "README.md", "exec"), {"__name__": "readme"})
    out = capsys.readouterr().out
    assert "True" in out and "VERIFIED" in out


def test_layout_table_matches_the_code():
    rows = re.findall(r"^\| (\w+) \| (\w+) \| (.+?) \|$", README, flags=re.M)
    table = [(name, width, holds.replace("\\|", "|")) for name, width, holds in rows if name != "subspace"]
    symbol = {2: "d", 3: "k", 1: "1"}
    expected = [(name, symbol[width], SUBSPACE_DOCS[name]) for name, width in standard_subspaces(d=2, k=3)]
    assert table == expected


def test_quickstart_commands_are_the_ci_commands():
    ci = (Path(__file__).resolve().parents[1] / ".ci" / "run").read_text()
    setup = re.search(r"```bash\n(python3 -m venv .*?)\n```", README).group(1)
    for part in setup.split(" && "):
        assert part.strip() in ci, part
    assert "python -m pytest -q" in README and "python -m pytest -q" in ci
