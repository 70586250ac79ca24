"""The vLLM backend (extra ``vllm``): sampled ids with their log-probs, and weights
updated in place after a learner step. vLLM 0.33 pins torch 2.14 and transformers < 5.21,
so it cannot be installed beside this project's torch 2.13 pin: these tests skip here and
in CI, and run where vLLM is importable (benchmarks/gpu_check.sh runs them)."""

import pytest

vllm = pytest.importorskip(
    "vllm", reason="vLLM is not installed: it pins another torch than this project's CI "
                   "(see README, 'What CI exercises')")
torch = pytest.importorskip("torch")

from srpo_agents.rollout import RolloutEngine  # noqa: E402
from srpo_agents.tiny import build_tiny_policy  # noqa: E402


@pytest.fixture(scope="module")
def policy(tmp_path_factory):
    return build_tiny_policy(["1+2= 3\n4+4= 8\n"] * 8, tmp_path_factory.mktemp("tiny"))


def test_vllm_returns_logprobs_of_the_sampled_ids(policy):
    engine = RolloutEngine(policy, backend="vllm", max_new_tokens=8, seed=0)
    prompts = [policy.prompt_ids("solver", "1+2=")] * 4
    for ids, logprobs, _ in engine._generate_by_role(["solver"] * 4, prompts):
        assert len(ids) == len(logprobs) >= 1 and all(lp <= 0.0 for lp in logprobs)


def test_vllm_weights_follow_the_learner(policy):
    engine = RolloutEngine(policy, backend="vllm", max_new_tokens=4, temperature=0.0, seed=0)
    prompt = [policy.prompt_ids("solver", "4+4=")]
    before = engine._generate_by_role(["solver"], prompt)[0][0]
    with torch.no_grad():
        for parameter in policy.model.parameters():
            parameter.mul_(-1.0)
    engine.policy_version += 1  # what train_step does after an update
    after = engine._generate_by_role(["solver"], prompt)[0][0]
    assert after != before
