"""The warm start is cached under a key of everything that shapes it, and it looks at
the validation split, never at the test tasks of the final evaluation.

Before: the key held only the warm start's own settings, so a Math/parallel warm start
was returned (``cached=True``) for a Countdown/single run in the same folder; and its
early stop scored ``range(64)`` of the test split, the first 64 tasks of the final
evaluation.
"""

from __future__ import annotations

import pytest

from srpo_agents.config import TrainConfig
from srpo_agents.models.registry import prepare_policy
from srpo_agents.rollout.envs import env_factory
from srpo_agents.tiny.source import warm_start_key
from srpo_agents.tiny.warmstart import changed_keys, warm_start


def _key(**changes) -> dict:
    return warm_start_key(TrainConfig(**{"env": "SRPO-Math-v0", "workflow": "parallel",
                                         "model": "tiny", **changes}))


@pytest.mark.parametrize("changes", [
    {"env": "SRPO-Countdown-v0", "workflow": "single"}, {"workflow": "solve_verify"},
    {"difficulty": (2,)}, {"n_agents": 2}, {"max_new_tokens": 64},
    {"extra_env_kwargs": {"task_seed": 3}},
], ids=lambda c: ",".join(c))
def test_the_key_changes_with_what_shapes_the_warm_start(changes):
    assert _key(**changes) != _key(), changes


def test_the_key_holds_data_file_hashes(tmp_path):
    data = tmp_path / "train.jsonl"
    data.write_text('{"question": "1 + 1?", "answer": "2"}\n')
    first = _key(dataset=str(data))
    data.write_text('{"question": "1 + 2?", "answer": "3"}\n')
    second = _key(dataset=str(data))
    assert first["files"]["dataset"] != second["files"]["dataset"]
    assert changed_keys(first, second) == ["files.dataset"]


def test_a_changed_key_rebuilds_and_says_why(tmp_path, monkeypatch):
    monkeypatch.setenv("SRPO_CACHE_DIR", str(tmp_path / "cache"))
    math = TrainConfig(env="SRPO-Math-v0", workflow="parallel", n_agents=2, model="tiny")
    countdown = TrainConfig(env="SRPO-Countdown-v0", workflow="single", model="tiny")
    logs: list[str] = []

    def build(config: TrainConfig):
        return warm_start(tmp_path, env_factory(config, "train"),
                          env_factory(config, "validation"), minutes=1, target=1.1, seed=0,
                          max_new_tokens=8, steps=2, episodes=10, check_every=2,
                          eval_tasks=2, env_name=config.env, key=warm_start_key(config),
                          log=logs.append)

    _, first = build(math)
    assert "cached" not in first
    _, again = build(math)
    assert again["cached"] is True
    _, other = build(countdown)
    assert "cached" not in other, "a Math/parallel warm start served a Countdown run"
    rebuilt = [line for line in logs if "rebuilding" in line]
    assert rebuilt and "env" in rebuilt[0] and "run.workflow" in rebuilt[0], rebuilt


def test_the_warm_start_checks_the_validation_split(tmp_path, monkeypatch):
    import srpo_agents.tiny.warmstart as warmstart

    seen = {}

    def fake_warm_start(run_dir, make_train_env, make_eval_env, **kwargs):
        seen["train"] = make_train_env(0).config.split
        seen["eval"] = make_eval_env(0).config.split
        seen["key"] = kwargs["key"]
        raise RuntimeError("stop here")

    monkeypatch.setattr(warmstart, "warm_start", fake_warm_start)
    config = TrainConfig(env="SRPO-Math-v0", workflow="single", model="tiny", out=str(tmp_path))
    with pytest.raises(RuntimeError, match="stop here"):
        prepare_policy(config, tmp_path, print)
    assert seen["train"] == "train" and seen["eval"] == "validation"
    assert seen["key"] == warm_start_key(config)
