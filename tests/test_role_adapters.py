"""One frozen base, one LoRA adapter per role (``srpo_agents.models.adapters``).

What must hold: a batch that mixes roles is scored and sampled as per-role batches would
be (log-probs, gradients, greedy ids); one role's events move only that role's adapter;
the base never moves; and every role's adapter gets gradients (PEFT trains only the
active adapter unless told otherwise: huggingface/peft#631).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("peft")

from srpo_agents.learning.events import build_units  # noqa: E402
from srpo_agents.learning.learner import Learner, LearnerConfig  # noqa: E402
from srpo_agents.learning.objective import ALGORITHMS  # noqa: E402
from srpo_agents.models.adapters import (  # noqa: E402
    adapter_parameters,
    attach_role_adapters,
    parameter_counts,
    save_role_adapters,
)
from srpo_agents.rollout.engine import RolloutEngine, Sample  # noqa: E402
from srpo_agents.tiny import build_tiny_policy  # noqa: E402
from tests.test_learning import LetterEnv  # noqa: E402

ROLES = ("caller", "echo")


@pytest.fixture()
def team(tmp_path):
    """A fresh tiny base with an adapter per role, each adapter moved off zero (LoRA
    starts at B = 0, where every adapter would act alike) so the roles differ."""
    base = build_tiny_policy(["say aaaa:", "relay bbbb:", "copy cccc:"], tmp_path / "base",
                             hidden_size=64, num_layers=2, num_heads=2)
    torch.manual_seed(0)  # LoRA's A matrices are drawn from the global generator
    policy = attach_role_adapters(base, ROLES, rank=4, alpha=8)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, weight in policy.model.named_parameters():
            if "lora_B" in name:
                weight.copy_(torch.randn(weight.shape, generator=generator) * 0.1)
    policy.model.eval()
    return policy


def _sample(policy, role: str, prompt: str, response: str) -> Sample:
    ids = policy.tokenizer(response, add_special_tokens=False)["input_ids"]
    return Sample("e", 0, f"{role}_0", role, policy.prompt_ids(role, prompt), ids,
                  [0.0] * len(ids), True, response, 0)


def _mixed(policy) -> list[Sample]:
    # the same prompt under both roles, repeated prompts, and different lengths
    return [_sample(policy, "caller", "say aaaa:", "ab"), _sample(policy, "echo", "say aaaa:", "ab"),
            _sample(policy, "caller", "relay bbbb:", "b"),
            _sample(policy, "echo", "relay bbbb:", "bba"),
            _sample(policy, "caller", "say aaaa:", "ab")]


def _grads(policy) -> dict[str, torch.Tensor]:
    return {n: p.grad.clone() for n, p in policy.model.named_parameters() if p.requires_grad}


def test_a_mixed_role_batch_scores_as_per_role_batches(team):
    learner = Learner(team, ALGORITHMS["srpo"], LearnerConfig(lr=1e-3))
    samples = _mixed(team)
    logp, mask, _ = learner.response_logprobs(team.model, samples)
    logp.sum().backward()
    mixed = _grads(team)
    team.model.zero_grad(set_to_none=True)
    total = 0.0
    for role in ROLES:
        index = [i for i, s in enumerate(samples) if s.role == role]
        alone, _, _ = learner.response_logprobs(team.model, [samples[i] for i in index])
        for row, i in enumerate(index):
            n = int(mask[i].sum())
            assert torch.allclose(logp[i, :n], alone[row, :n], atol=1e-5), (role, i)
        total = total + alone.sum()
    total.backward()
    separate = _grads(team)
    assert mixed.keys() == separate.keys()
    for name in mixed:
        assert torch.allclose(mixed[name], separate[name], atol=1e-5), name
    for role in ROLES:  # every adapter got a gradient, not only PEFT's active one
        assert any(mixed[n].abs().sum() > 0 for n in adapter_parameters(team, role)), role
    # the roles' adapters really differ: one prompt, two roles, two answers
    assert not torch.allclose(logp[0], logp[1])
    assert all(p.grad is None for p in team.model.parameters() if not p.requires_grad)


def test_a_mixed_role_batch_samples_as_per_role_batches(team):
    generator = RolloutEngine(team, max_new_tokens=5, temperature=0)._generator
    samples = _mixed(team)
    prompts, roles = [s.prompt_ids for s in samples], [s.role for s in samples]
    mixed = generator.generate(prompts, roles)
    for role in ROLES:
        index = [i for i, r in enumerate(roles) if r == role]
        alone = generator.generate([prompts[i] for i in index], [role] * len(index))
        for i, out in zip(index, alone, strict=True):
            assert mixed[i][0] == out[0]
            assert np.allclose(mixed[i][1], out[1], atol=1e-5)
    assert not np.allclose(mixed[0][1], mixed[1][1]), "both roles answered one prompt alike"
    with pytest.raises(ValueError, match="one role per prompt"):
        generator.generate(prompts)
    with pytest.raises(ValueError, match="no adapter"):
        generator.generate(prompts[:1], ["judge"])


def _relay_units(policy):
    envs = [LetterEnv("relay", seed=i) for i in range(16)]
    engine = RolloutEngine(policy, max_new_tokens=3, seed=0)
    rollouts = engine.run(envs, [{"task_index": i % 4, "episode_id": f"e{i}"}
                                 for i in range(16)])
    units, _ = build_units(rollouts, "set")
    return units


def _snapshot(policy) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in policy.model.named_parameters()}


def test_one_role_s_events_move_only_its_adapter_and_the_base_stays(team):
    units = [u for u in _relay_units(team) if u.members[0].role == "echo"]
    assert units
    before = _snapshot(team)
    learner = Learner(team, ALGORITHMS["srpo"], LearnerConfig(lr=1e-2))
    result = learner.update(units, np.linspace(-1, 1, len(units)))
    assert result["updates"] == 1
    after = _snapshot(team)
    echo, caller = adapter_parameters(team, "echo"), adapter_parameters(team, "caller")
    assert any(not torch.equal(before[n], after[n]) for n in echo)
    assert all(torch.equal(before[n], after[n]) for n in caller)
    frozen = [n for n in after if n not in echo and n not in caller]
    assert frozen and all(torch.equal(before[n], after[n]) for n in frozen)


def test_both_roles_train_in_one_update_and_the_optimizer_holds_adapters_only(team):
    units = _relay_units(team)
    before = _snapshot(team)
    learner = Learner(team, ALGORITHMS["srpo"], LearnerConfig(lr=1e-2))
    held = sum(p.numel() for group in learner.optimizer.param_groups for p in group["params"])
    assert held == parameter_counts(team)["trainable"] < parameter_counts(team)["total"] / 2
    learner.update(units, np.linspace(-1, 1, len(units)))
    after = _snapshot(team)
    for role in ROLES:
        assert any(not torch.equal(before[n], after[n]) for n in adapter_parameters(team, role))


def test_a_kl_penalty_uses_the_base_as_reference(team):
    learner = Learner(team, ALGORITHMS["srpo"], LearnerConfig(lr=1e-3, beta=0.1))
    assert learner.reference is None and learner.base_reference  # no copy of the model
    units = _relay_units(team)
    result = learner.update(units, np.linspace(-1, 1, len(units)))
    assert result["kl"] > 0  # the adapters are off zero: the policy is not the base


def test_adapters_save_in_peft_format_and_load_back(team, tmp_path):
    from peft import PeftModel

    from srpo_agents.models.policy import load_policy

    save_role_adapters(team, tmp_path / "adapters")
    for role in ROLES:
        assert (tmp_path / "adapters" / role / "adapter_config.json").is_file()
        assert (tmp_path / "adapters" / role / "adapter_model.safetensors").is_file()
    # PEFT's own loader reads one role's folder onto the base
    base = load_policy(team.base_name)
    alone = PeftModel.from_pretrained(base.model, str(tmp_path / "adapters" / "echo"))
    loaded = load_policy(str(tmp_path / "adapters"))
    assert loaded.adapter_roles == ROLES and loaded.base_name == team.base_name
    samples = _mixed(team)
    learner = Learner(team, ALGORITHMS["srpo"], LearnerConfig(lr=1e-3))
    expected, mask, _ = learner.response_logprobs(team.model, samples)
    again, _, _ = learner.response_logprobs(loaded.model.eval(), samples)  # same roles
    assert parameter_counts(loaded)["trainable"] == 0  # loaded for sampling, frozen
    assert torch.allclose(expected.detach(), again.detach(), atol=1e-6)
    echo = [s for s in samples if s.role == "echo"]
    alone.eval()
    with torch.no_grad():
        ids = torch.tensor([echo[0].prompt_ids + echo[0].response_ids])
        logits = alone(input_ids=ids).logits[0, len(echo[0].prompt_ids) - 1:-1]
    peft_logp = torch.log_softmax(logits, -1).gather(
        -1, torch.tensor(echo[0].response_ids)[:, None]).squeeze(-1)
    row = samples.index(echo[0])
    n = len(echo[0].response_ids)
    assert torch.allclose(peft_logp, expected[row, :n].detach(), atol=1e-5)
