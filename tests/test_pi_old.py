"""pi_old from the learner (``LearnerConfig.pi_old``): where the sampler's numerics are
not the learner's, the ratio's denominator is the learner's own no-grad pass over the
first epoch's micro-batches, so an on-policy first step has a ratio of exactly 1 and the
sampler's log-probs enter only as the truncated behaviour weight; the first optimizer
step's own rows skip that pass (their pi_old is their own detached log-probs); where the
sampler's numerics are the learner's (hf, float32, one process) nothing changes (pinned
in test_behaviour_pinned)."""

from __future__ import annotations

import copy
import random

import numpy as np
import pytest
import torch

from srpo_agents.config import TrainConfig
from srpo_agents.learning.events import UnitBatch, build_units
from srpo_agents.learning.learner import Learner, LearnerConfig
from srpo_agents.learning.objective import ALGORITHMS
from srpo_agents.models.policy import Policy, load_policy

from .test_learner import forced_advantages, rollouts_for


def _count_scored_rows(learner: Learner) -> list[int]:
    """Rows the learner scores in its extra no-grad pass (pi_old, not a KL reference)."""
    scored = [0]
    score = learner._rows_without_grad

    def counting(samples, model=None, plain=False):
        scored[0] += len(samples) if model is None and not plain else 0
        return score(samples, model, plain)

    learner._rows_without_grad = counting
    return scored


def _bf16_sampled_update(tiny_dir, pi_old: str) -> dict:
    """One SRPO update of a float32 learner on rollouts that a bfloat16 copy sampled."""
    torch.manual_seed(0)
    learner_policy = load_policy(str(tiny_dir))
    sampler = Policy(copy.deepcopy(learner_policy.model).to(torch.bfloat16),
                     learner_policy.tokenizer, "bf16-sampler")
    units, _ = build_units(rollouts_for(sampler, n_tasks=4, group=4), "set")
    learner = Learner(learner_policy, ALGORITHMS["srpo"],
                      LearnerConfig(lr=1e-5, pi_old=pi_old, microbatch_rows=8))
    scored = _count_scored_rows(learner)
    figures = learner.update(units, forced_advantages(units))
    # one optimizer step on the batch: its rows' pi_old is the step's own log-probs, so
    # no row is scored twice
    assert scored[0] == 0
    return figures


def test_a_bfloat16_sampler_shows_in_the_behaviour_weight_not_the_ratio(math_tiny_dir):
    sampler_old = _bf16_sampled_update(math_tiny_dir, "sampler")
    learner_old = _bf16_sampled_update(math_tiny_dir, "learner")
    # the sampler's bf16 log-probs as pi_old: the first step's ratio is numerics, not policy
    assert sampler_old["first_epoch_max_abs_log_ratio"] > 1e-3
    assert sampler_old["mismatch_kl"] == 0.0  # that path cannot see the mismatch
    # the learner's own pass: exactly 1 at the first step; the mismatch is measured apart
    assert learner_old["first_epoch_max_abs_log_ratio"] <= 1e-6
    assert learner_old["clip_fraction"] == 0.0
    assert learner_old["mismatch_kl"] > 1e-7
    assert learner_old["behaviour_weight_mean"] != pytest.approx(1.0, abs=1e-6)
    assert sampler_old["proximal_seconds"] == 0.0
    # one schema on both paths: the sampler's pi_old has a weight of 1
    assert set(sampler_old) == set(learner_old)
    assert sampler_old["behaviour_weight_mean"] == 1.0


def test_the_learners_pass_covers_later_epochs_and_every_minibatch(math_tiny_dir):
    """Two epochs of several mini-batches: every row has a pi_old in every epoch, and
    the first mini-batch of the first epoch still starts at ratio 1."""
    policy = load_policy(str(math_tiny_dir))
    units, _ = build_units(rollouts_for(policy, n_tasks=4, group=4), "set")
    learner = Learner(policy, ALGORITHMS["srpo"],
                      LearnerConfig(lr=1e-3, pi_old="learner", epochs=2, minibatch_episodes=2,
                                    microbatch_rows=4))
    scored = _count_scored_rows(learner)
    first = next(UnitBatch(units, np.ones(len(units))).minibatches(2, random.Random(0)))
    figures = learner.update(units, forced_advantages(units))
    # the pass scored every row but the first optimizer step's (the learner's rng is
    # seeded 0, as here, so its first mini-batch is this one)
    assert scored[0] == sum(u.size for u in units) - sum(u.size for u in first.units) > 0
    assert figures["updates"] >= 4
    assert figures["first_epoch_max_abs_log_ratio"] <= 1e-6
    assert figures["max_abs_log_ratio"] > 1e-6  # later steps moved away from pi_old


@pytest.mark.parametrize("settings, expected", [
    ({}, "sampler"),                                   # hf, float32, this process
    ({"dtype": "bfloat16"}, "learner"),                # 16-bit compute
    ({"dtype": "pure-bfloat16"}, "learner"),
    ({"backend": "vllm"}, "learner"),                  # another engine's kernels
    ({"rollout_workers": 2}, "learner"),               # another process's copy
    ({"pi_old": "sampler", "dtype": "bfloat16"}, "sampler"),   # typed: kept
    ({"pi_old": "learner"}, "learner"),
])
def test_auto_decides_by_where_the_samples_come_from(settings, expected):
    config = TrainConfig(model="x", device="cpu", **settings)
    assert config.learner().pi_old == expected
    assert config.pi_old == settings.get("pi_old", "auto")  # the run records what was asked


def test_pi_old_names_its_choices():
    with pytest.raises(ValueError, match="pi_old='mu': expected 'auto', 'sampler' or "
                                         "'learner'"):
        LearnerConfig(pi_old="mu")


def test_a_float32_learner_in_one_process_keeps_the_samplers_pi_old(math_tiny_dir):
    """The exact case stays bypassed: no extra pass, the recorded log-probs as pi_old."""
    policy = load_policy(str(math_tiny_dir))
    units, _ = build_units(rollouts_for(policy, n_tasks=2, group=2), "set")
    learner = Learner(policy, ALGORITHMS["srpo"], TrainConfig(model="x", device="cpu").learner())
    assert not learner.recompute_old
    figures = learner.update(units, np.array(forced_advantages(units)))
    assert figures["proximal_seconds"] == 0.0 and figures["mismatch_kl"] == 0.0
