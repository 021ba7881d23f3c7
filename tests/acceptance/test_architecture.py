"""The shape of the code, checked: no import cycle, no oversized module, the dependency direction, one home for
TransformerLens hook names.

Import edges include function-level imports: a cycle hidden inside a function is still a cycle.
"""

from __future__ import annotations

import ast
import io
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("circuits", "analysis")
MAX_LINES = 450


def modules() -> dict[str, Path]:
    out = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            out[name.removesuffix(".__init__")] = path
    return out


def import_graph() -> dict[str, set[str]]:
    mods = modules()
    graph: dict[str, set[str]] = {name: set() for name in mods}
    for name, path in mods.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(parts + ([base] if base else []))
                for alias in node.names:
                    target = f"{base}.{alias.name}"
                    if target in mods:
                        graph[name].add(target)
                    elif base in mods:
                        graph[name].add(base)
            elif isinstance(node, ast.Import):
                graph[name].update(alias.name for alias in node.names if alias.name in mods)
        graph[name].discard(name)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, found, counter = {}, {}, [], set(), [], [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles():
    assert cycles(import_graph()) == []


def test_circuits_never_imports_analysis():
    """Models do not know who looks at them (docs/extending.md)."""
    wrong = {name: sorted(t for t in targets if t.startswith("analysis"))
             for name, targets in import_graph().items() if name.startswith("circuits")}
    assert {name: t for name, t in wrong.items() if t} == {}


@pytest.mark.parametrize("name", sorted(modules()))
def test_no_module_above_the_size_limit(name):
    lines = modules()[name].read_text().count("\n")
    assert lines <= MAX_LINES, f"{name} has {lines} lines"


def test_no_module_imports_a_private_name_of_another():
    """A leading underscore means "this module's own": another module that needs the name needs a public one (as
    ``circuits.structured.groups.hash_direction`` became, when the structured path became a package)."""
    found = []
    for name, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in PACKAGES:
                found += [f"{name}:{node.lineno}: {node.module}.{alias.name}" for alias in node.names
                          if alias.name.startswith("_") and not alias.name.startswith("__")]
    assert found == []


def test_no_split_left_a_reexport():
    """No ``from m import name  # noqa: F401``: a name that moved is imported from the module that defines it, and a
    package's surface is what its ``__init__`` imports and lists in ``__all__`` (no noqa needed there)."""
    found = []
    for name, path in modules().items():
        source = path.read_text()
        imports = {line for node in ast.walk(ast.parse(source)) if isinstance(node, ast.ImportFrom)
                   for line in range(node.lineno, node.end_lineno + 1)}
        found += [f"{name}:{tok.start[0]}" for tok in tokenize.generate_tokens(io.StringIO(source).readline)
                  if tok.type == tokenize.COMMENT and "F401" in tok.string and tok.start[0] in imports]
    assert found == []


def test_hook_names_are_spelled_in_one_module():
    """TransformerLens hook-name strings live in circuits/hook_names.py, so a move to TransformerLens 4 is one file."""
    spelled = []
    for name, path in modules().items():
        if name == "circuits.hook_names":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and (
                    node.value.startswith("blocks.") or ".hook_" in node.value or node.value.startswith("hook_")):
                spelled.append(f"{name}:{node.lineno}: {node.value!r}")
    assert spelled == []


def test_imports_run_from_the_command_line_down_to_the_measurements():
    """``analysis.cli`` sits on top and ``analysis.report`` under it; the packages that measure (verify, evaluation,
    drift, patching, sweep, discovery, the constructions, the estimator) never import either, except the page builder
    ``analysis.report.document`` that their own pages use. Evaluation and drift measure models, patching intervenes
    on them: neither of the first two imports the third."""
    graph = import_graph()

    def under(name: str, package: str) -> bool:
        return name == package or name.startswith(package + ".")

    upward = sorted(
        f"{name} -> {target}" for name, targets in graph.items() for target in targets
        if (under(target, "analysis.cli") and not under(name, "analysis.cli"))
        or (under(target, "analysis.report") and target != "analysis.report.document"
            and not (under(name, "analysis.cli") or under(name, "analysis.report")))
        or (under(target, "analysis.patching")
            and (under(name, "analysis.evaluation") or under(name, "analysis.drift"))))
    assert upward == []


#: Where a registered name may be compared with a string: the declarations themselves (a variant's module, a
#: construction's module and its circuits' packages, which name their own candidates), and two names that only
#: share a spelling with a variant or a construction.
NAME_TESTS_ALLOWED = ("circuits.variants.", "circuits.swap.", "circuits.learned.", "analysis.constructions.",
                      "analysis.drift.learned",  # the learned construction's candidate "learned", left out in ablation
                      "circuits.problems")  # the noise family "gumbel" of the tasks, not the variant


def test_nothing_dispatches_on_a_variant_or_a_construction_name():
    """Variants and constructions are declared once (:class:`circuits.spec.VariantSpec`,
    :class:`analysis.constructions.spec.ConstructionSpec`): elsewhere a property is read from the declaration, never
    from ``variant == "lloyd"`` or ``name == "swap"``."""
    from analysis.constructions import CONSTRUCTIONS
    from circuits.variants import REGISTERED

    names = {variant.name for variant in REGISTERED} | set(CONSTRUCTIONS)

    def strings(node) -> list[str]:
        elements = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
        return [e.value for e in elements if isinstance(e, ast.Constant) and isinstance(e.value, str)]

    found = []
    for name, path in modules().items():
        if name.startswith(NAME_TESTS_ALLOWED):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Compare) and any(isinstance(op, (ast.Eq, ast.NotEq, ast.In, ast.NotIn))
                                                     for op in node.ops):
                named = {s for side in (node.left, *node.comparators) for s in strings(side)} & names
                found += [f"{name}:{node.lineno}: {ast.unparse(node)}"] if named else []
    assert found == []
