"""Learner checks against the objective's own definition: the update does not depend on
the micro-batch size (KL term and every reported figure included), log-probs are scored
with dropout off, as sampled, ``adv_eps`` reaches the estimator, and MAGRPO credits every
role that acts."""

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from srpo_agents.config import TrainConfig
from srpo_agents.learning.events import UnitBatch, build_units
from srpo_agents.learning.learner import Learner, LearnerConfig
from srpo_agents.learning.objective import ADVANTAGE_ESTIMATORS, ALGORITHMS
from srpo_agents.models.policy import Policy, load_policy
from srpo_agents.rollout.engine import Rollout, RolloutEngine, Sample
from srpo_agents.rollout.envs import env_factory
from srpo_envs.transition import ConsumedOutput, Transition

PARALLEL = dict(env="SRPO-Math-v0", workflow="parallel", n_agents=3, compact_prompts=True)
SOLVE_VERIFY = dict(env="SRPO-Math-v0", workflow="solve_verify", n_agents=1,
                    compact_prompts=True)


@pytest.fixture(scope="module")
def tiny_dir(math_tiny_dir):
    return math_tiny_dir


def play(policy, config, n_tasks=2, group=3, max_new_tokens=16, temperature=1.0):
    make = env_factory(TrainConfig(model="x", **config), "train")
    envs = [make(i) for i in range(n_tasks * group)]
    engine = RolloutEngine(policy, max_new_tokens=max_new_tokens, seed=0,
                           temperature=temperature)
    options = [{"task_index": t, "episode_id": f"t{t}-g{g}"}
               for t in range(n_tasks) for g in range(group)]
    return engine.run(envs, options)


def alternating(units):
    return np.array([1.0 if i % 2 else -1.0 for i in range(len(units))])


def perturb(model, seed, scale=0.05):
    """Move every weight a little (seeded), so the policy is off the behaviour policy
    and off the reference: ratios leave 1, some clip, and the KL term has a gradient."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=generator) * scale)


def gradient_and_figures(tiny_dir, algo, units, rows):
    policy = load_policy(str(tiny_dir))
    learner = Learner(policy, ALGORITHMS[algo],
                      LearnerConfig(lr=1e-2, beta=0.5, microbatch_rows=rows))
    perturb(policy.model, seed=1)  # after the reference was copied from the start
    learner.optimizer.step = lambda: None  # compare the gradients, not Adam's steps
    figures = learner.update(units, alternating(units))
    grad = torch.cat([p.grad.flatten() for p in policy.model.parameters()])
    return grad, figures, learner


@pytest.mark.parametrize("algo", ["srpo", "srpo_singleton", "grpo"])
def test_kl_gradient_and_figures_do_not_depend_on_microbatch_rows(tiny_dir, algo):
    units, _ = build_units(play(load_policy(str(tiny_dir)), PARALLEL),
                           ALGORITHMS[algo].unit)
    whole, figures_whole, _ = gradient_and_figures(tiny_dir, algo, units, rows=1000)
    split, figures_split, learner = gradient_and_figures(tiny_dir, algo, units, rows=2)
    assert len(learner._microbatches(UnitBatch(units, np.zeros(len(units))))) > 3
    assert figures_whole["kl"] > 1e-3                       # the KL term is not vacuous
    assert 0 < figures_whole["clip_fraction"] < 1            # nor the clip figure
    relative = float((whole - split).norm() / whole.norm())
    assert relative < 1e-5, f"gradient moved by {relative:.2e} of its norm"
    for key, value in figures_whole.items():
        if key.endswith("seconds"):
            continue
        assert figures_split[key] == pytest.approx(value, rel=1e-5, abs=1e-7), key


def test_the_reference_is_scored_once_per_update(tiny_dir):
    """Two epochs of several mini-batches: the frozen reference scores each row once,
    not once per micro-batch and epoch (it does not change within an update)."""
    units, _ = build_units(play(load_policy(str(tiny_dir)), PARALLEL), "set")
    policy = load_policy(str(tiny_dir))
    learner = Learner(policy, ALGORITHMS["srpo"],
                      LearnerConfig(lr=1e-2, beta=0.5, epochs=2, minibatch_episodes=2,
                                    microbatch_rows=4))
    scored = []
    score = learner.response_logprobs

    def counting(model, samples, *args, **kwargs):
        if model is learner.reference:
            scored.extend(id(s) for s in samples)
        return score(model, samples, *args, **kwargs)

    learner.response_logprobs = counting
    figures = learner.update(units, alternating(units))
    rows = sum(u.size for u in units)
    assert figures["updates"] >= 4 and "kl" in figures
    assert sorted(scored) == sorted({id(m) for u in units for m in u.members})
    assert len(scored) == rows


def tiny_gpt2(tiny_dir, dropout=0.1):
    """A two-layer GPT-2 with dropout everywhere, on the tiny character tokenizer."""
    from transformers import GPT2Config, GPT2LMHeadModel

    tokenizer = load_policy(str(tiny_dir)).tokenizer
    config = GPT2Config(vocab_size=len(tokenizer), n_positions=1024, n_embd=32, n_layer=2,
                        n_head=2, resid_pdrop=dropout, embd_pdrop=dropout,
                        attn_pdrop=dropout, bos_token_id=tokenizer.eos_token_id,
                        eos_token_id=tokenizer.eos_token_id,
                        pad_token_id=tokenizer.pad_token_id)
    torch.manual_seed(0)
    model = GPT2LMHeadModel(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return Policy(model, tokenizer, "tiny-gpt2-dropout")


@pytest.mark.parametrize("mode", ["train", "eval"])
def test_dropout_model_scores_on_policy_and_keeps_its_mode(tiny_dir, mode):
    policy = tiny_gpt2(tiny_dir)
    units, _ = build_units(play(policy, PARALLEL), "set")
    modes = []
    policy.model.register_forward_hook(lambda module, *_: modes.append(module.training))
    policy.model.train(mode == "train")
    learner = Learner(policy, ALGORITHMS["srpo"], LearnerConfig(lr=1e-9, microbatch_rows=8))
    figures = learner.update(units, alternating(units))
    assert figures["first_epoch_max_abs_log_ratio"] < 1e-5
    assert figures["clip_fraction"] == 0.0
    assert modes and not any(modes)                        # scored with dropout off
    assert figures["grad_norm"] > 0                        # gradients flow in eval mode
    assert policy.model.training == (mode == "train")      # the caller's mode is back


@pytest.mark.parametrize("temperature", [0.7, 1.0, 1.5])
def test_every_algorithm_is_on_policy_at_the_first_epoch_with_dropout(tiny_dir, temperature):
    policy = tiny_gpt2(tiny_dir)
    rollouts = play(policy, PARALLEL, group=2, max_new_tokens=12, temperature=temperature)
    for name, algorithm in ALGORITHMS.items():
        units, _ = build_units(rollouts, algorithm.unit)
        config = LearnerConfig(lr=1e-9, microbatch_rows=4, temperature=temperature)
        figures = Learner(policy, algorithm, config).update(units, alternating(units))
        assert figures["first_epoch_max_abs_log_ratio"] < 1e-5, name
        assert figures["clip_fraction"] == 0.0 and figures["ratio_mean"] == pytest.approx(
            1.0, abs=1e-5), name


def _rollout(task, episode, reward):
    consumed = (ConsumedOutput("solver_0", "solver", "p", "x"),)
    transition = Transition(episode, task, 0, "solve", "s0", consumed, ("solver_0",),
                            reward, True, False)
    sample = Sample(episode, 0, "solver_0", "solver", [1, 2], [3], [-1.0], True, "x", 0)
    return Rollout(episode, task, [transition], {(0, "solver_0"): sample})


def test_adv_eps_reaches_the_estimator():
    from srpo_agents.running.step import train_step

    # one group whose returns differ by 2e-6: population std 1e-6, the size of eps
    rollouts = [_rollout("t", "a", 1.0), _rollout("t", "b", 1.0 + 2e-6)]
    engine = SimpleNamespace(run=lambda envs, options: rollouts, seconds={},
                             policy_version=0)
    seen = {}

    def recorder(eps):
        def update(units, advantages):
            seen[eps] = advantages
            return {}
        return update

    for eps in (1e-6, 1e-3):
        learner = SimpleNamespace(config=LearnerConfig(adv_eps=eps), update=recorder(eps))
        train_step(engine, [], [], ALGORITHMS["srpo"], ADVANTAGE_ESTIMATORS["task"],
                   {"shared": learner})
    # (R - mean) / (std + eps): +-1e-6 / (1e-6 + eps)
    np.testing.assert_allclose(seen[1e-6], [-0.5, 0.5], rtol=1e-6)
    np.testing.assert_allclose(seen[1e-3], [-1e-6 / 1.001e-3, 1e-6 / 1.001e-3], rtol=1e-6)


def vary_returns(rollouts):
    """Returns 1 for the first rollout of each task, 0 for the others."""
    for r in rollouts:
        object.__setattr__(r.transitions[-1], "reward", float(r.episode_id.endswith("g0")))
    return rollouts


@pytest.mark.parametrize(("config", "role"), [(PARALLEL, "aggregator"),
                                              (SOLVE_VERIFY, "verifier")],
                         ids=["parallel-aggregator", "solve_verify-verifier"])
def test_magrpo_credits_every_role_that_acts(tiny_dir, config, role):
    rollouts = vary_returns(play(load_policy(str(tiny_dir)), config))
    units, _ = build_units(rollouts, ALGORITHMS["magrpo"].unit)
    advantages = ADVANTAGE_ESTIMATORS[ALGORITHMS["magrpo"].advantage]([u.info for u in units])
    # the role's first action: event 1, after the solvers, in every episode
    second = [a for u, a in zip(units, advantages, strict=True)
              if u.members[0].role == role and u.info.step_index == 1]
    assert len(second) == len(rollouts), "the role acts once at event 1 of every episode"
    # R - mean over the G = 3 siblings of a task's node: 1 - 1/3 and 0 - 1/3
    assert sorted(np.round(second, 6)) == pytest.approx([-1 / 3] * 4 + [2 / 3] * 2)
