"""The comparison harness's smoke preset runs end to end and writes its files."""

import json
import sys
from pathlib import Path

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
