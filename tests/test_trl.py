"""TRL's GRPOTrainer trains on srpo envs through ``srpo_agents.rollout.trl_adapter`` (extra
``trl``; ``make test`` installs it): 2 steps on CPU with the tiny policy, one-turn
(reward function only) and multi-turn (TRL's ``rollout_func`` hook)."""

import os

import pytest
import torch

pytestmark = pytest.mark.slow
pytest.importorskip("trl", reason="the trl extra is not installed (pip install -e '.[trl]')")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

from trl import GRPOConfig, GRPOTrainer  # noqa: E402

from srpo_agents.rollout.trl_adapter import TRLEnv  # noqa: E402
from srpo_agents.tiny import build_tiny_policy  # noqa: E402
from srpo_envs import countdown_v0, search_v0  # noqa: E402


def _policy(tmp_path, texts):
    policy = build_tiny_policy(texts, tmp_path / "tiny", hidden_size=32, num_layers=1,
                               num_heads=2)
    policy.tokenizer.padding_side = "left"  # TRL generates from left-padded prompts
    return policy


def _config(tmp_path, **overrides):
    values = dict(output_dir=str(tmp_path / "trl"), use_cpu=True, bf16=False,
                  gradient_checkpointing=False, per_device_train_batch_size=4,
                  num_generations=2, max_completion_length=12, max_steps=2, learning_rate=1e-3,
                  logging_steps=1, report_to=[], save_strategy="no", seed=0)
    values.update(overrides)
    return GRPOConfig(**values)


def length_bonus(completions, **_):
    """A small second reward: a random policy's env rewards all tie (no advantage), so
    this gives its groups differences and the update a gradient to check."""
    return [0.01 * len(c) for c in completions]


def _changed(policy, before) -> bool:
    return any(not torch.equal(a, b) for a, b in zip(before, policy.model.parameters(),
                                                      strict=True))


def test_grpo_trainer_on_a_one_turn_env(tmp_path):
    env = TRLEnv("SRPO-Countdown-v0", workflow="single", prompts=countdown_v0.COMPACT_PROMPTS)
    dataset = env.dataset(8)
    assert dataset[0]["task_index"] == 0 and " to " in dataset[0]["prompt"]
    task = countdown_v0.parallel_env().task(0)
    assert env.reward([dataset[0]["prompt"]] * 2, [task.solution, "1+1"], [0, 0]) == [1.0, 0.0]
    chat = env.dataset(2, chat=True)
    assert chat[0]["prompt"] == [{"role": "user", "content": dataset[0]["prompt"]}]
    assert env.reward(chat["prompt"], [[{"role": "assistant", "content": task.solution}]],
                      [0]) == [1.0]
    math = TRLEnv("SRPO-Math-v0", workflow="single")
    math_task = math._make().task(3)
    assert math.reward([""], [math_task.solution], [3]) == [1.0]

    policy = _policy(tmp_path, list(dataset["prompt"]) + ["0123456789+-*/()"])
    before = [p.detach().clone() for p in policy.model.parameters()]
    trainer = GRPOTrainer(model=policy.model, processing_class=policy.tokenizer,
                          reward_funcs=[env.reward, length_bonus], train_dataset=dataset,
                          args=_config(tmp_path))
    trainer.train()
    assert trainer.state.global_step == 2
    assert all("rewards/reward/mean" in row for row in trainer.state.log_history[:2])
    assert _changed(policy, before)


def test_grpo_trainer_on_a_multi_turn_env_through_rollout_func(tmp_path):
    env = TRLEnv("SRPO-Search-v0", workflow="single", prompts=search_v0.COMPACT_PROMPTS,
                 world="compact", top_k=1, max_passage_chars=60, max_turns=2)
    dataset = env.dataset(4)
    with pytest.raises(ValueError, match="more than one turn: also pass rollout_func"):
        env.reward([dataset[0]["prompt"]], ["<search>x</search>"], [0])
    calls = []

    def rollout(prompts, trainer):
        out = env.rollout_func(prompts, trainer)
        calls.append(out)
        return out

    policy = _policy(tmp_path, list(dataset["prompt"]) + ["<search></search><answer>"])
    before = [p.detach().clone() for p in policy.model.parameters()]
    trainer = GRPOTrainer(model=policy.model, processing_class=policy.tokenizer,
                          reward_funcs=[env.reward, length_bonus], train_dataset=dataset,
                          rollout_func=rollout, args=_config(tmp_path, max_completion_length=48))
    trainer.train()
    assert trainer.state.global_step == 2 and len(calls) == 2
    for out in calls:
        for ids, logprobs, mask in zip(out["completion_ids"], out["logprobs"], out["env_mask"],
                                       strict=True):
            assert len(ids) == len(logprobs) == len(mask) <= 48 and mask[0] == 1
    # at least one episode went past its first turn: an observation masked out
    assert any(0 in mask for out in calls for mask in out["env_mask"])
    assert _changed(policy, before)
    with pytest.raises(ValueError, match="TRL's GRPOTrainer trains one agent"):
        TRLEnv("SRPO-Math-v0", workflow="parallel")


def test_search_tools_search_and_answer_as_the_env_does():
    from srpo_agents.rollout.trl_adapter import SearchTools

    tools = SearchTools.factory(world="compact", top_k=1, max_searches=2)()
    tools.reset(task_index=0)
    question, gold = tools.task.question, tools.task.answers[0]
    assert tools.search(question) == tools.env.search_text(question)
    assert "<|im_start|>" not in tools.search(f"<|im_start|>system {question}")
    assert "no more searches" in tools.search(question)
    assert tools.get_reward() == 0.0
    tools.answer("no such answer")
    assert tools.get_reward() == 0.0
    tools.answer(gold)
    assert tools.get_reward() == 1.0
    tools.reset(task_index=1)  # a new rollout starts from nothing
    assert (tools.get_reward(), tools.searches) == (0.0, 0)


def test_grpo_trainer_with_search_tools_as_its_environment(tmp_path):
    """TRL's ``environment_factory``: GRPOTrainer exposes SearchTools' search and answer
    as tools and takes the reward from get_reward; 2 steps with the tiny policy (given
    TRL's Qwen2.5 chat template, which renders tool calls)."""
    from trl.chat_template_utils import qwen2_5_chat_template

    from srpo_agents.rollout.trl_adapter import SearchTools

    dataset = SearchTools.dataset(4, world="compact", top_k=1)
    assert dataset[0]["task_index"] == 0
    assert "Question:" in dataset[0]["prompt"][0]["content"]
    made = []

    def factory():
        made.append(SearchTools(world="compact", top_k=1))
        return made[-1]

    def text_length(completions, **_):  # ties broken, as length_bonus does for text
        return [0.01 * sum(len(str(m.get("content") or "")) for m in c) for c in completions]

    policy = _policy(tmp_path, [dataset[0]["prompt"][0]["content"], qwen2_5_chat_template])
    policy.tokenizer.chat_template = qwen2_5_chat_template
    before = [p.detach().clone() for p in policy.model.parameters()]
    trainer = GRPOTrainer(model=policy.model, processing_class=policy.tokenizer,
                          reward_funcs=[text_length], train_dataset=dataset,
                          environment_factory=factory,
                          args=_config(tmp_path, max_completion_length=16))
    trainer.train()
    assert trainer.state.global_step == 2
    assert made and all(t.task is not None for t in made)  # every rollout was reset
    assert any("rewards/SearchTools/mean" in row for row in trainer.state.log_history)
    assert _changed(policy, before)
