"""The learner end to end on a tiny policy: ratio 1 at the first epoch, dropped events,
event-atomic batches, every parameter updated, exact resume, and the CLI."""

import json
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from srpo_agents.config import TrainConfig
from srpo_agents.learning.events import ActionUnit, UnitBatch, build_units
from srpo_agents.learning.learner import Learner, LearnerConfig
from srpo_agents.learning.objective import ADVANTAGE_ESTIMATORS, ALGORITHMS, UnitInfo
from srpo_agents.rollout.engine import Rollout, RolloutEngine, Sample
from srpo_agents.rollout.envs import env_factory
from srpo_agents.running.train import train
from srpo_agents.tiny import TinyConfig
from srpo_envs.transition import ConsumedOutput, Transition

CONFIG = dict(env="SRPO-Math-v0", workflow="parallel", n_agents=3, compact_prompts=True)


@pytest.fixture(scope="module")
def tiny_dir(math_tiny_dir):
    return math_tiny_dir


def fresh_policy(tiny_dir):
    from srpo_agents.models.policy import load_policy

    return load_policy(str(tiny_dir))


def rollouts_for(policy, n_tasks=4, group=4, max_new_tokens=24, **engine_kwargs):
    make = env_factory(TrainConfig(model="x", **CONFIG), "train")
    envs = [make(i) for i in range(n_tasks * group)]
    engine = RolloutEngine(policy, max_new_tokens=max_new_tokens, seed=0, **engine_kwargs)
    options = [{"task_index": t, "episode_id": f"t{t}-g{g}"}
               for t in range(n_tasks) for g in range(group)]
    return engine.run(envs, options)


def forced_advantages(units):
    """Alternating +-1 so every unit pushes the parameters whatever the rewards were."""
    return np.array([1.0 if i % 2 else -1.0 for i in range(len(units))])


def test_first_epoch_ratio_is_exactly_one(tiny_dir):
    policy = fresh_policy(tiny_dir)
    units, stats = build_units(rollouts_for(policy), "set")
    assert stats.events_dropped == 0 and stats.mean_set_size == pytest.approx(2.0)
    learner = Learner(policy, ALGORITHMS["srpo"], LearnerConfig(lr=1e-3, microbatch_rows=7))
    metrics = learner.update(units, forced_advantages(units))
    assert metrics["first_epoch_max_abs_log_ratio"] < 1e-5


def _sample(step, agent):
    return Sample("ep", step, agent, "solver", [1, 2], [3, 4], [-1.0, -1.0], True, "x", 0)


def test_event_with_missing_member_is_dropped_and_counted():
    consumed = tuple(ConsumedOutput(f"solver_{i}", "solver", "p", "x") for i in range(2))
    short = Transition("ep", "t", 0, "solve", "s0", consumed,
                       ("solver_0", "solver_1", "solver_2"), 0.0, False, False)
    whole = Transition("ep", "t", 1, "aggregate", "s1",
                       (ConsumedOutput("aggregator_0", "aggregator", "p", "x"),),
                       ("aggregator_0",), 1.0, True, False)
    samples = {(0, "solver_0"): _sample(0, "solver_0"), (0, "solver_1"): _sample(0, "solver_1"),
               (1, "aggregator_0"): _sample(1, "aggregator_0")}
    units, stats = build_units([Rollout("ep", "t", [short, whole], samples)], "set")
    assert (stats.events, stats.events_dropped) == (2, 1)
    assert [u.info.event_type for u in units] == ["aggregate"]
    # a consumed output without its sample (a lost worker) drops its event too
    del samples[(1, "aggregator_0")]
    units, stats = build_units([Rollout("ep", "t", [short, whole], samples)], "output")
    assert (units, stats.events_dropped) == ([], 2)


def test_unfinished_generations_withheld_from_the_env_drop_their_events(tiny_dir):
    rollouts = rollouts_for(fresh_policy(tiny_dir), n_tasks=2, group=2, max_new_tokens=2,
                            drop_unfinished=True)
    units, stats = build_units(rollouts, "set")
    assert stats.events_dropped > 0 and stats.events_dropped == stats.events - len(units)
    for unit in units:
        assert all(m.finished for m in unit.members)


def test_member_rows_never_split_across_minibatches(tiny_dir):
    sizes = [3, 1, 5, 2, 1, 4]
    units = [ActionUnit(UnitInfo("t", f"e{i}", "solve", 0, "", "s", 0.0),
                        [_sample(0, f"a{j}") for j in range(k)]) for i, k in enumerate(sizes)]
    seen = []
    whole = UnitBatch(units, np.zeros(len(units)))
    for batch in whole.minibatches(2, random.Random(0)):  # two episodes of one unit each
        assert len(batch) <= 2
        seen += [id(u) for u in batch.units]
    assert sorted(seen) == sorted(id(u) for u in units)
    learner = Learner(fresh_policy(tiny_dir), ALGORITHMS["srpo"], LearnerConfig(microbatch_rows=4))
    micro = learner._microbatches(UnitBatch(units, np.arange(len(units), dtype=float)))
    assert sorted(a for m in micro for a in m.advantages) == list(range(len(units)))
    # each unit keeps its own advantage wherever it lands
    assert all(units.index(u) == a for m in micro for u, a in zip(m.units, m.advantages,
                                                                  strict=True))
    assert all(sum(u.size for u in m.units) <= 4 or len(m) == 1 for m in micro)


def test_shared_prefixes_order_microbatches_by_role_and_response_length(tiny_dir):
    """Issue 61's less padding: with shared prefixes, a micro-batch takes rows of one role
    and similar response length from any task (they share the role's template); without,
    issue 50's order keeps a prompt's rows together. Padded response positions fall."""
    def unit(task: int, role: str, length: int) -> ActionUnit:
        prompt = [7] * 20 + [int(role == "solver"), task]  # a role's template, then the task
        sample = Sample(f"e{task}-{length}", 0, role, role, prompt, [5] * length,
                        [-1.0] * length, True, "x", 0)
        return ActionUnit(UnitInfo(f"t{task}", sample.episode_id, "solve", 0, "", "s", 0.0),
                          [sample])

    # two tasks, each with a short and a long answer from each role
    units = [unit(task, role, length) for task in (0, 1) for role in ("solver", "verifier")
             for length in (2, 30)]
    batch = UnitBatch(units, np.zeros(len(units)))
    policy = fresh_policy(tiny_dir)

    def micro_shapes(**config) -> list[list[tuple[str, int]]]:
        micros = Learner(policy, ALGORITHMS["srpo"], LearnerConfig(microbatch_rows=2, **config)
                         )._microbatches(batch)
        return [[(u.members[0].role, len(u.members[0].response_ids)) for u in m.units]
                for m in micros]

    def padded(shapes) -> int:
        return sum(len(m) * max(n for _, n in m) for m in shapes)

    by_response = micro_shapes()
    assert by_response == [[("solver", 2)] * 2, [("solver", 30)] * 2,
                           [("verifier", 2)] * 2, [("verifier", 30)] * 2]
    by_prompt = micro_shapes(share_prompt_prefix=False)
    assert all(len({u for u, _ in m}) == 1 for m in by_prompt)          # one role a batch
    assert padded(by_response) == 2 * 2 + 2 * 30 + 2 * 2 + 2 * 30 < padded(by_prompt) == 4 * 2 * 30


@pytest.mark.parametrize("algo", sorted(ALGORITHMS))
def test_every_trainable_parameter_changes_after_one_update(tiny_dir, algo):
    policy = fresh_policy(tiny_dir)
    before = {n: p.detach().clone() for n, p in policy.model.named_parameters()}
    algorithm = ALGORITHMS[algo]
    units, _ = build_units(rollouts_for(policy, n_tasks=2, group=2), algorithm.unit)
    Learner(policy, algorithm, LearnerConfig(lr=1e-2)).update(units, forced_advantages(units))
    unchanged = [n for n, p in policy.model.named_parameters()
                 if p.requires_grad and torch.equal(p.detach(), before[n])]
    assert unchanged == []


def test_microbatching_does_not_change_the_gradient(tiny_dir):
    # Compared before the optimizer: Adam divides by sqrt(v), which turns float
    # summation-order noise on near-zero gradients into visible parameter differences.
    policy = fresh_policy(tiny_dir)
    units, _ = build_units(rollouts_for(policy, n_tasks=2, group=2), "set")
    grads = []
    for rows in (1000, 3):
        model = fresh_policy(tiny_dir)
        learner = Learner(model, ALGORITHMS["srpo"], LearnerConfig(lr=1e-2, microbatch_rows=rows))
        learner.optimizer.step = lambda: None  # keep the weights: compare the gradients
        learner.update(units, forced_advantages(units))
        grads.append(torch.cat([p.grad.flatten() for p in model.model.parameters()]))
    assert len(learner._microbatches(UnitBatch(units, np.zeros(len(units))))) > 1
    torch.testing.assert_close(grads[0], grads[1], rtol=1e-4, atol=1e-7)


def _microbatch_gradients(tiny_dir, algorithm) -> list[torch.Tensor]:
    policy = fresh_policy(tiny_dir)
    units, _ = build_units(rollouts_for(policy, n_tasks=2, group=2), "output")
    grads = []
    for rows in (1000, 3):
        model = fresh_policy(tiny_dir)
        learner = Learner(model, algorithm, LearnerConfig(lr=1e-2, microbatch_rows=rows))
        learner.optimizer.step = lambda: None
        learner.update(units, forced_advantages(units))
        grads.append(torch.cat([p.grad.flatten() for p in model.model.parameters()]))
    return grads


def test_a_registered_loss_is_weighted_at_the_level_it_declares(tiny_dir):
    """A new loss declares what it averages over in the registry, and the learner weights
    its micro-batches by that: a token-mean loss registered as "tokens" sums to the
    one-batch gradient; the same loss registered as "units" does not (the control)."""
    from srpo_agents.learning.objective import POLICY_LOSSES, Algorithm, register_policy_loss

    token_mean = POLICY_LOSSES["token_clip"].fn
    try:
        register_policy_loss("test_tokens", averages_over="tokens")(token_mean)
        register_policy_loss("test_units", averages_over="units")(token_mean)
        right = _microbatch_gradients(tiny_dir, Algorithm("output", "task", "test_tokens"))
        wrong = _microbatch_gradients(tiny_dir, Algorithm("output", "task", "test_units"))
    finally:
        POLICY_LOSSES.pop("test_tokens", None)
        POLICY_LOSSES.pop("test_units", None)
    torch.testing.assert_close(right[0], right[1], rtol=1e-4, atol=1e-7)
    assert not torch.allclose(wrong[0], wrong[1], rtol=1e-3, atol=1e-6)
    with pytest.raises(ValueError, match="averages_over='sets'"):
        register_policy_loss("test_bad", averages_over="sets")


def small_config(tiny_dir, out, steps, resume=False):
    return TrainConfig(model=str(tiny_dir), steps=steps, group_size=2, tasks_per_step=3,
                       eval_tasks=3, eval_k=2, max_new_tokens=12, lr=1e-3, save_every=1,
                       out=str(out), resume=resume, **CONFIG)


def test_resume_reproduces_the_next_steps_metrics(tiny_dir, tmp_path):
    straight = train(small_config(tiny_dir, tmp_path / "a", steps=3), log=lambda *_: None)
    train(small_config(tiny_dir, tmp_path / "b", steps=2), log=lambda *_: None)
    resumed = train(small_config(tiny_dir, tmp_path / "b", steps=3, resume=True),
                    log=lambda *_: None)

    def rows(run):
        lines = (tmp_path / run / "metrics.jsonl").read_text().splitlines()
        return [{k: v for k, v in json.loads(x).items() if not k.endswith("seconds")}
                for x in lines]

    assert [r["step"] for r in rows("b")] == [0, 1, 2]
    assert rows("a") == rows("b")
    assert straight["after"] == resumed["after"]
    summary = json.loads((tmp_path / "a" / "summary.json").read_text())
    for key in ("before", "after"):
        assert set(summary[key]) >= {"avg_at_k", "pass_at_k", "k", "tokens_per_task",
                                     "tool_calls_per_task"}
        assert 0 <= summary[key]["avg_at_k"] <= summary[key]["pass_at_k"] <= 1
    assert (tmp_path / "a" / "learning_curve.png").stat().st_size > 1000
    # the diagnostics of every step, and updates counted across the resume
    assert [r["updates_total"] for r in rows("b")] == [1, 2, 3]
    for row in rows("b"):
        assert 0.0 <= row["mixed_group_fraction"] <= 1.0 and row["entropy"] > 0
        assert row["approx_kl"] >= 0.0 and 0.0 <= row["clip_fraction"] <= 1.0
    times = summary["time_breakdown"]
    assert set(times) == {"warm_start", "generation", "env", "update", "evaluation", "other",
                          "total"}
    assert times["generation"] > 0 and times["update"] > 0 and times["evaluation"] > 0
    assert sum(v for k, v in times.items() if k != "total") == pytest.approx(
        times["total"], abs=0.1)
    assert summary["difference"]["tasks"] == 3
    assert summary["difference"]["avg_at_k"] == pytest.approx(
        summary["after"]["avg_at_k"] - summary["before"]["avg_at_k"])


def test_shared_prompt_pass_equals_one_pass_per_row(tiny_dir):
    """Rows that share a prompt run it once; log-probs and gradients match running every
    row's prompt + response on its own."""
    policy = fresh_policy(tiny_dir)
    units, _ = build_units(rollouts_for(policy, n_tasks=2, group=3), "set")
    samples = [m for u in units for m in u.members]
    assert len({tuple(s.prompt_ids) for s in samples}) < len(samples)
    learner = Learner(policy, ALGORITHMS["srpo"], LearnerConfig())
    logp, mask, _ = learner.response_logprobs(policy.model, samples)
    assert_one_pass_per_row_matches(learner, policy, samples, logp, mask)


def assert_one_pass_per_row_matches(learner, policy, samples, logp, mask) -> None:
    """``logp`` (from a pass that shared prompt tokens) and its gradients equal those of
    every row's prompt + response run on its own."""
    logp.sum().backward()
    shared_grads = [p.grad.clone() for p in policy.model.parameters()]
    policy.model.zero_grad()
    width = logp.shape[1]
    targets = torch.tensor([s.response_ids + [0] * (width - len(s.response_ids))
                            for s in samples])
    full = torch.log_softmax(learner._full_logits(policy.model, samples).float(), -1)
    own = full.gather(-1, targets.unsqueeze(-1)).squeeze(-1) * mask
    own.sum().backward()
    torch.testing.assert_close(logp, own, rtol=0, atol=1e-5)
    # float32 sums in another order: elements differ by up to ~1e-6 of the parameter's
    # largest gradient (measured); a wrong mask, position or cache row moves them by
    # orders of magnitude more.
    for shared, alone in zip(shared_grads, policy.model.parameters(), strict=True):
        scale = float(alone.grad.abs().max())
        torch.testing.assert_close(shared, alone.grad, rtol=1e-4, atol=1e-5 * scale)
    policy.model.zero_grad()


def shared_prefix_samples(policy):
    """Rows as a verifier's: one template and question (20 tokens), then each rollout's
    own solution (tails of 1 to 7 tokens), a prompt repeated, and a prompt of another
    task that shares only 3 tokens (its own group)."""
    import dataclasses

    units, _ = build_units(rollouts_for(policy, n_tasks=2, group=3), "set")
    samples = [m for u in units for m in u.members][:7]
    head = [(7 * i + 3) % 40 + 2 for i in range(20)]
    tails = [[5], [5, 9, 11], [6, 6, 6, 6, 6, 6, 6], [5, 9], [5, 9, 11], [12, 3]]
    prompts = [head + t for t in tails] + [head[:3] + [30] * 25]
    return [dataclasses.replace(s, prompt_ids=p) for s, p in zip(samples, prompts, strict=True)]


def test_prompts_sharing_leading_tokens_run_them_once_and_match_one_pass_per_row(tiny_dir):
    """Issue 61's prefix sharing: distinct prompts with shared leading tokens (a task's
    verifier prompts) run those tokens once; log-probs and gradients match every row's
    prompt + response run on its own, as the repeated-prompt pass above does."""
    from srpo_agents.learning.prompt_cache import prefix_groups, shares_tokens

    policy = fresh_policy(tiny_dir)
    samples = shared_prefix_samples(policy)
    distinct = list(dict.fromkeys(tuple(s.prompt_ids) for s in samples))
    group_of, shared = prefix_groups(distinct)
    assert len(distinct) == 6 and sorted(shared) == [20, 27]     # two groups: 5 prompts, 1
    assert shares_tokens(distinct, len(distinct), (group_of, shared))
    learner = Learner(policy, ALGORITHMS["srpo"], LearnerConfig())
    calls = []
    hook = policy.model.register_forward_pre_hook(
        lambda _, args, kwargs: calls.append(kwargs["input_ids"].shape), with_kwargs=True)
    logp, mask, _ = learner.response_logprobs(policy.model, samples)
    hook.remove()
    # three passes: 2 prefixes of 20 and 27 tokens, 6 tails of up to 7, 7 responses
    assert [tuple(c) for c in calls][:2] == [(2, 27), (6, 7)] and calls[2][0] == 7
    assert_one_pass_per_row_matches(learner, policy, samples, logp, mask)
    # --no-share-prompt-prefix (issue 50's runs): the repeated prompt alone is shared
    plain = Learner(policy, ALGORITHMS["srpo"], LearnerConfig(share_prompt_prefix=False))
    calls.clear()
    hook = policy.model.register_forward_pre_hook(
        lambda _, args, kwargs: calls.append(kwargs["input_ids"].shape), with_kwargs=True)
    with torch.no_grad():
        again, _, _ = plain.response_logprobs(policy.model, samples)
    hook.remove()
    assert tuple(calls[0]) == (6, 28) and len(calls) == 2
    torch.testing.assert_close(again, logp.detach(), rtol=0, atol=1e-5)


def test_prefix_groups_keep_a_token_of_each_prompt_and_split_by_role():
    from srpo_agents.learning.prompt_cache import prefix_groups

    head = tuple(range(100, 120))
    # a prompt that is the others' prefix keeps its last token for the second pass
    group_of, shared = prefix_groups([head, head + (1,), head + (2, 3)])
    assert group_of == [0, 0, 0] and shared == [19]
    # the same tokens under two roles' adapters: a prefix per role
    group_of, shared = prefix_groups([head + (1,), head + (2,)], roles=["solver", "verifier"])
    assert group_of == [0, 1] and shared == [20, 20]
    # fewer shared tokens than MIN_SHARED_PREFIX: each alone
    assert prefix_groups([(1, 2, 3, 4), (1, 2, 3, 5)])[1] == [3, 3]


def test_dynamic_sampling_leaves_out_groups_with_one_return(tiny_dir):
    from srpo_agents.running.step import mixed_group_fraction, train_step

    policy = fresh_policy(tiny_dir)
    make = env_factory(TrainConfig(model="x", **CONFIG), "train")
    envs = [make(i) for i in range(8)]
    engine = RolloutEngine(policy, max_new_tokens=12, seed=0)
    options = [{"task_index": t, "episode_id": f"t{t}-g{g}"} for t in range(4) for g in range(2)]
    algorithm = ALGORITHMS["srpo"]
    seen = {}

    def estimator(units, eps=1e-6):
        # task 0's episodes get different returns, the others one return each
        seen["tasks"] = [u.task_id for u in units]
        return np.array([1.0 if u.task_id == units[0].task_id else 0.0 for u in units])

    learner = Learner(policy, algorithm, LearnerConfig())
    original = RolloutEngine.run

    def run(self, envs, options):
        rollouts = original(self, envs, options)
        for r in rollouts:  # returns: task 0 mixed (1, 0), every other task all 0
            object.__setattr__(r.transitions[-1], "reward", float(
                r.task_id == rollouts[0].task_id and r.episode_id.endswith("g0")))
        return rollouts

    engine.run = run.__get__(engine)
    rollouts, stats, update = train_step(engine, envs, options, algorithm, estimator,
                                         {"shared": learner}, dynamic_sampling=True)
    assert mixed_group_fraction(rollouts) == 0.25
    assert update["units"] == 2 * 2            # task 0's two episodes: a set and an aggregate
    assert len(seen["tasks"]) == 4 * 2 * 2     # every unit got an advantage first
    _, _, update = train_step(engine, envs, options, algorithm, estimator, {"shared": learner})
    assert update["units"] == 4 * 2 * 2



def test_shared_start_evaluation_matches_and_pairs_step_zero(tiny_dir, tmp_path):
    """``evaluate_start`` measures what ``train`` would have measured as "before"; runs
    given that result skip the evaluation, so two algorithms with one seed sample the very
    same step-0 rollouts (the harness's pairing)."""
    from dataclasses import replace

    from srpo_agents.running.evaluate import evaluate_start

    config = small_config(tiny_dir, tmp_path / "own", steps=1)
    own = train(config, log=lambda *_: None)
    shared = evaluate_start(replace(config, out=str(tmp_path / "start")), log=lambda *_: None)
    assert shared == own["before"]
    firsts = {}
    for algo in ("srpo", "grpo"):
        run = replace(config, algo=algo, steps=2, out=str(tmp_path / algo))
        summary = train(run, log=lambda *_: None, before=shared)
        assert summary["before"] == shared
        lines = (tmp_path / algo / "metrics.jsonl").read_text().splitlines()
        firsts[algo] = [json.loads(x) for x in lines]
    for key in ("reward", "accuracy", "tokens_per_task", "response_length"):
        assert firsts["srpo"][0][key] == firsts["grpo"][0][key]


@pytest.mark.parametrize("env_args", [
    ["--env", "SRPO-Math-v0", "--workflow", "parallel", "--n-agents", "2"],
    ["--env", "SRPO-Search-v0", "--workflow", "single"],
])
@pytest.mark.slow
def test_cli_smoke_two_steps(tiny_dir, tmp_path, env_args):
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "srpo_agents.cli", "train", *env_args, "--algo", "srpo",
           "--model", str(tiny_dir), "--compact-prompts", "--steps", "2", "--group-size", "2",
           "--tasks-per-step", "2", "--eval-tasks", "2", "--eval-k", "2",
           "--max-new-tokens", "12", "--out", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600,
                          env={**__import__("os").environ, "SRPO_CACHE_DIR": str(tmp_path)})
    assert done.returncode == 0, done.stderr[-2000:]
    assert "| avg@2 |" in done.stdout
    assert len((out / "metrics.jsonl").read_text().splitlines()) == 2
    summary = json.loads((out / "summary.json").read_text())
    assert summary["config"]["env"] == env_args[1]
    evaluated = subprocess.run(
        [sys.executable, "-m", "srpo_agents.cli", "eval", "--checkpoint", str(out), *env_args,
         "--compact-prompts", "--k", "2", "--tasks", "2", "--max-new-tokens", "12"],
        capture_output=True, text=True, timeout=600,
        env={**__import__("os").environ, "SRPO_CACHE_DIR": str(tmp_path)})
    assert evaluated.returncode == 0, evaluated.stderr[-2000:]
    assert "pass@2" in evaluated.stdout



def test_bad_config_names_the_field():
    with pytest.raises(ValueError, match="algo='ppo'"):
        TrainConfig(algo="ppo")
    with pytest.raises(ValueError, match="group_size=1"):
        TrainConfig(group_size=1)
    with pytest.raises(ValueError, match="warmstart_decay=True needs warmstart_steps"):
        TinyConfig(warmstart_decay=True)
    assert ADVANTAGE_ESTIMATORS["task"]


@pytest.mark.parametrize("env_id", ["SRPO-Math-v0", "SRPO-Search-v0"])
def test_warm_start_imitates_reference_trajectories_and_caches(tmp_path, env_id, monkeypatch):
    from srpo_agents.tiny.warmstart import reference_examples, warm_start

    monkeypatch.setenv("SRPO_CACHE_DIR", str(tmp_path / "cache"))
    config = TrainConfig(env=env_id, workflow="parallel", n_agents=2, model="tiny")
    make_train, make_test = env_factory(config, "train"), env_factory(config, "test")
    examples = reference_examples(make_train, episodes=20, seed=0, env_name=env_id)
    roles = {role for role, _, _ in examples}
    assert roles == ({"solver", "aggregator"} if env_id == "SRPO-Math-v0"
                     else {"searcher", "aggregator"})
    if env_id == "SRPO-Math-v0":  # solvers imitate only reference solutions
        assert all("\\boxed{" in text for role, _, text in examples if role == "solver")
    logs = []
    policy, meta = warm_start(tmp_path, make_train, make_test, minutes=0.02, target=1.1,
                              seed=0, max_new_tokens=8, episodes=20, check_every=2,
                              eval_tasks=4, env_name=env_id, log=logs.append)
    assert meta["steps"] >= 1 and 0.0 <= meta["accuracy"] <= 1.0
    again, meta_again = warm_start(tmp_path, make_train, make_test, minutes=0.02, target=1.1,
                                   seed=0, max_new_tokens=8, episodes=20, check_every=2,
                                   eval_tasks=4, env_name=env_id, log=logs.append)
    assert meta_again == {**meta, "cached": True} and "cached" in logs[-1]
    for a, b in zip(policy.model.parameters(), again.model.parameters(), strict=True):
        assert torch.equal(a, b)


def test_warm_start_curriculum_trains_the_first_roles_alone_first(tmp_path, monkeypatch):
    import srpo_agents.tiny.warmstart as warmstart

    monkeypatch.setenv("SRPO_CACHE_DIR", str(tmp_path / "cache"))
    config = TrainConfig(env="SRPO-Search-v0", workflow="parallel", n_agents=2, model="tiny",
                         model_options=dict(warmstart_steps=4, warmstart_first_steps=2,
                                            warmstart_first_roles=("searcher",)))
    make_train, make_test = env_factory(config, "train"), env_factory(config, "test")
    seen, real_loss = [], warmstart.sft_loss

    def recording_loss(policy, batch):
        seen.append({"searcher" if "Search for:" in policy.decode(ids[:n]) else "other"
                     for ids, n in batch})
        return real_loss(policy, batch)

    monkeypatch.setattr(warmstart, "sft_loss", recording_loss)
    _, meta = warmstart.warm_start(tmp_path, make_train, make_test, minutes=1, target=1.0,
                                   seed=0, max_new_tokens=8, episodes=20, eval_tasks=2,
                                   steps=4, batch_size=16, first_roles=("searcher",),
                                   first_steps=2, env_name=config.env, log=lambda *_: None)
    # one micro-batch of 16 rows per step: two searcher-only steps, then every role
    assert meta["steps"] == 4 and len(seen) == 4
    assert seen[0] == seen[1] == {"searcher"} and seen[2] | seen[3] == {"searcher", "other"}
    assert meta["settings"]["first_roles"] == ["searcher"]
    with pytest.raises(ValueError, match="first_roles=\\('solver',\\).*aggregator"):
        warmstart.warm_start(tmp_path / "b", make_train, make_test, minutes=1, target=1.0,
                             seed=0, max_new_tokens=8, episodes=4, eval_tasks=2, steps=2,
                             first_roles=("solver",), first_steps=1, env_name=config.env,
                             log=lambda *_: None)
    with pytest.raises(ValueError, match="warmstart_first_roles=.*expected both"):
        TinyConfig(warmstart_first_steps=5)
    with pytest.raises(ValueError, match="warmstart_first_steps=5: expected fewer"):
        TrainConfig(model="tiny", model_options=dict(
            warmstart_steps=5, warmstart_first_roles=("searcher",), warmstart_first_steps=5))


def test_per_role_policies_train_separately_and_resume(tiny_dir, tmp_path, monkeypatch):
    # An untrained policy earns no reward, so every group-relative advantage would be 0:
    # a registered estimator with alternating signs makes both roles really update.
    monkeypatch.setitem(ADVANTAGE_ESTIMATORS, "alternating",
                        lambda units, eps=1e-6: forced_advantages(units))

    def config(out, steps, resume=False):
        return TrainConfig(model=str(tiny_dir), steps=steps, group_size=2, tasks_per_step=2,
                           eval_tasks=2, eval_k=2, max_new_tokens=12, lr=1e-2, save_every=1,
                           out=str(out), resume=resume, per_role_policies=True,
                           advantage="alternating", **CONFIG)

    train(config(tmp_path / "a", 2), log=lambda *_: None)
    from srpo_agents.models.policy import load_policy

    initial = load_policy(str(tiny_dir)).model.state_dict()
    solver = load_policy(str(tmp_path / "a" / "policy-solver")).model.state_dict()
    aggregator = load_policy(str(tmp_path / "a" / "policy-aggregator")).model.state_dict()
    assert not (tmp_path / "a" / "policy").exists()
    for name, weight in initial.items():  # each role moved away from the start, differently
        assert not torch.equal(weight, solver[name]) or not torch.equal(weight, aggregator[name])
    assert any(not torch.equal(solver[n], aggregator[n]) for n in initial)
    row = json.loads((tmp_path / "a" / "metrics.jsonl").read_text().splitlines()[0])
    assert {"solver/grad_norm", "aggregator/grad_norm"} <= set(row)
    from srpo_agents.cli import main

    assert main(["eval", "--checkpoint", str(tmp_path / "a"), "--env", "SRPO-Math-v0",
                 "--workflow", "parallel", "--n-agents", "3", "--compact-prompts", "--k", "2",
                 "--tasks", "2", "--max-new-tokens", "12"]) == 0
    train(config(tmp_path / "b", 1), log=lambda *_: None)
    train(config(tmp_path / "b", 2, resume=True), log=lambda *_: None)
    rows = [(tmp_path / r / "metrics.jsonl").read_text().splitlines()[1] for r in ("a", "b")]
    a, b = ({k: v for k, v in json.loads(x).items() if not k.endswith("seconds")}
            for x in rows)
    assert a == b


def test_warm_start_lr_schedule_warms_up_then_decays_to_a_tenth():
    from srpo_agents.tiny.warmstart import lr_factor, warm_start

    assert lr_factor(0, 0, 0) == lr_factor(500, 0, 0) == 1.0           # constant
    assert lr_factor(0, 20, 0) == pytest.approx(1 / 20)
    assert lr_factor(19, 20, 0) == lr_factor(100, 20, 0) == 1.0
    assert lr_factor(20, 20, 250) == pytest.approx(1.0)
    assert lr_factor(135, 20, 250) == pytest.approx(0.55)               # half way down
    assert lr_factor(250, 20, 250) == lr_factor(400, 20, 250) == pytest.approx(0.1)
    with pytest.raises(ValueError, match="decay=True"):
        warm_start(Path("unused"), None, None, minutes=1, target=1, seed=0,
                   max_new_tokens=8, decay=True, env_name="SRPO-Math-v0")
