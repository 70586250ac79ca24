"""The comparison harness's smoke preset runs end to end and writes its files."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from srpo_agents.config import TrainConfig
from srpo_agents.running.metrics_log import read_metrics_rows
from srpo_agents.tiny.config import tiny_run
from srpo_bench.harness import (
    PRESETS,
    claim_run,
    pair_settings,
    route_k_by_level,
    route_level_lines,
    run_job,
    run_preset,
    warm_start_plan,
)


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
                "grad_norm_cv", "mean_set_size", "events_dropped", "train_tokens",
                "optimizer_steps", "grad_clipped", "n_agents"}
    for row in rows:
        assert required <= set(row)
        assert 0 <= row["avg_at_k"] <= row["pass_at_k"] <= 1
        assert 0.0 <= row["grad_clipped"] <= 1.0 and row["n_agents"] == 2
    # equal steps by construction (issue 60): every algorithm the same optimizer steps
    assert len({r["optimizer_steps"] for r in rows}) == 1 and rows[0]["optimizer_steps"] > 0
    # identical budget: every run trained all its steps, each on the same number of
    # events (tasks x G episodes; every math-parallel episode is a solver set and an
    # aggregator), read from the runs' own metrics.jsonl
    events = [[step["events"] for step in read_metrics_rows(path)]
              for path in sorted((tmp_path / "runs").glob("*/metrics.jsonl"))]
    assert len(events) == runs
    assert all(len(run) == preset["base"]["steps"] for run in events)
    assert len({tuple(run) for run in events}) == 1 and events[0][0] > 0
    befores = {r["algo"]: r["avg_at_k"] for r in rows if r["checkpoint"] == "before"}
    assert len(set(befores.values())) == 1  # the same starting policy, tasks and seed
    table = (tmp_path / "table.md").read_text()
    assert all(f"| {a} |" in table for a in preset["algos"]) and "Macro average" in table
    assert "| optimizer steps | clipped |" in table
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
    for env, label in preset["pairs"]:
        workflow, settings, warm = pair_settings(preset, env, label)
        # a warm pair is run, or at least has settings of its own to build it from
        assert (env, warm) in preset["pairs"] or (env, warm) in preset.get("variants", {})
        # TrainConfig checks that its files exist: skip with the reason before it does
        for key in ("dataset", "eval_dataset", "corpus"):
            if settings.get(key) and not Path(settings[key]).is_file():
                pytest.skip(f"{settings[key]} is absent (../shared/data)")
        for algo in preset["algos"]:
            config = TrainConfig(**tiny_run(settings, env=env, workflow=workflow, algo=algo))
            assert config.algo == algo
            # the workflow exists and the env accepts the settings

            kwargs = config.env_kwargs("test")
            assert kwargs["workflow"] == workflow
        for key in ("dataset", "eval_dataset"):
            if key in settings and not Path(settings[key]).is_file():
                pytest.skip(f"{settings[key]} is absent (../shared/data)")
        if env in preset.get("benchmarks", {}):
            from srpo_agents.running.benchmark_sets import benchmark_configs

            try:
                assert benchmark_configs(config, preset["benchmarks"][env])
            except FileNotFoundError as missing:
                pytest.skip(str(missing))


def test_routed_pairs_with_fixed_k_references_share_a_start_and_report_routes(tmp_path,
                                                                            monkeypatch):
    """A routing preset in miniature: the routed pair and its fixed-K references start
    from one policy (one warm-start folder), run the same budget, and the table gets the
    routing section with the routes by level."""
    monkeypatch.setitem(PRESETS, "route-smoke", {
        "pairs": [("SRPO-Math-v0", "routed"), ("SRPO-Math-v0", "K=1"),
                  ("SRPO-Math-v0", "K=2")],
        "algos": ["srpo"], "seeds": [0],
        "base": dict(model="fresh-tiny", steps=2, group_size=2, tasks_per_step=2,
                     eval_tasks=4, eval_k=2, max_new_tokens=12, n_agents=2,
                     difficulty=(0, 1)),
        "variants": {("SRPO-Math-v0", "K=1"): dict(workflow="single"),
                     ("SRPO-Math-v0", "K=2"): dict(workflow="parallel")}})
    monkeypatch.setenv("SRPO_CACHE_DIR", str(tmp_path / "cache"))
    rows = run_preset("route-smoke", tmp_path, log=lambda *_: None)
    assert sorted({r["workflow"] for r in rows}) == ["K=1", "K=2", "routed"]
    assert len({r["steps"] for r in rows}) == 1
    routed = [r for r in rows if r["workflow"] == "routed"]
    assert all("routing" in r for r in routed)
    assert not any("routing" in r for r in rows if r["workflow"] != "routed")
    after = next(r for r in routed if r["checkpoint"] == "after")
    assert sum(after["routing"]["route_k_counts"].values()) == 4 * 2
    assert set(after["routing"]["by_level"]) <= {"0", "1"}
    assert set(after["routing"]["level_accuracy"]) == set(after["routing"]["by_level"])
    assert sum(v["episodes"] for v in after["routing"]["level_accuracy"].values()) == 4 * 2
    table = (tmp_path / "table.md").read_text()
    assert "Routing on the held-out tasks" in table and "| SRPO-Math-v0 | routed | srpo |" in table
    assert (tmp_path / "routing_set_size.png").stat().st_size > 1000


def _routed_row(by_level: dict, episodes: dict, k: int = 2) -> dict:
    return {"k": k, "routing": {"by_level": by_level, "level_accuracy": {
        level: {"episodes": n, "accuracy": 0.5} for level, n in episodes.items()}}}


def test_route_k_by_level_and_the_call_on_harder_tasks():
    """Mean K per hop count with its standard error over tasks (a task's k episodes count
    as one observation), by hand: 1-hop routes K=1 three times and K=2 once over 2 tasks
    (4 episodes, k=2): mean 1.25, event variance 0.75 / 3 = 0.25, se sqrt(0.25 / 2)."""
    row = _routed_row({"1": {"1": 3, "2": 1}, "3": {"2": 4}}, {"1": 4, "3": 4})
    by_level = route_k_by_level([row])
    assert by_level["1"]["mean_k"] == pytest.approx(1.25)
    assert by_level["1"]["tasks"] == 2
    assert by_level["1"]["se"] == pytest.approx(0.125 ** 0.5)
    assert by_level["3"] == {"mean_k": 2.0, "se": 0.0, "events": 4, "tasks": 2}
    # Two seeds: counts and tasks add up (variance 1.5 / 7 over 4 tasks).
    assert route_k_by_level([row, row])["1"]["se"] == pytest.approx((1.5 / 7 / 4) ** 0.5)
    routed = [(("SRPO-Search-v0", "routed"), [{**row, "algo": "srpo", "checkpoint": "after"}])]
    lines = "\n".join(route_level_lines(routed))
    assert "1-hop: 1.25 ± 0.35; 3-hop: 2.00 ± 0.00" in lines
    assert "+0.75 ± 0.35 | bigger teams" in lines
    flat = _routed_row({"1": {"1": 2, "2": 2}, "2": {"1": 2, "2": 2}}, {"1": 4, "2": 4})
    lines = "\n".join(route_level_lines([(("SRPO-Search-v0", "routed"),
                                          [{**flat, "algo": "srpo", "checkpoint": "after"}])]))
    assert "+0.00 ± " in lines and "no difference beyond noise" in lines
    one_level = _routed_row({"1": {"1": 4}}, {"1": 4})
    assert route_level_lines([(("SRPO-Search-v0", "routed"),
                               [{**one_level, "algo": "srpo", "checkpoint": "after"}])]) == []


@pytest.mark.parametrize(("name", "warm_pairs"), [
    ("search_pilot", ["search_answer_verify", "routed"]), ("search_sav", ["search_answer_verify"]),
    ("search_parallel", ["routed"]), ("routing", ["routed"]), ("fair", ["routed"]),
    ("fair_k5", ["routed"])])
def test_the_search_presets_reuse_the_track_s_warm_start(name, warm_pairs, tmp_path,
                                                         monkeypatch):
    """``benchmarks/learning/search_track.py`` builds the search track's warm starts once
    (about 55 minutes each); the search presets must find them cached, so their warm-start
    settings and key must be the very ones the script builds with."""
    import srpo_agents.tiny.warmstart as warmstart
    from srpo_agents.models.registry import prepare_policy
    from srpo_agents.running.search_recipe import RECIPE, WARM_ROOT, warm_folder
    from srpo_bench.search_track import track_config

    seen: list[dict] = []

    def capture(run_dir, make_train_env, make_eval_env, **kwargs):
        seen.append({"run_dir": str(run_dir), **kwargs, "log": None})
        raise RuntimeError("captured")

    monkeypatch.setattr(warmstart, "warm_start", capture)

    def warm_args(config: TrainConfig) -> dict:
        with pytest.raises(RuntimeError, match="captured"):
            prepare_policy(config, Path(config.out), print)
        return seen.pop()

    preset = {**PRESETS[name], "pairs": [p for p in PRESETS[name]["pairs"]
                                         if p[0] == "SRPO-Search-v0"]}
    starts, own, jobs = warm_start_plan(preset, tmp_path)
    assert own == [("SRPO-Search-v0", w) for w in warm_pairs]
    root = Path(WARM_ROOT)
    for pair, start in starts.items():
        assert Path(start).parent.parent == root, pair
    for (_, workflow), (job,) in zip(own, jobs, strict=True):
        folder = warm_folder(root, workflow)
        script = track_config(
            workflow, str(folder), RECIPE["warmstart_steps"], RECIPE["warmstart_minutes"], 0,
            first_steps=RECIPE["warmstart_first_steps"], top_k=RECIPE["top_k"],
            focus_steps=RECIPE["warmstart_focus_steps"],
            focus_target=RECIPE["warmstart_focus_target"],
            first_target=RECIPE["warmstart_first_target"], warmstart_dir=str(folder))
        assert warm_args(job) == warm_args(script), workflow
    assert seen == []


def test_a_seeds_filter_runs_only_those_seeds(tmp_path, monkeypatch):
    monkeypatch.setenv("SRPO_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setitem(PRESETS, "smoke", {**PRESETS["smoke"], "algos": ["srpo"],
                                           "seeds": [0, 1]})
    rows = run_preset("smoke", tmp_path, log=lambda *_: None, seeds=(1,))
    assert rows and {row["seed"] for row in rows} == {1}
    assert "--seeds 1" in (tmp_path / "table.md").read_text()


def test_the_cli_refuses_a_seed_the_preset_lacks():
    import subprocess

    harness = Path(__file__).resolve().parents[1] / "benchmarks/comparisons/harness.py"
    done = subprocess.run([sys.executable, str(harness), "--preset", "smoke", "--seeds", "7"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert "--seeds=[7]: expected seeds of the smoke preset, [0]" in done.stderr


def test_run_settings_change_the_runs_but_not_their_warm_start(tmp_path):
    """The search routing runs train and are scored on 1- to 3-hop questions with three
    rounds, from the one-hop track's warm start, which must stay the cached one."""
    preset = PRESETS["routing"]
    for label in ("routed", "routed+cost", "K=1", "K=2"):
        _, run, _ = pair_settings(preset, "SRPO-Search-v0", label, run=True)
        assert run["extra_env_kwargs"]["hops"] == [1, 2, 3] and run["max_turns"] == 3
    _, own, jobs = warm_start_plan({**preset, "pairs": [("SRPO-Search-v0", "K=2")]}, tmp_path)
    (job,) = jobs[0]
    assert own == [("SRPO-Search-v0", "routed")]
    assert job.extra_env_kwargs["hops"] == [1] and job.max_turns == 2


def test_a_run_another_live_process_trains_is_skipped_not_restarted(tmp_path, monkeypatch):
    """Two harness invocations over one --out: the second to reach a run that the first
    is training leaves it alone (a restart would unlink its metrics.jsonl); a claim
    left by a process that died is taken over."""
    import srpo_agents.running.train as train_module

    def refuse(*_, **__):
        raise AssertionError("restarted a run another process is training")

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "metrics.jsonl").write_text('{"step": 0}\n')
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (run_dir / "training.pid").write_text(str(other.pid))
        assert claim_run(run_dir) is None
        monkeypatch.setattr(train_module, "train", refuse)
        config = TrainConfig(env="SRPO-Math-v0", workflow="parallel", out=str(run_dir))
        assert run_job(config, before={}) == []
        assert (run_dir / "metrics.jsonl").read_text() == '{"step": 0}\n'
    finally:
        other.kill()
        other.wait()
    claim = claim_run(run_dir)  # the holder is gone: a stale claim
    assert claim is not None and claim.read_text() == str(os.getpid())
