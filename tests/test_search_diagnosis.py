"""srpo_bench/search_diagnosis.py (benchmarks/learning/search_diagnosis.py's measurements): the training curve's trend with its error, and the
role rates of one episode read off its transitions."""

import json
from pathlib import Path

import numpy as np
import pytest

from srpo_agents.config import TrainConfig
from srpo_agents.rollout.envs import env_factory
from srpo_bench import search_diagnosis
from srpo_envs.transition import ConsumedOutput, Transition


def _metrics(tmp_path: Path, accuracies) -> Path:
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps({"step": i, "accuracy": float(a)}) + "\n"
                            for i, a in enumerate(accuracies)))
    return path


def test_a_flat_noisy_curve_has_no_rise_beyond_its_error(tmp_path):
    rng = np.random.default_rng(0)
    trend = search_diagnosis.training_trend(_metrics(tmp_path, 0.5 + rng.normal(0, 0.05, 40)))
    assert abs(trend["fitted_rise"]) < 2 * trend["fitted_rise_stderr"]
    assert 0.03 < trend["step_scatter"] < 0.07


def test_a_steady_rise_is_recovered(tmp_path):
    rng = np.random.default_rng(1)
    curve = 0.4 + 0.005 * np.arange(41) + rng.normal(0, 0.02, 41)
    trend = search_diagnosis.training_trend(_metrics(tmp_path, curve))
    assert trend["fitted_rise"] == pytest.approx(0.2, abs=3 * trend["fitted_rise_stderr"])
    assert trend["fitted_rise"] > 5 * trend["fitted_rise_stderr"]
    assert trend["last_minus_first"] > 0.15


def test_too_short_a_run_is_refused_by_name(tmp_path):
    with pytest.raises(ValueError, match="--metrics .* 4 training steps"):
        search_diagnosis.training_trend(_metrics(tmp_path, [0.1, 0.2, 0.3, 0.4]))


class _Rollout:
    def __init__(self, transitions, correct):
        self.transitions, self.correct = transitions, correct


def _transition(event_type, agents, info):
    consumed = tuple(ConsumedOutput(agent_id=a, role=a.split("_")[0], prompt="p", text="t")
                     for a in agents)
    return Transition(episode_id="e", task_id="t", step_index=0, event_type=event_type,
                      pre_state_id="s", consumed=consumed, expected_agents=tuple(agents),
                      reward=0.0, terminated=False, truncated=False, info=info)


def test_episode_rates_read_the_roles_off_the_transitions():
    config = TrainConfig(env="SRPO-Search-v0", workflow="search_answer_verify",
                         extra_env_kwargs={"hops": [1]})
    env = env_factory(config, "test")(0)
    gold = env.task(0).supporting_ids[0]
    rollout = _Rollout([
        # round 1: the search misses, the answer is wrong, the verifier rejects it (agrees)
        _transition("search", ["searcher_0"], {"retrieved_ids": {"searcher_0": ["x"]}}),
        _transition("answer", ["answerer_0"], {"correct": False}),
        _transition("verify", ["verifier_0"], {"verdict": "reject"}),
        # round 2: a malformed query (no retrieval), a right guess, a wrong reject
        _transition("search", ["searcher_0"], {}),
        _transition("answer", ["answerer_0"], {"correct": True}),
        _transition("verify", ["verifier_0"], {"verdict": "reject"}),
    ], correct=False)
    rates = search_diagnosis.episode_rates(env, 0, rollout)
    assert rates["searcher_gold_on_top"] == 0.0  # the first round's search only
    assert rates["answerer_right"] == 0.5
    assert np.isnan(rates["answerer_right_after_gold"])  # gold was never retrieved
    assert rates["verifier_agrees"] == 0.5
    assert rates["accuracy"] == 0.0
    hit = _Rollout([_transition("search", ["searcher_0"],
                                {"retrieved_ids": {"searcher_0": [gold]}}),
                    _transition("answer", ["answerer_0"], {"correct": True}),
                    _transition("verify", ["verifier_0"], {"verdict": "accept"})], True)
    rates = search_diagnosis.episode_rates(env, 0, hit)
    assert (rates["searcher_gold_on_top"], rates["answerer_right_after_gold"],
            rates["verifier_agrees"], rates["accuracy"]) == (1.0, 1.0, 1.0, 1.0)
