"""The packages' shape (issues 38 and 64): no module of srpo_agents or srpo_envs imports,
even lazily, for annotations only or through a ``module:attr`` string, one that imports
it back; the stages (models, rollout, learning, running) import only earlier ones; and
each module imports by its one real path."""

import ast
import importlib
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


ENTRY_POINT = re.compile(r"^((?:srpo_agents|srpo_envs)(?:\.\w+)+):\w+$")
"""A ``module:attr`` string: imported by whoever loads it (a plug-in table, Gymnasium's
``entry_point``), so it is an import edge like any other."""


def import_graph(package: str, root: Path = ROOT) -> dict[str, set[str]]:
    """Module -> the package's modules it imports: at the top, inside functions, under
    ``if TYPE_CHECKING`` (a circle for annotations is still a circle for the reader) and
    through ``module:attr`` strings."""
    files = {".".join(p.relative_to(root).with_suffix("").parts).removesuffix(".__init__"): p
             for p in (root / package).rglob("*.py")}
    graph = {}
    for name, path in files.items():
        graph[name] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.ImportFrom) and node.module
                    and node.module.split(".")[0] == package):
                graph[name] |= {f"{node.module}.{a.name}" for a in node.names
                                if f"{node.module}.{a.name}" in files}
                graph[name] |= {node.module} & set(files)
            elif isinstance(node, ast.Import):
                graph[name] |= {a.name for a in node.names} & set(files)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                found = ENTRY_POINT.match(node.value)
                if found and found.group(1) in files:
                    graph[name].add(found.group(1))
        graph[name].discard(name)
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


@pytest.mark.parametrize("package", ["srpo_agents", "srpo_envs"])
def test_no_import_cycles(package):
    assert cycles(import_graph(package)) == []


def test_the_cycle_check_finds_a_cycle():
    """A control: two modules that import each other are reported."""
    assert cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]


def test_the_graph_sees_annotation_imports_and_entry_point_strings(tmp_path):
    """Controls: a circle closed only under ``if TYPE_CHECKING`` or only by a
    ``module:attr`` string (as ``config.py`` <-> ``rollout/envs.py`` and ``policy.py`` <->
    ``sources.py`` were) is still found."""
    package = tmp_path / "srpo_envs"
    package.mkdir()
    (package / "a.py").write_text("from srpo_envs.b import thing\n")
    (package / "b.py").write_text("from typing import TYPE_CHECKING\n"
                                  "if TYPE_CHECKING:\n    from srpo_envs.a import x\n")
    (package / "c.py").write_text("import srpo_envs.d\n")
    (package / "d.py").write_text('PLUGIN = "srpo_envs.c:Source"\n')
    assert sorted(cycles(import_graph("srpo_envs", tmp_path))) == [
        ["srpo_envs.a", "srpo_envs.b"], ["srpo_envs.c", "srpo_envs.d"]]


STAGES = ("models", "rollout", "learning", "running")


def stage_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in STAGES else None


def later_stage_imports(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    return sorted((a, b) for a, targets in graph.items() for b in targets
                  if stage_of(a) and stage_of(b)
                  and STAGES.index(stage_of(b)) > STAGES.index(stage_of(a)))


def test_stages_import_only_earlier_stages():
    """A newcomer reads the pipeline in order: nothing in ``models`` needs a rollout, and
    nothing before ``running`` needs the training loop."""
    assert later_stage_imports(import_graph("srpo_agents")) == []


def test_the_stage_check_finds_an_upward_import():
    graph = {"srpo_agents.models.policy": {"srpo_agents.running.train"},
             "srpo_agents.running.train": {"srpo_agents.models.policy"}}
    assert later_stage_imports(graph) == [("srpo_agents.models.policy",
                                           "srpo_agents.running.train")]


def test_modules_import_by_their_real_paths_only():
    """No import hook: ``srpo_agents.policy``, the flat path of before the stages, is not
    a module, and nothing of the package sits on ``sys.meta_path``."""
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("srpo_agents.policy")
    assert not [f for f in sys.meta_path if type(f).__module__.startswith("srpo")]
    from srpo_agents.rollout import RolloutEngine
    from srpo_agents.rollout.engine import RolloutEngine as engine_class
    assert RolloutEngine is engine_class
