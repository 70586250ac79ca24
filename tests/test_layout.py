"""The package's shape (issue 38): no module of srpo_agents imports, even lazily, one that
imports it back; the stages (models, rollout, learning, running) import only earlier
ones; and the module paths from before the stages were grouped still import. Imports
under ``if TYPE_CHECKING`` (annotations only) do not count."""

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import srpo_agents

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


def test_old_module_paths_are_the_moved_modules():
    """``srpo_agents.policy`` (as the docs and older code import it) is the very module
    ``srpo_agents.models.policy``, so a monkeypatch through either path patches both."""
    for old, new in srpo_agents.MOVED.items():
        assert (importlib.import_module(f"srpo_agents.{old}")
                is importlib.import_module(f"srpo_agents.{new}")), old
    policy = importlib.import_module("srpo_agents.policy")
    assert policy.__spec__.name == "srpo_agents.models.policy"
    from srpo_agents.rollout import RolloutEngine
    from srpo_agents.rollout.engine import RolloutEngine as engine_class
    assert RolloutEngine is engine_class


def test_an_old_path_runs_with_python_dash_m():
    done = subprocess.run([sys.executable, "-m", "srpo_agents.demo", "--help"],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "make demo" in done.stdout
