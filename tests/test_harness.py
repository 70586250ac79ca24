"""The comparison harness's smoke preset runs end to end and writes its files."""

import json
import sys
from pathlib import Path

import pytest

from srpo_agents.config import TrainConfig

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from harness import PRESETS, run_preset  # noqa: E402


def test_smoke_preset_writes_results_table_and_plots(tmp_path, monkeypatch):
    monkeypatch.setenv("SRPO_CACHE_DIR", str(tmp_path / "cache"))
    rows = run_preset("smoke", tmp_path, log=lambda *_: None)
    preset = PRESETS["smoke"]
    runs = len(preset["pairs"]) * len(preset["algos"]) * len(preset["seeds"])
    assert len(rows) == 2 * runs
    lines = (tmp_path / "results.jsonl").read_text().splitlines()
    assert [json.loads(x) for x in lines] == rows
    required = {"env", "workflow", "algo", "seed", "checkpoint", "avg_at_k", "pass_at_k", "k",
                "tokens_per_task", "tool_calls_per_task", "correct_per_million_tokens",
                "grad_norm_cv", "mean_set_size", "events_dropped", "train_tokens"}
    for row in rows:
        assert required <= set(row)
        assert 0 <= row["avg_at_k"] <= row["pass_at_k"] <= 1
    # identical budget: every run generated from the same number of episodes
    assert len({(r["steps"]) for r in rows}) == 1
    befores = {r["algo"]: r["avg_at_k"] for r in rows if r["checkpoint"] == "before"}
    assert len(set(befores.values())) == 1  # the same starting policy, tasks and seed
    table = (tmp_path / "table.md").read_text()
    assert all(f"| {a} |" in table for a in preset["algos"]) and "Macro average" in table
    for png in ("learning_curves.png", "accuracy_vs_tokens.png"):
        assert (tmp_path / png).stat().st_size > 1000


def test_benchmark_files_get_a_row_per_start_and_algorithm(tmp_path, monkeypatch):
    """The paper preset's path: the start and every trained run are also evaluated on
    each benchmark file, and the table gets a per-benchmark section."""
    for name, offset in (("setA", 1), ("setB", 2)):
        (tmp_path / f"{name}.jsonl").write_text("".join(
            json.dumps({"question": f"What is {i} + {offset}?", "answer": str(i + offset)}) + "\n"
            for i in range(3)))
    names = f"{tmp_path / 'setA.jsonl'},{tmp_path / 'setB.jsonl'}"
    monkeypatch.setitem(PRESETS, "bench", {**PRESETS["smoke"], "benchmark_tasks": 2,
                                           "benchmarks": {"SRPO-Math-v0": names}})
    monkeypatch.setenv("SRPO_CACHE_DIR", str(tmp_path / "cache"))
    rows = run_preset("bench", tmp_path / "out", log=lambda *_: None)
    assert len(rows) == 2 * len(PRESETS["smoke"]["algos"])
    for row in rows:
        assert set(row["benchmarks"]) == {"setA", "setB"}
        assert all(r["tasks"] == 2 and r["k"] == 2 for r in row["benchmarks"].values())
    table = (tmp_path / "out" / "table.md").read_text()
    assert "| workflow | algo | setA | setB | macro |" in table
    assert "| parallel | start |" in table and "| parallel | srpo |" in table


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_builds_valid_configs(name):
    """Each preset's settings pass TrainConfig's checks for every pair (the paper preset
    cannot run here: it needs a GPU, vLLM and a retrieval server)."""
    preset = PRESETS[name]
    for env, workflow in preset["pairs"]:
        settings = {**preset["base"], **preset.get("overrides", {}).get(env, {})}
        for algo in preset["algos"]:
            config = TrainConfig(env=env, workflow=workflow, algo=algo, **settings)
            assert config.algo == algo
        for key in ("dataset", "eval_dataset"):
            if key in settings and not Path(settings[key]).is_file():
                pytest.skip(f"{settings[key]} is absent (../shared/data)")
        if env in preset.get("benchmarks", {}):
            from srpo_agents.benchmark_sets import benchmark_configs

            try:
                assert benchmark_configs(config, preset["benchmarks"][env])
            except FileNotFoundError as missing:
                pytest.skip(str(missing))
