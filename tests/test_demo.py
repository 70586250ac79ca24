"""``make demo`` (``srpo_agents.running.demo``): its start point, what it prints, and that the
committed five-seed table was made with the setting it runs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from srpo_agents.config import same_settings
from srpo_agents.running import demo
from srpo_agents.tiny.source import tiny_config, warm_start_status
from tests.scripts import bench_module

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results"


def test_committed_start_point_matches_the_code():
    """The demo starts from the committed warm start only while its key matches what the
    code would build; a change to the search env, its prompts or the recipe fails here
    (rebuild it: ``python benchmarks/learning/search_track.py --workflows search_answer_verify``)
    instead of making every ``make demo`` rebuild it for 25 minutes."""
    status = warm_start_status(demo.start_config(demo.COMMITTED_START), demo.COMMITTED_START)
    assert status["cached"], f"committed start point is stale; changed: {status['changed']}"


@pytest.mark.parametrize("damage", ["changed", "missing"])
def test_start_point_rebuilt_with_the_reason(damage, tmp_path, monkeypatch):
    """A stale or missing start point is rebuilt (once) elsewhere, never in the committed
    folder, after a message that says why and how long it takes."""
    committed = tmp_path / "committed"
    if damage == "changed":
        shutil.copytree(demo.COMMITTED_START, committed)
        meta_path = committed / "warmstart" / "warmstart.json"
        meta = json.loads(meta_path.read_text())
        meta["settings"]["steps"] += 1
        meta_path.write_text(json.dumps(meta))
    built = []

    def fake_build(config, run_dir, log):
        built.append((tiny_config(config).warmstart_dir, config.seed, Path(run_dir)))
        return None, {}

    monkeypatch.setattr(demo, "prepare_policy", fake_build)
    lines = []
    rebuild = tmp_path / "rebuilt"
    model = demo.ensure_start(rebuild, lines.append, committed=committed)
    said = "\n".join(lines)
    assert model == rebuild / "warmstart"
    assert built == [(str(rebuild), 0, rebuild)]
    assert ("changed: steps" if damage == "changed" else "missing") in said
    assert "took 23 min on 2 cores" in said   # the committed build's 1401 s
    if damage == "changed":  # the committed folder is left as it was
        assert json.loads(meta_path.read_text())["settings"]["steps"] == meta["settings"]["steps"]


def test_start_point_rebuilt_earlier_is_reused(tmp_path, monkeypatch):
    rebuild = tmp_path / "rebuilt"
    shutil.copytree(demo.COMMITTED_START, rebuild)
    monkeypatch.setattr(demo, "prepare_policy", lambda *a: pytest.fail("rebuilt again"))
    lines = []
    assert demo.ensure_start(rebuild, lines.append, committed=tmp_path / "gone") == \
        rebuild / "warmstart"
    assert "rebuilt earlier" in lines[0]


def _small_run(monkeypatch) -> None:
    for key, value in dict(group_size=2, tasks_per_step=2, eval_tasks=3, eval_k=2,
                           minibatch_episodes=1, curve_tasks=2).items():
        monkeypatch.setitem(demo.DEMO, key, value)
    monkeypatch.setattr(demo, "SHOW_TASKS", 3)


def test_demo_still_works_when_its_start_point_is_stale(tmp_path, monkeypatch, capsys):
    """A start-point recipe that no longer matches the committed build (here: a 2-step
    warm start) is really rebuilt, next to the run, and the demo goes on from it."""
    small = dict(warmstart_steps=2, warmstart_first_steps=0, warmstart_first_target=1.0,
                 warmstart_first_roles=(), warmstart_focus_steps=0,
                 warmstart_focus_target=1.0, warmstart_focus_roles=(),
                 warmstart_episodes=40, warmstart_eval_tasks=2)
    monkeypatch.setattr(demo, "START", {**demo.START, **small})
    _small_run(monkeypatch)
    demo.main(["--out", str(tmp_path / "demo"), "--steps", "1"])
    printed = capsys.readouterr().out
    assert "its key no longer matches the code (changed: " in printed
    assert f"Rebuilding it in {tmp_path / 'demo-start'}" in printed
    summary = json.loads((tmp_path / "demo" / "summary.json").read_text())
    assert summary["config"]["model"] == str(tmp_path / "demo-start" / "warmstart")
    assert (tmp_path / "demo-start" / "warmstart" / "warmstart.json").is_file()
    assert "| after - before, paired by task | avg@2" in printed


def test_demo_end_to_end_on_a_small_budget(tmp_path, monkeypatch, capsys):
    """The whole demo from the committed start point, 2 steps of 2 questions: the team's
    active sets, the before/after table with the paired difference, the verdict, the
    set ratios, one question side by side and the learning curve."""
    _small_run(monkeypatch)
    demo.main(["--out", str(tmp_path / "demo"), "--steps", "2"])
    printed = capsys.readouterr().out
    assert "(committed; its key matches)" in printed
    for event in ("search", "answer", "verify"):
        assert f"| {event} | " in printed
    assert "| after - before, paired by task | avg@2" in printed
    assert "Verdict: " in printed and "the demo's bar (>= +0.05 and >= 3 SE)" in printed
    assert "set ratio on the start policy's actions above: search " in printed
    assert "before training" in printed and "after training" in printed
    assert (tmp_path / "demo" / "learning_curve.png").is_file()
    summary = json.loads((tmp_path / "demo" / "summary.json").read_text())
    assert summary["config"]["workflow"] == "search_answer_verify"
    assert summary["config"]["model"] == str(demo.COMMITTED_START / "warmstart")
    assert summary["config"]["eval_every"] == 1 and summary["difference"]["tasks"] == 3


def test_verdict_line_applies_both_parts_of_the_bar():
    line = demo.verdict_line({"avg_at_k": 0.06, "avg_at_k_stderr": 0.01, "avg_at_k_z": 6.0}, 4)
    assert line.startswith("Verdict: LEARNED")
    small = demo.verdict_line({"avg_at_k": 0.04, "avg_at_k_stderr": 0.005,
                               "avg_at_k_z": 8.0}, 4)
    noisy = demo.verdict_line({"avg_at_k": 0.08, "avg_at_k_stderr": 0.03,
                               "avg_at_k_z": 2.7}, 4)
    assert "below the bar" in small and "below the bar" in noisy


def test_five_seed_table_ran_the_demo_setting():
    """benchmarks/results/demo_seeds.json holds runs of exactly the setting the demo
    runs now (chosen on seeds 10 and up before seeds 0-4 ran, not changed after)."""
    path = RESULTS / "demo_seeds.json"
    runs = json.loads(path.read_text())
    assert sorted(runs["seeds"], key=int) == ["0", "1", "2", "3", "4"]
    for seed, run in runs["seeds"].items():
        expected = demo.demo_config(run["config"]["out"], int(seed),
                                    model=run["config"]["model"])
        assert same_settings(run["config"], expected, ignore=()), seed
        assert run["config"]["model"].endswith(
            "warmstarts/SRPO-Search-v0-search_answer_verify/warmstart")


def test_a_seed_whose_folder_is_gone_is_read_from_its_record_only_if_it_ran_the_setting(
        tmp_path):
    """demo_seeds --recorded: a new checkout has no runs/, so a finished table's seeds
    are read from its own demo_seeds.json, but a record of another setting is refused."""
    seeds = bench_module("demo_seeds", "learning")
    committed = json.loads((RESULTS / "demo_seeds.json").read_text())
    path = tmp_path / "old.json"
    path.write_text(json.dumps(committed))
    assert seeds.recorded_run(str(path), 3) == committed["seeds"]["3"]
    assert seeds.recorded_run(str(path), 9) is None and seeds.recorded_run(None, 3) is None
    committed["seeds"]["3"]["config"]["lr"] *= 2
    path.write_text(json.dumps(committed))
    assert seeds.recorded_run(str(path), 3) is None
