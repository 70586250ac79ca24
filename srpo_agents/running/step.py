"""One RL step: play the episodes, form the algorithm's units, compute advantages and
update one policy (or one per role), and the step's metrics.

    rollouts (``RolloutEngine.run``) -> Transitions -> action units (``events.build_units``)
    -> advantages (the algorithm's estimator) -> ``events.UnitBatch`` -> ``Learner.update``
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from srpo_agents.learning.events import UnitBatch, build_units
from srpo_agents.learning.learner import Learner
from srpo_agents.rollout.engine import RolloutEngine
from srpo_agents.running.checkpoint import SHARED
from srpo_agents.running.evaluate import episode_correct
from srpo_agents.running.routing_stats import routing_summary


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


