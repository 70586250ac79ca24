"""Asynchronous SRPO (issue 39): the behaviour weight at each loss's unit against hand
computed values, stale sets dropped whole, the decoupled loss equal to the synchronous
one when the weights do not move, the bounds of the settings, and whole runs with the
rollouts in a process of their own (shared policy, per-role policies, role adapters)."""

import copy
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from srpo_agents.config import TrainConfig
from srpo_agents.learning.events import ActionUnit, UnitBatch, build_units
from srpo_agents.learning.learner import Learner, LearnerConfig
from srpo_agents.learning.objective import (
    ALGORITHMS,
    POLICY_LOSSES,
    LossConfig,
    LossInputs,
    UnitInfo,
    behaviour_weight,
)
from srpo_agents.rollout.engine import RolloutEngine, Sample
from srpo_agents.running.step import learn
from srpo_agents.tiny import build_tiny_policy
from tests.test_learning import ALPHABET, LetterEnv, relay, say

ROOT = Path(__file__).resolve().parents[1]


def hand_inputs(behaviour_shift: list[list[float]]) -> LossInputs:
    """Two units: a set of two rows (unit 0) and one row (unit 1), two tokens a row.
    ``behaviour_shift[r][t]`` = logp_old - logp_behaviour of row r, token t."""
    logp_old = torch.tensor([[-1.0, -2.0], [-0.5, -1.5], [-1.0, -1.0]])
    shift = torch.tensor(behaviour_shift)
    return LossInputs(logp=logp_old.clone().requires_grad_(), logp_old=logp_old,
                      mask=torch.ones(3, 2), unit_index=torch.tensor([0, 0, 1]),
                      unit_size=torch.tensor([2.0, 1.0]),
                      advantages=torch.tensor([1.0, -1.0]),
                      logp_behaviour=logp_old - shift)


# rows' sequence log-ratios log(pi_prox / mu): 2.0 and 0.0 (unit 0), 1.5 (unit 1)
SHIFT = [[1.0, 1.0], [0.0, 0.0], [0.5, 1.0]]


def test_set_weight_is_the_geometric_mean_of_the_members_truncated_at_the_cap():
    weight, figures = behaviour_weight(hand_inputs(SHIFT), LossConfig(cap=3.0), "units")
    # unit 0: exp((2.0 + 0.0) / 2) = e (a product would be e^2 = 7.39); unit 1: e^1.5 = 4.48
    assert weight.tolist() == pytest.approx([math.e, 3.0])
    assert figures["behaviour_truncated"] == 0.5 and figures["behaviour_masked"] == 0.0
    assert figures["behaviour_weight_mean"] == pytest.approx((math.e + 3.0) / 2)


def test_masking_zeroes_the_units_outside_the_band():
    weight, figures = behaviour_weight(hand_inputs(SHIFT),
                                       LossConfig(correction="mask", cap=3.0), "units")
    assert weight.tolist() == pytest.approx([math.e, 0.0])
    assert figures["behaviour_masked"] == 0.5
    low = [[-1.0, -1.0], [0.0, -0.5], [0.0, 0.0]]  # unit 0: exp(-1.25) = 0.29 < 1/3
    weight, _ = behaviour_weight(hand_inputs(low), LossConfig(correction="mask", cap=3.0),
                                 "units")
    assert weight.tolist() == pytest.approx([0.0, 1.0])


def test_token_weights_are_per_token():
    weight, figures = behaviour_weight(hand_inputs(SHIFT), LossConfig(cap=2.0), "tokens")
    expected = [[2.0, 2.0], [1.0, 1.0], [math.exp(0.5), 2.0]]  # e^1 = 2.72 -> 2
    assert torch.allclose(weight, torch.tensor(expected))
    assert figures["behaviour_truncated"] == pytest.approx(3 / 6)


def test_set_clip_loss_with_the_weight_by_hand():
    """logp = logp_old: rho = 1 for both units, so J = mean_u w_u A_u."""
    loss, _ = POLICY_LOSSES["set_clip"](hand_inputs(SHIFT), LossConfig(cap=3.0))
    assert float(loss.detach()) == pytest.approx(-(math.e * 1.0 + 3.0 * -1.0) / 2)


@pytest.mark.parametrize("name", sorted(POLICY_LOSSES))
def test_every_loss_applies_the_weight_and_only_off_policy(name):
    """With mu = pi_prox the weight is 1 and the loss is the on-policy one; with mu
    away from pi_prox it changes (a loss that ignored the weight would not)."""
    loss_fn, cfg = POLICY_LOSSES[name], LossConfig(cap=3.0)
    on_policy = hand_inputs([[0.0, 0.0]] * 3)
    plain = copy.copy(on_policy)
    plain.logp_behaviour = None
    assert float(loss_fn(on_policy, cfg)[0].detach()) == pytest.approx(
        float(loss_fn(plain, cfg)[0].detach()))
    assert float(loss_fn(hand_inputs(SHIFT), cfg)[0].detach()) != pytest.approx(
        float(loss_fn(plain, cfg)[0].detach()))


def sample(version: int, agent: str = "a") -> Sample:
    return Sample("e", 0, agent, "r", [1, 2], [3], [-0.5], True, "x", version)


def unit(*versions: int) -> ActionUnit:
    info = UnitInfo("t", "e", "answer", 0, "", "p", 1.0)
    return ActionUnit(info, [sample(v, f"a{i}") for i, v in enumerate(versions)])


def test_a_set_is_as_stale_as_its_oldest_member_and_dropped_whole():
    batch = UnitBatch([unit(4, 4), unit(4, 1), unit(2), unit(3, 2, 4)], [1.0, -1.0, 0.5, 0.0])
    assert batch.ages(4) == [0, 3, 2, 2]
    kept, figures = batch.fresh(4, max_staleness=2)
    assert [u.members[0].policy_version for u in kept.units] == [4, 2, 3]
    assert kept.advantages.tolist() == [1.0, 0.5, 0.0]
    assert all(len(u.members) == len(o.members) for u, o in
               zip(kept.units, [batch.units[0], batch.units[2], batch.units[3]], strict=True))
    assert figures == {"staleness_hist": [1, 0, 2, 1], "staleness_mean": 1.75,
                       "sets_dropped_stale": 1}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    prompts = [say(c) for c in ALPHABET] + [relay(c) for c in ALPHABET]
    return build_tiny_policy(prompts, tmp_path_factory.mktemp("tiny"), hidden_size=32,
                             num_layers=1, num_heads=2, seed=0)


def pair_rollouts(policy, tasks: int = 4, group: int = 4):
    engine = RolloutEngine(policy, max_new_tokens=3, seed=0)
    envs = [LetterEnv("pair", seed=i) for i in range(tasks * group)]
    return engine.run(envs, [{"task_index": t, "episode_id": f"t{t}-g{g}"}
                             for t in range(tasks) for g in range(group)])


@pytest.mark.parametrize("algo", ["srpo", "grpo", "magrpo"])
def test_one_step_off_at_lr_0_gives_the_synchronous_loss(tiny, algo):
    """At learning rate 0 the weights of version 1 are those of version 0, so pi_prox
    = mu up to float noise: the decoupled loss of a batch one version old is the
    synchronous loss of the same batch, and the weights stay put."""
    rollouts = pair_rollouts(tiny)
    units, _ = build_units(rollouts, ALGORITHMS[algo].unit)
    advantages = np.random.default_rng(0).normal(size=len(units))
    losses = {}
    for staleness in (0, 1):
        policy = copy.deepcopy(tiny)
        learner = Learner(policy, ALGORITHMS[algo], LearnerConfig(max_staleness=staleness))
        for group in learner.optimizer.param_groups:
            group["lr"] = 0.0
        result = learner.update(units, advantages)
        losses[staleness] = result["loss"]
        for before, after in zip(tiny.model.parameters(), policy.model.parameters(),
                                 strict=True):
            assert torch.equal(before, after)
        if staleness:
            assert result["mismatch_kl"] < 1e-6 and "proximal_seconds" in result
    assert losses[0] != 0.0
    assert losses[1] == pytest.approx(losses[0], rel=1e-5, abs=1e-6)


def test_learn_drops_stale_sets_and_counts_them(tiny):
    rollouts = pair_rollouts(tiny)
    for rollout in rollouts[:4]:  # the first task's episodes: three versions old
        for s in rollout.samples.values():
            s.policy_version = -2
    policy = copy.deepcopy(tiny)
    learner = Learner(policy, ALGORITHMS["srpo"], LearnerConfig(max_staleness=2))
    _, update = learn(rollouts, ALGORITHMS["srpo"], lambda units, eps: np.ones(len(units)),
                      {"shared": learner}, version=1, max_staleness=2)
    assert update["sets_dropped_stale"] == 4 and update["units"] == 12
    assert update["staleness_hist"] == [0, 12, 0, 4]


@pytest.mark.parametrize("changes,message", [
    ({"max_staleness": -1}, r"max_staleness=-1: expected an int >= 0"),
    ({"max_staleness": 4, "proximal": "behaviour"}, r"proximal='behaviour' with max_staleness=4"),
    ({"proximal": "old"}, r"proximal='old': expected 'recompute' or 'behaviour'"),
    ({"behaviour_correction": "clip"}, r"behaviour_correction='clip': expected one of"),
    ({"behaviour_cap": 1.0}, r"behaviour_cap=1.0: expected a finite number > 1"),
])
def test_bad_async_settings_are_named(changes, message):
    with pytest.raises(ValueError, match=message):
        LearnerConfig(**changes)


def test_a_rollout_device_is_cpu_or_cuda():
    with pytest.raises(ValueError, match="rollout_device='tpu': expected 'cpu', 'cuda'"):
        TrainConfig(rollout_device="tpu")
    assert TrainConfig(rollout_device="cuda:1", max_staleness=1).rollout_device == "cuda:1"


def test_async_needs_one_learner_process():
    with pytest.raises(ValueError, match="max_staleness=1 with data_parallel"):
        TrainConfig(max_staleness=1, data_parallel=True)


def _train(out: Path, *extra: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT),
           "SRPO_CACHE_DIR": str(cwd / "cache")}
    env.pop("SRPO_KILL_AT", None)
    args = ["--env", "SRPO-Countdown-v0", "--workflow", "parallel", "--n-agents", "2",
            "--steps", "3", "--group-size", "2", "--tasks-per-step", "2",
            "--eval-tasks", "2", "--eval-k", "1", "--max-new-tokens", "6", "--lr", "1e-3",
            "--model", "tiny", "--warmstart-steps", "2", "--warmstart-target", "1.0",
            "--warmstart-dir", str(cwd / "warm"), "--out", str(out), *extra]
    return subprocess.run([sys.executable, "-m", "srpo_agents.cli", "train", *args],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
@pytest.mark.heavy
@pytest.mark.parametrize("roles", ["shared", "per-role-policies", "per-role-adapters",
                                   "rollout-device"])
def test_a_run_with_the_rollouts_in_their_own_process(tmp_path_factory, roles):
    if roles == "per-role-adapters":
        pytest.importorskip("peft")
    root = tmp_path_factory.getbasetemp() / "async-runs"
    root.mkdir(exist_ok=True)
    extra = {"shared": [], "per-role-policies": ["--per-role-policies"],
             "per-role-adapters": ["--per-role-adapters", "lora"],
             # the process places its copy on a device of its own (a GPU there; here the
             # CPU, through the same code)
             "rollout-device": ["--rollout-device", "cpu"]}[roles]
    done = _train(root / roles, "--max-staleness", "1", *extra, cwd=root)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [json.loads(line) for line in (root / roles / "metrics.jsonl").read_text()
            .splitlines()]
    assert [r["step"] for r in rows] == [0, 1, 2]
    # step 0 plays the starting weights; later steps the weights one update older
    assert [r["generated_with_version"] for r in rows] == [0, 0, 1]
    assert [r["staleness_hist"] for r in rows] == [[rows[0]["units"]], [0, rows[1]["units"]],
                                                   [0, rows[2]["units"]]]
    # the log's line per step, and the run file that repeats the run
    assert "step 3/3: reward" in done.stdout + done.stderr
    recorded = json.loads((root / roles / "config.json").read_text())
    assert recorded["max_staleness"] == 1 and recorded["out"] == str(root / roles)
    for row in rows:
        assert row["sets_dropped_stale"] == 0 and row["updates"] >= 1
        assert {"mismatch_kl", "behaviour_weight_mean", "overlap_seconds",
                "rollout_wait_seconds", "proximal_seconds"} <= set(row)
