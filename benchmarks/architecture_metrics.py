"""The shape of circuits/ and analysis/, measured (issue 24's before/after figures, docs/contributing.md):

    python benchmarks/architecture_metrics.py [--root DIR] [--no-duplicates]

- import arrows between packages: the nodes are circuits/ and analysis/ themselves (their ``__init__``), each of
  their subpackages (``analysis/verify/`` with everything below it) and each of their top-level modules
  (``analysis/pipeline.py``); an arrow is a distinct node -> node pair with at least one import, a lazy one inside a
  function included;
- modules per package: the files of each top-level package and subpackage;
- the 15 longest functions (methods and nested functions too; lines from ``def`` to the last line of the body);
- how many functions take more than 7 parameters (``self`` and ``cls`` not counted, ``*args``/``**kwargs`` not
  counted) and how many are longer than 60 lines;
- the pairs ``duplicates --most 200`` lists for the whole tree (skipped where that command is missing).

Standard library only (ast): it reads the files, imports nothing of the project, and may be pointed at any checkout
or export of the repository with ``--root``.
"""

from __future__ import annotations

import argparse
import ast
import re
import shutil
import subprocess
from collections import Counter
from pathlib import Path

PACKAGES = ("circuits", "analysis")
LONGEST = 15
MAX_PARAMETERS = 7
MAX_LINES = 60


def modules(root: Path) -> dict[str, Path]:
    """Every module of the packages by dotted name (a package by its ``__init__``'s name)."""
    out = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def node(name: str) -> str:
    """The node a module belongs to: its top-level package, a subpackage of it, or a top-level module of it."""
    return ".".join(name.split(".")[:2])


def imported(name: str, path: Path, known: set[str]) -> set[str]:
    """The project modules ``name`` imports anywhere in its code (function bodies included), resolved to modules."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for stmt in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(stmt, ast.Import):
            targets = [alias.name for alias in stmt.names]
        elif isinstance(stmt, ast.ImportFrom):
            base = stmt.module or ""
            if stmt.level:
                anchor = package.split(".")[:len(package.split(".")) - (stmt.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            # `from analysis import pipeline` imports the module analysis.pipeline; `from x import f`, module x.
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in stmt.names]
        else:
            continue
        for target in targets:
            while target and target not in known:  # `import analysis.verify.procedure.x` -> the longest module
                target = target.rpartition(".")[0]
            if target:
                found.add(target)
    return found


def arrows(root: Path) -> set[tuple[str, str]]:
    known = modules(root)
    return {(node(name), node(target)) for name, path in known.items()
            for target in imported(name, path, set(known)) if node(name) != node(target)}


def functions(root: Path) -> list[tuple[str, str, int, int]]:
    """(file, qualified name, lines, parameters) of every function and method of the packages."""
    out = []

    def visit(tree: ast.AST, prefix: str, file: str) -> None:
        for child in ast.iter_child_nodes(tree):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                args = child.args
                names = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]
                params = len([n for n in names if n not in ("self", "cls")])
                out.append((file, prefix + child.name, child.end_lineno - child.lineno + 1, params))
                visit(child, f"{prefix}{child.name}.", file)
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.", file)
            else:
                visit(child, prefix, file)

    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            visit(ast.parse(path.read_text(), str(path)), "", str(path.relative_to(root)))
    return out


def duplicate_pairs(root: Path) -> str:
    """``duplicates --most 200``'s rows for the tree, counted, with its own summary line."""
    if shutil.which("duplicates") is None:
        return "skipped (no `duplicates` command)"
    res = subprocess.run(["duplicates", "--most", "200", "--repo", str(root)], capture_output=True, text=True,
                         timeout=600)
    rows = [line for line in res.stdout.splitlines() if re.match(r"D\d+ ", line)]
    more = re.search(r"\(\+(\d+) more pairs\)", res.stdout)
    first = res.stdout.splitlines()[0] if res.stdout else res.stderr.strip()
    return f"{len(rows) + (int(more.group(1)) if more else 0)} pairs ({first})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1])
    parser.add_argument("--arrows", action="store_true", help="list every arrow, not only their number")
    parser.add_argument("--no-duplicates", action="store_true", help="skip the duplicates count")
    options = parser.parse_args()
    root = options.root.resolve()

    edges = arrows(root)
    print(f"import arrows between packages: {len(edges)} between {len({n for edge in edges for n in edge})} nodes")
    for a, b in sorted(edges) if options.arrows else ():
        print(f"  {a} -> {b}")
    per = Counter(".".join(path.parent.relative_to(root).parts) for path in modules(root).values())
    print(f"modules per package ({len(per)} packages):",
          ", ".join(f"{name} {count}" for name, count in sorted(per.items())))
    funcs = functions(root)
    print(f"the {LONGEST} longest functions:")
    for file, name, lines, _ in sorted(funcs, key=lambda f: (-f[2], f[0], f[1]))[:LONGEST]:
        print(f"  {file}:{name}:{lines}")
    print(f"functions with more than {MAX_PARAMETERS} parameters: "
          f"{sum(1 for *_, params in funcs if params > MAX_PARAMETERS)}")
    print(f"functions longer than {MAX_LINES} lines: {sum(1 for _, _, lines, _ in funcs if lines > MAX_LINES)}")
    if not options.no_duplicates:
        print("duplicates --most 200:", duplicate_pairs(root))


if __name__ == "__main__":
    main()
