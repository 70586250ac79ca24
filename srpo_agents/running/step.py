"""One RL step and the pieces a run is built from: the starting policy, the env pools
(train, and the held-out test and validation splits), the rollout engine, the update of
one or several policies, and the per-step metrics.

    rollouts (``RolloutEngine.run``) -> Transitions -> action units (``events.build_units``)
    -> advantages (the algorithm's estimator) -> ``events.UnitBatch`` -> ``Learner.update``
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

from srpo_agents.config import TrainConfig
from srpo_agents.learning.events import UnitBatch, build_units
from srpo_agents.learning.learner import Learner
from srpo_agents.models.policy import Policy
from srpo_agents.models.registry import model_source
from srpo_agents.rollout.engine import RolloutEngine, engine_for
from srpo_agents.rollout.envs import env_factory
from srpo_agents.running.checkpoint import SHARED
from srpo_agents.running.evaluate import episode_correct, eval_pool, evaluate
from srpo_agents.running.metrics_log import read_metrics_rows
from srpo_agents.running.routing_stats import routing_summary


def prepare_policy(config: TrainConfig, run_dir: Path, log) -> tuple[Policy, dict]:
    """The run's initial policy and its source's meta (the tiny model's warm start)."""
    return model_source(config.model).prepare(config, run_dir, log)


def task_count(envs: list) -> int | None:
    """Distinct tasks of an env pool, or None for an endless generator."""
    return getattr(envs[0], "num_tasks", None)


def _eval_indices(config: TrainConfig, envs: list, wanted: int | None = None,
                  log=None, split: str = "test") -> list[int]:
    """The first ``wanted`` (default ``eval_tasks``) task indices of a held-out pool, or
    all of its distinct tasks when it has fewer (each is then used once, and ``log``
    says how many)."""
    wanted = config.eval_tasks if wanted is None else wanted
    counter = getattr(envs[0], "distinct_tasks", None)
    total = counter(wanted) if counter is not None else task_count(envs)
    n = wanted if total is None else min(wanted, total)
    if n < wanted and log is not None:
        log(f"{split} split: {n} distinct tasks (asked for {wanted}); each is used once")
    warning = getattr(envs[0], "held_out_warning", lambda: None)()
    if warning and log is not None:
        log(f"warning: {warning}")
    return list(range(n))


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


def step_metrics(rollouts, stats, update: dict, step: int, seconds: float) -> dict[str, Any]:
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
    """One RL step: play ``options[i]`` on ``envs[i]``, then ``learn`` from the episodes.
    Returns (rollouts, unit stats, the update's metrics with this step's seconds in
    generation, env and update)."""
    spent = dict(engine.seconds)
    rollouts = engine.run(envs, options)
    if gather is not None:  # data-parallel: the episodes every rank played
        rollouts = gather(rollouts)
    # vLLM's engines give the learner their GPU memory (sleep mode); Ray workers and
    # other engines have nothing to free here
    getattr(engine, "rest", lambda: None)()
    stats, update = learn(rollouts, algorithm, estimator, learners, dynamic_sampling)
    engine.policy_version += 1
    update.update({f"{k}_seconds": engine.seconds[k] - spent[k] for k in engine.seconds})
    return rollouts, stats, update


def learn(rollouts: list, algorithm, estimator, learners: dict[str, Learner],
          dynamic_sampling: bool = False, version: int | None = None,
          max_staleness: int = 0) -> tuple[Any, dict[str, Any]]:
    """Form the algorithm's units from the episodes' Transitions, compute advantages and
    update. Returns (unit stats, the update's metrics with ``update_seconds``).

    ``dynamic_sampling`` (DAPO's filter): units of tasks whose episodes all got the same
    return are left out of the update. Their advantage is 0 either way; leaving them out
    stops them from diluting the mean over units, so the batch shrinks instead.

    ``version`` (asynchronous runs: the learner's policy version): units more than
    ``max_staleness`` versions old are dropped whole, after the advantages (so a group's
    baseline does not move with what was dropped), and the ages are reported."""
    units, stats = build_units(rollouts, algorithm.unit)
    # Every learner of a run shares one LearnerConfig: its adv_eps is the run's.
    adv_eps = next(iter(learners.values())).config.adv_eps
    batch = UnitBatch(units, estimator([u.info for u in units], adv_eps))
    if dynamic_sampling:
        returns = _returns_by_task(rollouts)
        batch = batch.subset([i for i, u in enumerate(units)
                              if len(returns[u.info.task_id]) > 1])
    staleness = {}
    if version is not None:
        batch, staleness = batch.fresh(version, max_staleness)
    tick = time.monotonic()
    update = update_policies(learners, batch)
    update.update(update_seconds=time.monotonic() - tick, units=len(batch), **staleness)
    return stats, update


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


def update_policies(learners: dict[str, Learner], batch: UnitBatch) -> dict:
    """One update of the shared policy, or of each role's policy on its role's events
    (advantages are computed over all events first, so the groups are the same)."""
    if SHARED in learners:
        return learners[SHARED].update(batch.units, batch.advantages)
    per_role = {}
    for role, learner in learners.items():
        mine = batch.subset([i for i, u in enumerate(batch.units) if u.members[0].role == role])
        result = learner.update(mine.units, mine.advantages)
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
    return engine_for(config, policy, role_policies)


def held_out(config: TrainConfig, token_counter=None, split: str = "test", wanted=None,
             log=None) -> tuple[list, list[int]]:
    """The run's held-out env pool and task indices (the same for every algorithm):
    the ``test`` split, read only by the evaluations before and after training, or the
    ``validation`` split that the evaluations during training read. ``token_counter``:
    the policy's token count, for the team cost (when it is on)."""
    envs = eval_pool(env_factory(config, split, token_counter), 256,
                     config.seed + (1 if split == "test" else 2))
    return envs, _eval_indices(config, envs, wanted, log, split)


def evaluate_start(config: TrainConfig, log=print, engine: RolloutEngine | None = None,
                   progress: str = "") -> dict[str, Any]:
    """The "before" evaluation of ``train`` on its own, so that runs that share a start
    (the harness: every algorithm of one env, workflow and seed) can share it too.
    ``engine``: one already built on the starting policy (so a caller that also uses it
    for other evaluations loads the model once). ``progress``: a label for its progress
    bar (none when empty)."""
    if engine is None:
        engine = make_engine(config, prepare_policy(config, Path(config.out), log)[0])
    test_envs, eval_indices = held_out(config, engine.policy.count_tokens)
    return evaluate(engine, test_envs, eval_indices, config.eval_k, tag="before",
                    votes=True, progress=progress)   # as TrainingRun's own "before"
