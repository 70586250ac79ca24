"""``srpo train``: rollouts -> Transitions -> action units -> SRPO update, with held-out
evaluation before and after, ``metrics.jsonl`` per step, ``summary.json`` at the end, a
learning-curve PNG and atomic checkpoints that ``--resume`` continues exactly.

Each step draws ``tasks_per_step`` training tasks, runs ``group_size`` episodes of each
(all agents of all episodes batched by the rollout engine), forms units with the
algorithm's rule, computes group-relative advantages and updates the shared policy.
"""

from __future__ import annotations

import copy
import json
import random
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from srpo_agents.checkpoint import (
    CHECKPOINT_NAME,
    SHARED,
    load_checkpoint,
    save_checkpoint,
    write_json_atomic,
)
from srpo_agents.config import TrainConfig
from srpo_agents.envs import env_factory
from srpo_agents.evaluate import eval_pool, evaluate
from srpo_agents.events import build_units
from srpo_agents.learner import Learner, LearnerConfig
from srpo_agents.objective import ADVANTAGE_ESTIMATORS, ALGORITHMS
from srpo_agents.policy import Policy, load_policy
from srpo_agents.rollout import RolloutEngine


def prepare_policy(config: TrainConfig, run_dir: Path, log) -> tuple[Policy, dict]:
    if config.model != "tiny":
        return load_policy(config.model, device=config.device), {}
    from srpo_agents.warmstart import warm_start

    return warm_start(Path(config.warmstart_dir or run_dir), env_factory(config, "train"),
                      env_factory(config, "test"),
                      minutes=config.warmstart_minutes, target=config.warmstart_target,
                      seed=config.seed, max_new_tokens=config.max_new_tokens, log=log)


def _task_count(envs: list) -> int | None:
    return getattr(envs[0], "num_tasks", None)


def _eval_indices(config: TrainConfig, envs: list) -> list[int]:
    total = _task_count(envs)
    n = config.eval_tasks if total is None else min(config.eval_tasks, total)
    return list(range(n))


def _step_metrics(rollouts, stats, update: dict, step: int, seconds: float) -> dict[str, Any]:
    tokens = [r.generated_tokens for r in rollouts]
    correct = [bool(r.correct) if r.correct is not None else r.reward > 0 for r in rollouts]
    lengths = [len(s.response_ids) for r in rollouts for s in r.samples.values()]
    return {"step": step, "reward": float(np.mean([r.reward for r in rollouts])),
            "accuracy": float(np.mean(correct)), "tokens_per_task": float(np.mean(tokens)),
            "tool_calls_per_task": float(np.mean([r.tool_calls for r in rollouts])),
            "response_length": float(np.mean(lengths)) if lengths else 0.0,
            "events": stats.events, "events_dropped": stats.events_dropped,
            "mean_set_size": stats.mean_set_size, "seconds": seconds, **update}


def plot_curve(metrics_path: Path, png: Path, title: str, before: dict, after: dict,
               steps: int) -> None:
    """Training accuracy per step and held-out avg@k (with standard error) at the
    evaluations: before (step 0), every ``eval_every`` steps, after (last step)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [json.loads(line) for line in metrics_path.read_text().splitlines() if line]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot([r["step"] + 1 for r in rows], [r["accuracy"] for r in rows],
            label="training episodes: accuracy")
    evals = [(0, before["avg_at_k"], before["avg_at_k_stderr"])]
    evals += [(r["step"] + 1, r["eval_avg_at_k"], r["eval_avg_at_k_stderr"])
              for r in rows if "eval_avg_at_k" in r]
    evals.append((steps, after["avg_at_k"], after["avg_at_k_stderr"]))
    x, y, err = zip(*evals, strict=True)
    ax.errorbar(x, y, yerr=err, fmt="o-", capsize=3, label=f"held-out avg@{after['k']}")
    ax.set_xlabel("step")
    ax.set_ylabel("accuracy")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    fig.savefig(png, dpi=120)
    plt.close(fig)


def update_policies(learners: dict[str, Learner], units, advantages: np.ndarray) -> dict:
    """One update of the shared policy, or of each role's policy on its role's events
    (advantages are computed over all events first, so the groups are the same)."""
    if SHARED in learners:
        return learners[SHARED].update(units, advantages)
    per_role = {}
    for role, learner in learners.items():
        index = [i for i, u in enumerate(units) if u.members[0].role == role]
        result = learner.update([units[i] for i in index], advantages[index])
        if result.get("updates"):
            per_role[role] = result
    merged = {key: float(np.mean([r[key] for r in per_role.values() if key in r]))
              for key in {k for r in per_role.values() for k in r}}
    merged.update({f"{role}/grad_norm": r["grad_norm"] for role, r in per_role.items()})
    return merged


def make_engine(config: TrainConfig, policy: Policy,
                role_policies: dict[str, Policy] | None = None) -> RolloutEngine:
    return RolloutEngine(policy, max_new_tokens=config.max_new_tokens,
                         temperature=config.temperature, backend=config.backend,
                         seed=config.seed, role_policies=role_policies or {})


def held_out(config: TrainConfig) -> tuple[list, list[int]]:
    """The run's held-out env pool and task indices (the same for every algorithm)."""
    test_envs = eval_pool(env_factory(config, "test"), 256, config.seed + 1)
    return test_envs, _eval_indices(config, test_envs)


def evaluate_start(config: TrainConfig, log=print, engine: RolloutEngine | None = None
                   ) -> dict[str, Any]:
    """The "before" evaluation of ``train`` on its own, so that runs that share a start
    (the harness: every algorithm of one env, workflow and seed) can share it too.
    ``engine``: one already built on the starting policy (so a caller that also uses it
    for other evaluations loads the model once)."""
    if engine is None:
        engine = make_engine(config, prepare_policy(config, Path(config.out), log)[0])
    test_envs, eval_indices = held_out(config)
    return evaluate(engine, test_envs, eval_indices, config.eval_k, tag="before")


def train(config: TrainConfig, log=print, before: dict[str, Any] | None = None
          ) -> dict[str, Any]:
    """Train and evaluate one run. ``before``: the starting policy's held-out result when
    it was already measured (``evaluate_start``); the run then skips that evaluation, so
    its sampling starts from the seed's first random number."""
    run_dir = Path(config.out)
    run_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    random.seed(config.seed)
    np.random.seed(config.seed)
    torch.manual_seed(config.seed)
    policy, warm = prepare_policy(config, run_dir, log)
    algorithm = ALGORITHMS[config.algo]
    estimator = ADVANTAGE_ESTIMATORS[config.advantage or algorithm.advantage]
    train_envs = eval_pool(env_factory(config, "train"),
                           config.tasks_per_step * config.group_size, config.seed)
    test_envs, eval_indices = held_out(config)
    role_policies = {}
    if config.per_role_policies:
        role_policies = {role: Policy(copy.deepcopy(policy.model), policy.tokenizer,
                                      f"{policy.name}#{role}")
                         for role in sorted(set(train_envs[0].roles.values()))}
    engine = make_engine(config, policy, role_policies)
    learner_config = LearnerConfig(
        lr=config.lr, epochs=config.epochs, minibatch_units=config.minibatch_units,
        microbatch_rows=config.microbatch_rows, eps_low=config.eps_low,
        eps_high=config.eps_high, beta=config.beta, max_grad_norm=config.max_grad_norm,
        temperature=config.temperature)
    policies = role_policies or {SHARED: policy}
    learners = {name: Learner(p, algorithm, learner_config, seed=config.seed)
                for name, p in policies.items()}
    optimizers = {name: learner.optimizer for name, learner in learners.items()}
    task_rng = random.Random(config.seed)
    generators = {"task_rng": task_rng, **engine.sampler_generators(),
                  **{f"learner_rng:{name}": learner.rng for name, learner in learners.items()}}
    metrics_path, summary_path = run_dir / "metrics.jsonl", run_dir / "summary.json"
    start_step = 0
    if config.resume and (run_dir / CHECKPOINT_NAME).is_file():
        payload = load_checkpoint(run_dir, policies=policies, optimizers=optimizers,
                                  generators=generators)
        start_step, before = payload["step"], payload["extra"].get("before") or before
        engine.policy_version = start_step
        kept = [line for line in metrics_path.read_text().splitlines()
                if line and json.loads(line)["step"] < start_step]
        metrics_path.write_text("".join(line + "\n" for line in kept))
        log(f"resumed from {run_dir / CHECKPOINT_NAME} at step {start_step}")
    elif metrics_path.exists():
        metrics_path.unlink()
    if before is None:
        before = evaluate(engine, test_envs, eval_indices, config.eval_k, tag="before")
        log(f"before: avg@{config.eval_k} {before['avg_at_k']:.3f} "
            f"(+-{before['avg_at_k_stderr']:.3f}), pass@{config.eval_k} {before['pass_at_k']:.3f}")
    n_train = _task_count(train_envs)
    bar = tqdm(range(start_step, config.steps), initial=start_step, total=config.steps,
               desc="srpo train", disable=None)
    for step in bar:
        tick = time.monotonic()
        tasks = [task_rng.randrange(n_train or 2**31) for _ in range(config.tasks_per_step)]
        options = [{"task_index": t, "episode_id": f"s{step}-t{i}-g{g}"}
                   for i, t in enumerate(tasks) for g in range(config.group_size)]
        rollouts = engine.run(train_envs, options)
        units, stats = build_units(rollouts, algorithm.unit)
        advantages = estimator([u.info for u in units])
        update = update_policies(learners, units, advantages)
        engine.policy_version += 1
        row = _step_metrics(rollouts, stats, update, step, time.monotonic() - tick)
        if config.eval_every and (step + 1) % config.eval_every == 0 and step + 1 < config.steps:
            mid = evaluate(engine, test_envs, eval_indices, config.eval_k, tag=f"s{step}")
            row.update(eval_avg_at_k=mid["avg_at_k"], eval_avg_at_k_stderr=mid["avg_at_k_stderr"])
        with metrics_path.open("a") as handle:
            handle.write(json.dumps(row) + "\n")
        bar.set_postfix(reward=f"{row['reward']:.2f}", acc=f"{row['accuracy']:.2f}",
                        tok=f"{row['tokens_per_task']:.0f}", calls=f"{row['tool_calls_per_task']:.1f}")
        # The last step is saved before the final evaluation, so a longer run resumed from
        # it draws exactly the random numbers an uninterrupted run would.
        if (config.save_every and (step + 1) % config.save_every == 0) or step + 1 == config.steps:
            save_checkpoint(run_dir, policies=policies, optimizers=optimizers, step=step + 1,
                            config=config.to_dict(), generators=generators,
                            extra={"before": before})
    after = evaluate(engine, test_envs, eval_indices, config.eval_k, tag="after")
    log(f"after: avg@{config.eval_k} {after['avg_at_k']:.3f} (+-{after['avg_at_k_stderr']:.3f}), "
        f"pass@{config.eval_k} {after['pass_at_k']:.3f}")
    summary = {"config": config.to_dict(), "warm_start": warm, "before": before, "after": after,
               "wall_time_s": time.monotonic() - started}
    write_json_atomic(summary_path, summary)
    try:
        plot_curve(metrics_path, run_dir / "learning_curve.png",
                   f"{config.env} {config.workflow} {config.algo}", before, after, config.steps)
    except ImportError:
        log("matplotlib is not installed: no learning_curve.png")
    return summary
