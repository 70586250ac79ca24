"""The package's shape (issue 38): no module of srpo_agents imports, even lazily, one that
imports it back. Imports under ``if TYPE_CHECKING`` (annotations only) do not count."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def import_graph(package: str) -> dict[str, set[str]]:
    files = {".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): p
             for p in (ROOT / package).rglob("*.py")}
    graph = {}
    for name, path in files.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        typing_only = {node.lineno for block in ast.walk(tree) if isinstance(block, ast.If)
                       and getattr(block.test, "id", None) == "TYPE_CHECKING"
                       for node in ast.walk(block) if hasattr(node, "lineno")}
        graph[name] = set()
        for node in ast.walk(tree):
            if (isinstance(node, ast.ImportFrom) and node.module
                    and node.module.split(".")[0] == package and node.lineno not in typing_only):
                graph[name] |= {f"{node.module}.{a.name}" for a in node.names
                                if f"{node.module}.{a.name}" in files}
                graph[name] |= {node.module} & set(files)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, found = {}, {}, [], []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while not component or component[-1] != v:
                component.append(stack.pop())
            if len(component) > 1:
                found.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_srpo_agents_has_no_import_cycles():
    assert cycles(import_graph("srpo_agents")) == []


def test_the_cycle_check_finds_a_cycle():
    """A control: two modules that import each other are reported."""
    assert cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]
