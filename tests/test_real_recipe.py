"""The real-model recipe (``srpo_agents.running.real_recipe``) and the rules of
``benchmarks/real_model_learns.py``: the setting is the candidates' choice, the pilot's
rule picks as its docstring says, and the weighed differences read the right runs."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from srpo_agents.running.real_recipe import TEAM, real_config
from srpo_bench.real_model import CANDIDATES, chosen, config_for

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"


def learns_module():
    spec = importlib.util.spec_from_file_location(
        "real_model_learns", REPO / "benchmarks" / "real_model_learns.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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


def test_team_minus_majority_vote_buys_votes_with_the_teams_tokens():
    module = learns_module()
    team = {"run": "team-srpo", "seed": 0, "tokens_per_task_after": 200.0,
            "per_task_after": [1.0, 0.5, 0.0]}
    single = {"run": "single", "seed": 0, "tokens_per_task_after": 100.0,
              "per_task_votes_after": [["right", "right"], ["right", "answer:5"],
                                       [None, None]]}
    # Twice the tokens buy a vote of 2: task 1 right, task 2 a tie (half), task 3 none:
    # votes 1, 0.5, 0 against the team's 1, 0.5, 0.
    assert module.majority_line([team, single]) == "seed 0: +0.000 (vote of 2)"
    # About one episode's tokens buy one episode: its mean over the two, 1, 0.5, 0.
    cheap = dict(team, tokens_per_task_after=110.0, per_task_after=[1.0, 1.0, 1.0])
    assert module.majority_line([cheap, single]) == "seed 0: +0.500 (vote of 1)"
    assert module.majority_line([team]) == "no seed with both"


@pytest.mark.parametrize("seeds", [(10,)])
def test_the_pilot_reads_only_validation_and_seeds_of_ten_or_more(seeds):
    module = learns_module()
    assert tuple(module.PILOT_SEEDS) == seeds and min(module.PILOT_SEEDS) >= 10
    assert "split=\"validation\"" in (REPO / "benchmarks" / "real_model_learns.py").read_text()
