"""Fair by construction (issue 60): every algorithm takes the same optimizer steps on the
same episodes, one clip rule treats losses that sum tokens and token means alike, and the
KL term sits at each loss's own level.

Before, mini-batches were counted in units: on a K = 3 team a unit is one set under SRPO
but one output under GRPO, srpo_singleton and MAGRPO, so with ``minibatch_units=4`` SRPO
took half the baselines' optimizer steps on the same batch.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from srpo_agents.config import LearnerConfig, TrainConfig
from srpo_agents.learning.events import UnitBatch, build_units
from srpo_agents.learning.learner import Learner
from srpo_agents.learning.objective import ALGORITHMS, reference_kl
from srpo_agents.models.policy import load_policy
from srpo_agents.rollout.engine import RolloutEngine
from srpo_agents.rollout.envs import env_factory

TEAM = dict(env="SRPO-Math-v0", workflow="parallel", n_agents=3, compact_prompts=True)
TASKS, GROUP = 4, 4


@pytest.fixture(scope="module")
def team_rollouts(math_tiny_dir):
    """16 episodes of a K = 3 parallel team (3 solvers in one event, then an aggregator)."""
    policy = load_policy(str(math_tiny_dir))
    make = env_factory(TrainConfig(model="x", **TEAM), "train")
    envs = [make(i) for i in range(TASKS * GROUP)]
    engine = RolloutEngine(policy, max_new_tokens=8, seed=0)
    options = [{"task_index": t, "episode_id": f"t{t}-g{g}"}
               for t in range(TASKS) for g in range(GROUP)]
    return engine.run(envs, options)


def alternating(units):
    return np.array([1.0 if i % 2 else -1.0 for i in range(len(units))])


def test_every_algorithm_takes_the_same_optimizer_steps(math_tiny_dir, team_rollouts):
    """srpo, grpo, srpo_singleton and magrpo on one K = 3 batch: 16 episodes in
    mini-batches of 4 episodes, two epochs, make 8 optimizer steps each, though SRPO's
    batch holds half as many units as the per-output ones."""
    counts, units_per_algo = {}, {}
    for algo in ("srpo", "grpo", "srpo_singleton", "magrpo"):
        units, stats = build_units(team_rollouts, ALGORITHMS[algo].unit)
        assert stats.events_dropped == 0
        units_per_algo[algo] = len(units)
        learner = Learner(load_policy(str(math_tiny_dir)), ALGORITHMS[algo],
                          LearnerConfig(lr=1e-4, epochs=2, minibatch_episodes=4), seed=0)
        counts[algo] = learner.update(units, alternating(units))["updates"]
    assert units_per_algo["srpo"] * 2 == units_per_algo["grpo"]  # sets of 3 vs outputs
    assert counts == dict.fromkeys(counts, 2 * (TASKS * GROUP // 4)), counts


def test_the_unit_forms_share_each_mini_batchs_episodes(team_rollouts):
    """The same seed cuts a batch of sets and the batch of its outputs into mini-batches
    of the very same episodes, in the same order."""
    def episodes(unit):
        units, _ = build_units(team_rollouts, unit)
        batch = UnitBatch(units, np.zeros(len(units)))
        return [sorted({u.info.episode_id for u in mini.units})
                for mini in batch.minibatches(3, random.Random(7))]

    by_set, by_output = episodes("set"), episodes("output")
    assert by_set == by_output
    assert [len(e) for e in by_set] == [3, 3, 3, 3, 3, 1]


def test_task_mini_batches_hold_whole_groups_and_the_same_steps(math_tiny_dir, team_rollouts):
    """minibatch_by "task": every episode once, each task's episodes side by side (a
    mini-batch of 4 is one whole group here), the unit forms cut alike, and every
    algorithm still takes the same optimizer steps; the episode order is the seed's."""
    def cut(unit, by, seed=7):
        units, _ = build_units(team_rollouts, unit)
        batch = UnitBatch(units, np.zeros(len(units)))
        return [sorted({u.info.episode_id for u in mini.units})
                for mini in batch.minibatches(GROUP, random.Random(seed), by)]

    by_task = cut("set", "task")
    assert by_task == cut("output", "task")
    assert sorted(e for mini in by_task for e in mini) == sorted(
        f"t{t}-g{g}" for t in range(TASKS) for g in range(GROUP))
    assert all(len({e.split("-")[0] for e in mini}) == 1 for mini in by_task)  # one task
    assert [mini[0] for mini in by_task] != [mini[0] for mini in cut("set", "task", seed=8)]
    assert any(len({e.split("-")[0] for e in mini}) > 1 for mini in cut("set", "episode"))
    for algo in ("srpo", "grpo"):
        units, _ = build_units(team_rollouts, ALGORITHMS[algo].unit)
        learner = Learner(load_policy(str(math_tiny_dir)), ALGORITHMS[algo],
                          LearnerConfig(lr=1e-4, minibatch_episodes=GROUP,
                                        minibatch_by="task"), seed=0)
        assert learner.update(units, alternating(units))["updates"] == TASKS
    with pytest.raises(ValueError, match=r"minibatch_by='group': expected one of episode, "
                                         r"task"):
        TrainConfig(model="x", minibatch_by="group")


def test_grad_clipped_is_the_share_of_steps_over_the_clip(math_tiny_dir, team_rollouts):
    units, _ = build_units(team_rollouts, "set")
    figures = {}
    for clip in (1e-9, 1e9):
        learner = Learner(load_policy(str(math_tiny_dir)), ALGORITHMS["srpo"],
                          LearnerConfig(lr=1e-4, minibatch_episodes=8, max_grad_norm=clip))
        figures[clip] = learner.update(units, alternating(units))
    assert figures[1e-9]["grad_clipped"] == 1.0 and figures[1e9]["grad_clipped"] == 0.0
    for out in figures.values():
        assert out["updates"] == 2 and out["grad_norm_max"] >= out["grad_norm"] > 0


def _first_step(policy_dir, units, algo, budget):
    """The pre-clip gradient norm and loss of one on-policy step over the whole batch."""
    learner = Learner(load_policy(str(policy_dir)), ALGORITHMS[algo],
                      LearnerConfig(lr=1e-6, max_grad_norm=1e9, token_budget=budget))
    out = learner.update(units, alternating(units))
    return out["grad_norm"], out["loss"]


@pytest.mark.parametrize("algo", ["srpo", "magrpo"])
def test_a_token_sum_loss_is_divided_by_the_token_budget(math_tiny_dir, team_rollouts, algo):
    """A constant: the gradient and the loss shrink by exactly the budget, nothing else."""
    units, _ = build_units(team_rollouts, ALGORITHMS[algo].unit)
    norm_1, loss_1 = _first_step(math_tiny_dir, units, algo, 1)
    norm_8, loss_8 = _first_step(math_tiny_dir, units, algo, 8)
    assert norm_8 == pytest.approx(norm_1 / 8, rel=1e-4)
    assert loss_8 == pytest.approx(loss_1 / 8, rel=1e-4, abs=1e-7)


def test_a_token_mean_loss_ignores_the_token_budget(math_tiny_dir, team_rollouts):
    units, _ = build_units(team_rollouts, "output")
    assert _first_step(math_tiny_dir, units, "grpo", 1) == pytest.approx(
        _first_step(math_tiny_dir, units, "grpo", 8), rel=1e-6)


def test_a_run_divides_by_its_generation_budget_unless_told():
    assert TrainConfig(max_new_tokens=24).learner().token_budget == 24
    assert TrainConfig(max_new_tokens=24, token_budget=1).learner().token_budget == 1
    with pytest.raises(ValueError, match="token_budget=-1: expected an int >= 0"):
        LearnerConfig(token_budget=-1)


def test_the_kl_term_of_a_unit_loss_is_its_token_sum():
    """Two units: rows 0-1 (K = 2) and row 2; the unit loss's KL is the mean over units
    of each unit's k3 sum (the level of its policy term), the token loss's the mean."""
    logp = torch.zeros(3, 2)
    ref = torch.tensor([[0.1, 0.2], [0.3, 0.0], [0.4, 0.0]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0], [1.0, 0.0]])
    k3 = torch.exp(ref) - ref - 1
    by_unit = reference_kl(logp, ref, mask, torch.tensor([0, 0, 1]), 2, "units")
    unit_sums = [float((k3[0] * mask[0]).sum() + k3[1, 0]), float(k3[2, 0])]
    assert float(by_unit) == pytest.approx(np.mean(unit_sums), rel=1e-6)
    by_token = reference_kl(logp, ref, mask, torch.tensor([0, 0, 1]), 2, "tokens")
    assert float(by_token) == pytest.approx(float((k3 * mask).sum() / 4), rel=1e-6)


def test_a_run_file_with_the_old_unit_count_names_its_replacement(tmp_path):
    from srpo_agents.cli.flags import read_run_file

    path = tmp_path / "run.yaml"
    path.write_text("minibatch_units: 64\n")
    with pytest.raises(ValueError, match="'minibatch_units' = 64 was removed: .*"
                                         "use minibatch_episodes"):
        read_run_file(path)
