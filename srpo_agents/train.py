"""``srpo train``: rollouts -> Transitions -> action units -> SRPO update, with held-out
evaluation before and after, ``metrics.jsonl`` per step, ``summary.json`` at the end, a
learning-curve PNG and atomic checkpoints that ``--resume`` continues exactly.

Each step draws ``tasks_per_step`` training tasks, runs ``group_size`` episodes of each
(all agents of all episodes batched by the rollout engine), forms units with the
algorithm's rule, computes group-relative advantages and updates the shared policy
(``train_step``; the learning tests drive it on their own envs).

Every step's row in ``metrics.jsonl`` (and the progress bar) carries the diagnostics that
tell whether learning can happen: optimizer updates so far (``updates_total``), the
fraction of tasks whose episodes got mixed returns (``mixed_group_fraction``: only those
carry a non-zero advantage), the mean token entropy of the sampled responses
(``entropy``), the approximate KL to the behaviour policy (``approx_kl``) and the clip
fraction, plus the seconds spent in generation, env steps and the update.
``summary.json`` adds the paired after-minus-before difference (``difference``) and the
run's time by phase (``time_breakdown``).
"""

from __future__ import annotations

import copy
import dataclasses
import random
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from srpo_agents import faults
from srpo_agents.checkpoint import (
    SHARED,
    has_checkpoint,
    load_checkpoint,
    save_checkpoint,
    write_json_atomic,
)
from srpo_agents.config import TrainConfig
from srpo_agents.envs import env_factory
from srpo_agents.evaluate import episode_correct, eval_pool, evaluate
from srpo_agents.events import build_units
from srpo_agents.learner import Learner, LearnerConfig
from srpo_agents.metrics_log import append_json_line, read_metrics_rows, write_json_lines_atomic
from srpo_agents.model_sources import model_source, resolve_model
from srpo_agents.objective import ADVANTAGE_ESTIMATORS, ALGORITHMS
from srpo_agents.policy import Policy
from srpo_agents.rollout import RolloutEngine
from srpo_agents.routing_stats import plot_routing, routing_summary
from srpo_agents.verdicts import task_difference


def prepare_policy(config: TrainConfig, run_dir: Path, log) -> tuple[Policy, dict]:
    """The run's initial policy and its source's meta (the tiny model's warm start)."""
    return model_source(config.model).prepare(config, run_dir, log)


def _task_count(envs: list) -> int | None:
    return getattr(envs[0], "num_tasks", None)


def _eval_indices(config: TrainConfig, envs: list, wanted: int | None = None,
                  log=None, split: str = "test") -> list[int]:
    """The first ``wanted`` (default ``eval_tasks``) task indices of a held-out pool, or
    all of its distinct tasks when it has fewer (each is then used once, and ``log``
    says how many)."""
    wanted = config.eval_tasks if wanted is None else wanted
    counter = getattr(envs[0], "distinct_tasks", None)
    total = counter(wanted) if counter is not None else _task_count(envs)
    n = wanted if total is None else min(wanted, total)
    if n < wanted and log is not None:
        log(f"{split} split: {n} distinct tasks (asked for {wanted}); each is used once")
    return list(range(n))


def _quiet(*_: Any) -> None:
    """The log of data-parallel ranks other than 0."""


def _all_gather_rollouts(rollouts: list) -> list:
    """Every rank's episodes, on every rank, in rank order (Transitions and token rows)."""
    from srpo_agents.rollout_io import rollout_rows, rollouts_from_rows

    mine = [row for rollout in rollouts for row in rollout_rows(rollout)]
    gathered: list = [None] * torch.distributed.get_world_size()
    torch.distributed.all_gather_object(gathered, mine)
    return rollouts_from_rows((row, f"rank {r}") for r, rows in enumerate(gathered)
                              for row in rows)


def check_data(config: TrainConfig) -> None:
    """Build one train and one held-out env before anything else, so a bad dataset row or
    corpus row (named by file and line) stops the run before its warm start."""
    for split in ("train", "test"):
        env_factory(config, split)(config.seed).close()


def _returns_by_task(rollouts) -> dict[str, set[float]]:
    returns: dict[str, set[float]] = {}
    for r in rollouts:
        returns.setdefault(r.task_id, set()).add(r.reward)
    return returns


def mixed_group_fraction(rollouts) -> float:
    """The fraction of tasks whose G episodes did not all get the same return: only
    those groups carry a non-zero group-relative advantage."""
    returns = _returns_by_task(rollouts)
    return float(np.mean([len(v) > 1 for v in returns.values()])) if returns else 0.0


def _step_metrics(rollouts, stats, update: dict, step: int, seconds: float) -> dict[str, Any]:
    tokens = [r.generated_tokens for r in rollouts]
    correct = [episode_correct(r) for r in rollouts]
    lengths = [len(s.response_ids) for r in rollouts for s in r.samples.values()]
    return {"step": step, "reward": float(np.mean([r.reward for r in rollouts])),
            "accuracy": float(np.mean(correct)), "tokens_per_task": float(np.mean(tokens)),
            "tool_calls_per_task": float(np.mean([r.tool_calls for r in rollouts])),
            "response_length": float(np.mean(lengths)) if lengths else 0.0,
            "mixed_group_fraction": mixed_group_fraction(rollouts),
            "events": stats.events, "events_dropped": stats.events_dropped,
            "mean_set_size": stats.mean_set_size, "seconds": seconds,
            **routing_summary(rollouts, episode_correct), **update}


def train_step(engine: RolloutEngine, envs: list, options: list[dict], algorithm,
               estimator, learners: dict[str, Learner], dynamic_sampling: bool = False,
               gather=None) -> tuple[list, Any, dict[str, Any]]:
    """One RL step: play ``options[i]`` on ``envs[i]``, form the algorithm's units from
    the Transitions, compute advantages and update. Returns (rollouts, unit stats, the
    update's metrics with this step's seconds in generation, env and update).

    ``dynamic_sampling`` (DAPO's filter): units of tasks whose episodes all got the same
    return are left out of the update. Their advantage is 0 either way; leaving them out
    stops them from diluting the mean over units, so the batch shrinks instead."""
    spent = dict(engine.seconds)
    rollouts = engine.run(envs, options)
    if gather is not None:  # data-parallel: the episodes every rank played
        rollouts = gather(rollouts)
    units, stats = build_units(rollouts, algorithm.unit)
    # Every learner of a run shares one LearnerConfig: its adv_eps is the run's.
    adv_eps = next(iter(learners.values())).config.adv_eps
    advantages = estimator([u.info for u in units], adv_eps)
    if dynamic_sampling:
        returns = _returns_by_task(rollouts)
        keep = [i for i, u in enumerate(units) if len(returns[u.info.task_id]) > 1]
        units, advantages = [units[i] for i in keep], advantages[keep]
    tick = time.monotonic()
    update = update_policies(learners, units, advantages)
    engine.policy_version += 1
    update.update({f"{k}_seconds": engine.seconds[k] - spent[k] for k in engine.seconds},
                  update_seconds=time.monotonic() - tick, units=len(units))
    return rollouts, stats, update


def plot_curve(metrics_path: Path, png: Path, title: str, before: dict, after: dict,
               steps: int, start_validation: dict | None = None) -> None:
    """Training accuracy per step, test avg@k (with standard error) before (step 0) and
    after (last step), and validation avg@k every ``eval_every`` steps, from step 0 when
    ``start_validation`` (the starting policy on the same validation tasks) is given."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = read_metrics_rows(metrics_path)
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot([r["step"] + 1 for r in rows], [r["accuracy"] for r in rows],
            label="training episodes: accuracy")
    def point(step: int, result: dict) -> tuple[int, float, float]:
        return step, result["avg_at_k"], result["avg_at_k_stderr"]

    # Test before and after (the final evaluation); validation during training, a split
    # of its own, so the points between are not read from the test tasks.
    x, y, err = zip(point(0, before), point(steps, after), strict=True)
    ax.errorbar(x, y, yerr=err, fmt="o", capsize=3,
                label=f"test avg@{after['k']} ({after['tasks']} tasks)")
    mids = [(r["step"] + 1, r["eval_avg_at_k"], r["eval_avg_at_k_stderr"])
            for r in rows if "eval_avg_at_k" in r]
    tasks = next((r["eval_tasks"] for r in reversed(rows) if "eval_tasks" in r), None)
    if start_validation is not None:
        mids.insert(0, point(0, start_validation))
        tasks = start_validation["tasks"]
    if mids:
        x, y, err = zip(*mids, strict=True)
        ax.errorbar(x, y, yerr=err, fmt="s--", capsize=3,
                    label=f"validation avg@{after['k']} ({tasks} tasks)")
    ax.set_xlabel("step")
    ax.set_ylabel("accuracy")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    fig.savefig(png, dpi=120)
    plt.close(fig)


def time_breakdown(metrics_path: Path, warm: dict, before_after_eval: float,
                   wall: float) -> dict[str, float]:
    """Seconds of the run by phase: the warm start (0 when it was cached), generation and
    env stepping of the training rollouts, updates, held-out evaluations (the ones
    during training, and ``before_after_eval``: the before and after evaluations this
    invocation ran; a "before" shared with other runs counts 0 here) and the rest."""
    rows = read_metrics_rows(metrics_path)
    out = {"warm_start": float(warm.get("seconds", 0.0)) if not warm.get("cached") else 0.0,
           "generation": sum(r.get("generation_seconds", 0.0) for r in rows),
           "env": sum(r.get("env_seconds", 0.0) for r in rows),
           "update": sum(r.get("update_seconds", 0.0) for r in rows),
           "evaluation": before_after_eval + sum(r.get("eval_seconds", 0.0) for r in rows)}
    out["other"] = max(0.0, wall - sum(out.values()))
    out["total"] = wall
    return {k: round(v, 2) for k, v in out.items()}


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
              for key in {k for r in per_role.values() for k, v in r.items()
                          if not isinstance(v, list)}}  # per-update lists stay per role
    merged.update({f"{role}/clip_fraction_by_update": r["clip_fraction_by_update"]
                   for role, r in per_role.items() if "clip_fraction_by_update" in r})
    merged.update({f"{role}/grad_norm": r["grad_norm"] for role, r in per_role.items()})
    return merged


def make_engine(config: TrainConfig, policy: Policy,
                role_policies: dict[str, Policy] | None = None) -> RolloutEngine:
    return RolloutEngine(policy, max_new_tokens=config.max_new_tokens,
                         temperature=config.temperature, backend=config.backend,
                         seed=config.sampling_seed, role_policies=role_policies or {},
                         drop_unfinished=config.drop_unfinished)


def held_out(config: TrainConfig, token_counter=None, split: str = "test", wanted=None,
             log=None) -> tuple[list, list[int]]:
    """The run's held-out env pool and task indices (the same for every algorithm):
    the ``test`` split, read only by the evaluations before and after training, or the
    ``validation`` split that the evaluations during training read. ``token_counter``:
    the policy's token count, for the team cost (when it is on)."""
    envs = eval_pool(env_factory(config, split, token_counter), 256,
                     config.seed + (1 if split == "test" else 2))
    return envs, _eval_indices(config, envs, wanted, log, split)


def evaluate_start(config: TrainConfig, log=print, engine: RolloutEngine | None = None
                   ) -> dict[str, Any]:
    """The "before" evaluation of ``train`` on its own, so that runs that share a start
    (the harness: every algorithm of one env, workflow and seed) can share it too.
    ``engine``: one already built on the starting policy (so a caller that also uses it
    for other evaluations loads the model once)."""
    if engine is None:
        engine = make_engine(config, prepare_policy(config, Path(config.out), log)[0])
    test_envs, eval_indices = held_out(config, engine.policy.count_tokens)
    return evaluate(engine, test_envs, eval_indices, config.eval_k, tag="before")


def train(config: TrainConfig, log=print, before: dict[str, Any] | None = None
          ) -> dict[str, Any]:
    """Train and evaluate one run. ``before``: the starting policy's held-out result when
    it was already measured (``evaluate_start``); the run then skips that evaluation, so
    its sampling starts from the seed's first random number."""
    check_data(config)
    resolve_model(config.model)  # a bad --model fails in seconds, before the run folder
    rank, world = 0, 1
    if config.data_parallel:
        from srpo_agents.learner import init_data_parallel

        rank, world = init_data_parallel()
        if rank:  # every rank keeps its own files; rank 0's are the run's
            options = model_source(config.model).rank_options(config)
            config = dataclasses.replace(config, out=str(Path(config.out) / f"rank-{rank}"),
                                         model_options=options)
            log = _quiet
    run_dir = Path(config.out)
    run_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    random.seed(config.sampling_seed)
    np.random.seed(config.sampling_seed)
    torch.manual_seed(config.sampling_seed)
    if rank:
        torch.distributed.barrier()  # rank 0 builds (or finds) the warm start first
    policy, warm = prepare_policy(config, run_dir, log)
    if config.data_parallel and not rank:
        torch.distributed.barrier()
    algorithm = ALGORITHMS[config.algo]
    estimator = ADVANTAGE_ESTIMATORS[config.advantage or algorithm.advantage]
    train_envs = eval_pool(env_factory(config, "train", policy.count_tokens),
                           config.tasks_per_step * config.group_size, config.sampling_seed)
    test_envs, eval_indices = held_out(config, policy.count_tokens, log=log)
    val_envs, val_indices = ([], [])
    if config.eval_every:  # the curve during training reads validation tasks, never test
        val_envs, val_indices = held_out(config, policy.count_tokens, "validation",
                                         config.curve_tasks or config.eval_tasks, log)
    if config.per_role_adapters:  # one frozen base, one LoRA adapter per role
        from srpo_agents.adapters import attach_role_adapters

        policy = attach_role_adapters(policy, sorted(set(train_envs[0].roles.values())),
                                      rank=config.lora_rank, alpha=config.lora_alpha,
                                      targets=config.lora_targets)
    role_policies = {}
    if config.per_role_policies:
        role_policies = {role: Policy(copy.deepcopy(policy.model), policy.tokenizer,
                                      f"{policy.name}#{role}")
                         for role in sorted(set(train_envs[0].roles.values()))}
    engine = make_engine(config, policy, role_policies)
    rollout = engine  # what plays the training episodes: this process or Ray workers
    if config.rollout_workers:
        from srpo_agents.ray_rollout import RayRolloutEngine

        rollout = RayRolloutEngine(config, policy, config.rollout_workers,
                                   address=config.ray_address)
    learner_config = LearnerConfig(
        lr=config.lr, epochs=config.epochs, minibatch_units=config.minibatch_units,
        microbatch_rows=config.microbatch_rows, eps_low=config.eps_low,
        eps_high=config.eps_high, beta=config.beta, max_grad_norm=config.max_grad_norm,
        temperature=config.temperature, data_parallel=config.data_parallel,
        adv_eps=config.adv_eps)
    policies = role_policies or {SHARED: policy}
    learners = {name: Learner(p, algorithm, learner_config, seed=config.sampling_seed)
                for name, p in policies.items()}
    optimizers = {name: learner.optimizer for name, learner in learners.items()}
    task_rng = random.Random(config.sampling_seed)
    generators = {"task_rng": task_rng, **engine.sampler_generators(),
                  **{f"learner_rng:{name}": learner.rng for name, learner in learners.items()}}
    metrics_path, summary_path = run_dir / "metrics.jsonl", run_dir / "summary.json"
    start_step = 0
    if config.resume and has_checkpoint(run_dir):
        payload = load_checkpoint(run_dir, policies=policies, optimizers=optimizers,
                                  generators=generators, log=log)
        start_step, before = payload["step"], payload["extra"].get("before") or before
        engine.policy_version = rollout.policy_version = start_step
        # rows of the steps to be replayed go, and so does a line torn by a kill
        kept = [row for row in read_metrics_rows(metrics_path) if row["step"] < start_step]
        write_json_lines_atomic(metrics_path, kept)
        log(f"resumed from {payload['folder']} at step {start_step}")
    elif metrics_path.exists():
        metrics_path.unlink()
    eval_seconds = {"before_after": 0.0}

    def timed_eval(tag: str, indices: list[int] = eval_indices, envs: list = test_envs
                   ) -> tuple[dict[str, Any], float]:
        tick = time.monotonic()
        # a bar for the test evaluations before and after (the train bar covers the rest)
        label = f"held-out {tag}" if tag in ("before", "after") else ""
        result = evaluate(engine, envs, indices, config.eval_k, tag=tag, progress=label)
        return result, time.monotonic() - tick

    if before is None:
        before, spent = timed_eval("before")
        eval_seconds["before_after"] += spent
        log(f"before: avg@{config.eval_k} {before['avg_at_k']:.3f} "
            f"(+-{before['avg_at_k_stderr']:.3f}), pass@{config.eval_k} {before['pass_at_k']:.3f}")
    updates_total = 0
    if start_step:
        rows = read_metrics_rows(metrics_path)
        updates_total = rows[-1].get("updates_total", 0) if rows else 0
    n_train = _task_count(train_envs)
    board = None
    if config.tensorboard:
        from srpo_agents.tensorboard_log import TensorBoardLog

        board = TensorBoardLog(run_dir / "tensorboard")
        if not start_step:
            board.evaluation("before", before, 0)
    bar = tqdm(range(start_step, config.steps), initial=start_step, total=config.steps,
               desc="srpo train", disable=None)
    for step in bar:
        faults.at_step(step)
        tick = time.monotonic()
        tasks = [task_rng.randrange(n_train or 2**31) for _ in range(config.tasks_per_step)]
        options = [{"task_index": t, "episode_id": f"s{step}-t{i}-g{g}"}
                   for i, t in enumerate(tasks) for g in range(config.group_size)]
        lost_before = getattr(rollout, "lost_episodes", 0)
        gather = None
        if world > 1:  # this rank plays its whole tasks; then every rank has all episodes
            options = [o for n, o in enumerate(options) if (n // config.group_size) % world
                       == rank]
            gather = _all_gather_rollouts
        rollouts, stats, update = train_step(rollout, train_envs[:len(options)], options,
                                             algorithm, estimator, learners,
                                             config.dynamic_sampling, gather)
        if rollout is not engine:  # the evaluations' engine follows the updated weights
            engine.policy_version = rollout.policy_version
            update.update(episodes_lost=rollout.lost_episodes - lost_before,
                          worker_restarts=rollout.worker_restarts)
        updates_total += update.get("updates", 0)
        row = _step_metrics(rollouts, stats, update, step, time.monotonic() - tick)
        row["updates_total"] = updates_total
        if config.eval_every and (step + 1) % config.eval_every == 0 and step + 1 < config.steps:
            mid, spent = timed_eval(f"s{step}", val_indices, val_envs)
            row.update(eval_avg_at_k=mid["avg_at_k"], eval_avg_at_k_stderr=mid["avg_at_k_stderr"],
                       eval_pass_at_k=mid["pass_at_k"], eval_tasks=mid["tasks"],
                       eval_split="validation", eval_seconds=spent)
        append_json_line(metrics_path, row)
        if board is not None:
            board.row(row)
        bar.set_postfix(acc=f"{row['accuracy']:.2f}", upd=updates_total,
                        mixed=f"{row['mixed_group_fraction']:.2f}",
                        ent=f"{row.get('entropy', 0.0):.2f}", kl=f"{row.get('approx_kl', 0.0):.3f}",
                        clip=f"{row.get('clip_fraction', 0.0):.2f}",
                        tok=f"{row['tokens_per_task']:.0f}", calls=f"{row['tool_calls_per_task']:.1f}")
        # The last step is saved before the final evaluation, so a longer run resumed from
        # it draws exactly the random numbers an uninterrupted run would.
        if (config.save_every and (step + 1) % config.save_every == 0) or step + 1 == config.steps:
            save_checkpoint(run_dir, policies=policies, optimizers=optimizers, step=step + 1,
                            config=config.to_dict(), generators=generators,
                            extra={"before": before})
    faults.at_step(None)
    if rollout is not engine:
        rollout.shutdown()
    after, spent = timed_eval("after")
    eval_seconds["before_after"] += spent
    if board is not None:
        board.evaluation("after", after, config.steps)
        board.close()
    log(f"after: avg@{config.eval_k} {after['avg_at_k']:.3f} (+-{after['avg_at_k_stderr']:.3f}), "
        f"pass@{config.eval_k} {after['pass_at_k']:.3f}")
    difference = task_difference(before, after)
    log(f"after - before (paired over {difference['tasks']} tasks): avg@{config.eval_k} "
        f"{difference['avg_at_k']:+.3f} +- {difference['avg_at_k_stderr']:.3f} "
        f"({difference['avg_at_k_z']:+.1f} SE), pass@{config.eval_k} "
        f"{difference['pass_at_k']:+.3f} +- {difference['pass_at_k_stderr']:.3f}")
    wall = time.monotonic() - started
    summary = {"config": config.to_dict(), "warm_start": warm, "before": before, "after": after,
               "difference": difference,
               "time_breakdown": time_breakdown(metrics_path, warm,
                                                eval_seconds["before_after"], wall),
               "wall_time_s": wall}
    write_json_atomic(summary_path, summary)
    try:
        plot_curve(metrics_path, run_dir / "learning_curve.png",
                   f"{config.env} {config.workflow} {config.algo}", before, after, config.steps)
        plot_routing(read_metrics_rows(metrics_path), run_dir / "routing.png",
                     f"{config.env} {config.workflow} {config.algo}: routing")
    except ImportError:
        log("matplotlib is not installed: no learning_curve.png")
    return summary
