"""Meeting other code: episodes as JSONL (``srpo rollout``) read back into the learner,
and the gym-view example for plain RL code."""

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from srpo_agents.cli import main
from srpo_agents.learning.events import build_units
from srpo_agents.learning.learner import Learner, LearnerConfig
from srpo_agents.learning.objective import ADVANTAGE_ESTIMATORS, ALGORITHMS
from srpo_agents.models.policy import load_policy
from srpo_agents.rollout.files import read_rollouts
from srpo_agents.tiny import build_tiny_policy

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny")
    build_tiny_policy(["0123456789+-*/() to\nFinal: P"] * 4, path, hidden_size=32,
                      num_layers=1, num_heads=2)
    return path


def test_srpo_rollout_writes_transitions_that_the_learner_trains_on(tiny_checkpoint, tmp_path):
    out = tmp_path / "episodes.jsonl"
    assert main(["rollout", "--checkpoint", str(tiny_checkpoint), "--env", "SRPO-Countdown-v0",
                 "--workflow", "parallel", "--n-agents", "2", "--tasks", "3",
                 "--group-size", "2", "--max-new-tokens", "6", "--out", str(out)]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 3 * 2 * 2  # tasks x group x (propose, aggregate)
    first = rows[0]
    assert [c["agent_id"] for c in first["transition"]["consumed"]] == ["proposer_0",
                                                                         "proposer_1"]
    sample = first["samples"]["proposer_0"]
    assert len(sample["logprobs"]) == len(sample["response_ids"]) >= 1
    assert all(lp <= 0.0 for lp in sample["logprobs"]) and sample["prompt_ids"]

    rollouts = read_rollouts(out)
    assert len(rollouts) == 6 and {len(r.transitions) for r in rollouts} == {2}
    assert len({r.task_id for r in rollouts}) == 3
    algorithm = ALGORITHMS["srpo"]
    units, stats = build_units(rollouts, algorithm.unit)
    assert stats.events == 12 and [u.size for u in units[:2]] == [2, 1]
    advantages = ADVANTAGE_ESTIMATORS[algorithm.advantage]([u.info for u in units])
    advantages = advantages + np.linspace(-1, 1, len(units))  # a gradient even if all tie
    policy = load_policy(str(tiny_checkpoint))
    before = [p.detach().clone() for p in policy.model.parameters()]
    result = Learner(policy, algorithm, LearnerConfig(lr=1e-2)).update(units, advantages)
    assert result["updates"] >= 1
    assert any(not (a == b).all() for a, b in zip(before, policy.model.parameters(),
                                                     strict=True))

    out.write_text(out.read_text() + '{"transition": {}}\n')
    with pytest.raises(ValueError, match=r"episodes.jsonl:13: not a rollout row"):
        read_rollouts(out)


def test_the_gym_example_runs():
    spec = importlib.util.spec_from_file_location("gym_example",
                                                  ROOT / "examples" / "gym_random_agent.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    scripted = module.main(["--env", "SRPO-Countdown-v0", "--workflow", "parallel",
                            "--episodes", "40", "--skill", "0.6"])
    assert scripted["events"] == 80 and scripted["mean_return"] > 0.7
    noise = module.main(["--random", "--episodes", "20"])
    assert noise["mean_return"] < scripted["mean_return"]
    math = module.main(["--env", "SRPO-Math-v0", "--workflow", "solve_verify",
                        "--episodes", "10"])
    assert math["episodes"] == 10 and math["events"] >= 20


def test_tensorboard_logs_the_metrics_keys_and_srpo_plot_overlays_runs(tmp_path, monkeypatch):
    pytest.importorskip("tensorboard", reason="the tensorboard package is not installed")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    monkeypatch.setenv("SRPO_CACHE_DIR", str(tmp_path / "cache"))
    run = tmp_path / "run"
    assert main(["train", "--env", "SRPO-Countdown-v0", "--workflow", "single", "--steps", "2",
                 "--group-size", "2", "--tasks-per-step", "2", "--eval-tasks", "4",
                 "--eval-k", "2", "--max-new-tokens", "6", "--model", "tiny", "--warmstart-steps", "2",
                 "--warmstart-target", "1.0", "--tensorboard", "--out", str(run)]) == 0
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    events = EventAccumulator(str(run / "tensorboard"))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    flat = {k for k, v in rows[0].items() if isinstance(v, int | float) and k != "step"}
    assert flat <= tags and {"eval/avg_at_k", "eval/pass_at_k"} <= tags
    assert [e.step for e in events.Scalars("accuracy")] == [1, 2]
    assert [e.value for e in events.Scalars("accuracy")] == pytest.approx(
        [r["accuracy"] for r in rows])

    png = tmp_path / "curves.png"
    assert main(["plot", str(run), str(run), "--labels", "a", "b", "--out", str(png)]) == 0
    assert png.stat().st_size > 1000
    assert main(["plot", str(run), "--metric", "nope", "--out", str(png)]) == 2
    assert main(["plot", str(tmp_path / "missing"), "--out", str(png)]) == 2
