"""Held-out evaluations shared with helper processes (``eval_processes``): the figures
one process computes from the same episodes, the weights sent when they change, a
helper that dies named, and the settings the helpers cannot work with refused."""

from __future__ import annotations

import dataclasses
import os

import pytest
import torch

from srpo_agents.config import TrainConfig
from srpo_agents.models.registry import prepare_policy
from srpo_agents.rollout.engine import engine_for
from srpo_agents.running.checkpoint import SHARED
from srpo_agents.running.eval_process import EvalProcesses
from srpo_agents.running.evaluate import evaluate, held_out
from srpo_agents.running.metrics_log import read_metrics_rows
from srpo_agents.running.train import train

FIGURES = ("tasks", "avg_at_k", "pass_at_k", "tokens_per_task", "per_task_avg",
           "per_task_pass", "per_task_votes", "cut_off_rate")


def greedy_config(tiny_dir, out) -> TrainConfig:
    """Greedy held-out episodes: the same in any process, so the split can be checked
    against one process episode by episode."""
    return TrainConfig(env="SRPO-Math-v0", workflow="parallel", n_agents=2,
                       model=str(tiny_dir), eval_tasks=7, eval_k=2, max_new_tokens=8,
                       eval_temperature=0.0, out=str(out))


@pytest.fixture
def run(math_tiny_dir, tmp_path, one_torch_thread):
    config = greedy_config(math_tiny_dir, tmp_path)
    policy = prepare_policy(config, tmp_path, lambda *_: None)[0]
    helpers = EvalProcesses(config, policy, {}, 2)
    yield config, policy, helpers
    helpers.shutdown()


def test_helpers_give_the_figures_of_one_process(run):
    config, policy, helpers = run
    engine = engine_for(config, policy)
    envs, indices = held_out(config, policy.count_tokens)
    alone = evaluate(engine, envs, indices, config.eval_k, votes=True)
    shared = evaluate(engine, envs, indices, config.eval_k, votes=True, helpers=helpers,
                      split="test")
    assert alone["tasks"] == 7 and 0 < alone["tokens_per_task"]
    assert {key: shared[key] for key in FIGURES} == {key: alone[key] for key in FIGURES}
    assert outputs(engine, envs, indices, config.eval_k, helpers) == outputs(
        engine, envs, indices, config.eval_k)
    # the validation split is a pool of its own in the helpers too
    envs, indices = held_out(config, policy.count_tokens, "validation")
    alone = evaluate(engine, envs, indices, config.eval_k, votes=True)
    shared = evaluate(engine, envs, indices, config.eval_k, votes=True, helpers=helpers,
                      split="validation")
    assert {key: shared[key] for key in FIGURES} == {key: alone[key] for key in FIGURES}


def outputs(engine, envs, indices, k, helpers=None) -> list[list[int]]:
    """Every sampled id list of a greedy evaluation, in task order. The votes alone
    cannot tell two policies apart: the tiny model's 8 tokens are often no answer at
    all, and then every vote is None (as on CI's machine)."""
    played = []
    evaluate(engine, envs, indices, k, keep=played, helpers=helpers)
    return [sample.response_ids for rollout in played
            for sample in rollout.samples.values()]


def test_new_weights_reach_the_helpers_when_the_version_moves(run):
    config, policy, helpers = run
    engine = engine_for(config, policy)
    envs, indices = held_out(config, policy.count_tokens)
    before = outputs(engine, envs, indices, config.eval_k)
    torch.manual_seed(0)
    with torch.no_grad():  # a different policy: its greedy outputs change
        for parameter in policy.model.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.5)
    moved = outputs(engine, envs, indices, config.eval_k)
    assert moved != before
    helpers.follow({SHARED: policy}, version=0)   # the version they hold: nothing sent
    # their share of the tasks is played by the weights they started with
    assert outputs(engine, envs, indices, config.eval_k, helpers) != moved
    helpers.follow({SHARED: policy}, version=1)
    assert outputs(engine, envs, indices, config.eval_k, helpers) == moved


def test_a_helper_that_dies_is_named(run):
    config, policy, helpers = run
    engine = engine_for(config, policy)
    envs, indices = held_out(config, policy.count_tokens)
    victim = helpers._helpers[1][1]
    os.kill(victim.pid, 9)
    victim.join(timeout=30)
    with pytest.raises(RuntimeError, match="evaluation helper srpo-eval-1 (is gone|died)"):
        evaluate(engine, envs, indices, config.eval_k, helpers=helpers)


@pytest.mark.parametrize(("settings", "clash"), [
    (dict(data_parallel=True), "data_parallel"),
    (dict(rollout_workers=2), "rollout_workers"),
    (dict(backend="vllm"), "backend='vllm'"),
])
def test_settings_the_helpers_cannot_share_are_refused(settings, clash):
    with pytest.raises(ValueError, match=f"eval_processes=1 with {clash}"):
        TrainConfig(eval_processes=1, **settings)
    with pytest.raises(ValueError, match="eval_processes=-1"):
        TrainConfig(eval_processes=-1)


def test_a_run_evaluates_with_a_helper_and_closes_it(math_tiny_dir, tmp_path,
                                                     one_torch_thread):
    """before, the validation curve and after, each over every task; no helper is left."""
    import multiprocessing

    config = dataclasses.replace(greedy_config(math_tiny_dir, tmp_path), steps=2,
                                 tasks_per_step=2, group_size=2, eval_every=1,
                                 curve_tasks=3, eval_processes=1, save_every=0)
    summary = train(config, log=lambda *_: None)
    assert summary["before"]["tasks"] == summary["after"]["tasks"] == 7
    assert len(summary["after"]["per_task_avg"]) == 7
    rows = read_metrics_rows(tmp_path / "metrics.jsonl")
    assert [row.get("eval_tasks") for row in rows] == [3, None]
    assert not [p for p in multiprocessing.active_children() if p.name.startswith("srpo-eval")]

