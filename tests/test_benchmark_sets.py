"""Benchmark names resolve to the shared data files, and ``srpo eval --benchmarks`` gives
one row per benchmark plus their macro average."""

import json

import pytest

from srpo_agents.cli import main
from srpo_agents.config import TrainConfig
from srpo_agents.running.benchmark_sets import (
    benchmark_configs,
    format_benchmark_table,
    macro_average,
    resolve,
)
from srpo_agents.tiny import build_tiny_policy
from srpo_envs import registry

from .conftest import SHARED_DATA, shared_file


def _write_jsonl(path, records):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


@pytest.fixture()
def data_dir(tmp_path):
    """A data folder laid out like ../shared/data, with two tiny math sets."""
    root = tmp_path / "data"
    _write_jsonl(root / "math" / "aime24.jsonl",
                 [{"id": f"a{i}", "question": f"What is {i} + 1?", "answer": str(i + 1)}
                  for i in range(3)])
    _write_jsonl(root / "math" / "amc23.jsonl",
                 [{"id": f"b{i}", "question": f"What is {i} + 2?", "answer": str(i + 2)}
                  for i in range(2)])
    return root


def test_every_registered_benchmark_exists_in_the_shared_data():
    shared_file("SOURCES.md")
    for spec in registry.specs():
        env = spec.name
        for name, (questions, corpus) in spec.benchmarks.items():
            assert (SHARED_DATA / questions).is_file(), (env, name)
            assert corpus is None or (SHARED_DATA / corpus).is_file(), (env, name)
    resolved = resolve("SRPO-Search-v0", "all", SHARED_DATA)
    assert [name for name, *_ in resolved] == list(registry.get("SRPO-Search-v0").benchmarks)
    assert dict((n, c) for n, _, c in resolved)["hotpotqa"].name == "hotpotqa_dev_corpus.jsonl"


def test_resolve_names_paths_and_errors(data_dir, tmp_path):
    assert [(n, q.name) for n, q, _ in resolve("SRPO-Math-v0", "aime24, amc23", data_dir)] == [
        ("aime24", "aime24.jsonl"), ("amc23", "amc23.jsonl")]
    own = tmp_path / "mine.jsonl"
    _write_jsonl(own, [{"question": "1+1?", "answer": "2"}])
    assert resolve("SRPO-Math-v0", str(own), data_dir) == [("mine", own, None)]
    with pytest.raises(ValueError, match="'gsm9k' is not a SRPO-Math-v0 benchmark"):
        resolve("SRPO-Math-v0", "gsm9k", data_dir)
    with pytest.raises(ValueError, match="benchmarks=' , '"):
        resolve("SRPO-Math-v0", " , ", data_dir)
    with pytest.raises(FileNotFoundError, match="math500.jsonl not found .*SRPO_DATA_DIR"):
        resolve("SRPO-Math-v0", "math500", data_dir)


def test_open_domain_search_sets_need_a_retriever_or_corpus(tmp_path):
    root = tmp_path / "data"
    _write_jsonl(root / "search" / "nq_open_test.jsonl",
                 [{"question": "who?", "answers": ["x"]}])
    config = TrainConfig(env="SRPO-Search-v0", workflow="single", model="x")
    with pytest.raises(ValueError, match="'nq' has no corpus of its own"):
        benchmark_configs(config, "nq", root)
    remote = TrainConfig(env="SRPO-Search-v0", workflow="single", model="x",
                         retriever="http://127.0.0.1:8000/retrieve")
    [(name, bench)] = benchmark_configs(remote, "nq", root)
    assert name == "nq" and bench.corpus is None
    assert bench.eval_dataset == str(root / "search" / "nq_open_test.jsonl")


def test_macro_average_and_table():
    results = {name: {"k": 2, "tasks": 3, "avg_at_k": a, "avg_at_k_stderr": 0.1,
                      "pass_at_k": p, "pass_at_k_stderr": 0.1, "tokens_per_task": t,
                      "tool_calls_per_task": 0.0}
               for name, a, p, t in (("x", 0.2, 0.5, 10.0), ("y", 0.4, 0.7, 30.0))}
    assert macro_average(results) == pytest.approx(
        {"avg_at_k": 0.3, "pass_at_k": 0.6, "tokens_per_task": 20.0, "tool_calls_per_task": 0})
    table = format_benchmark_table(results)
    assert "| x | 3 | 0.200 ± 0.100 | 0.500 ± 0.100 |" in table
    assert "| macro average | | 0.300 | 0.600 | 20.0 |" in table


def test_srpo_eval_reports_each_benchmark(data_dir, tmp_path, capsys):
    model = tmp_path / "tiny"
    build_tiny_policy(["What is 1 + 1? 2"], model, hidden_size=32, num_layers=1, num_heads=2)
    out = tmp_path / "eval.json"
    assert main(["eval", "--checkpoint", str(model), "--env", "SRPO-Math-v0", "--workflow",
                 "single", "--compact-prompts", "--k", "2", "--tasks", "10",
                 "--max-new-tokens", "8", "--benchmarks", "aime24,amc23",
                 "--data-dir", str(data_dir), "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "| aime24 | 3 |" in printed and "| amc23 | 2 |" in printed
    assert "| macro average |" in printed
    saved = json.loads(out.read_text())
    assert [saved["benchmarks"][n]["tasks"] for n in ("aime24", "amc23")] == [3, 2]
    expected = (saved["benchmarks"]["aime24"]["avg_at_k"]
                + saved["benchmarks"]["amc23"]["avg_at_k"]) / 2
    assert saved["macro_average"]["avg_at_k"] == pytest.approx(expected)
    assert main(["eval", "--checkpoint", str(model), "--env", "SRPO-Math-v0",
                 "--benchmarks", "nope", "--data-dir", str(data_dir)]) == 2
    assert "'nope' is not a SRPO-Math-v0 benchmark" in capsys.readouterr().err
