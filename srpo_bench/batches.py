"""A batch of learner units from real rollouts, for timing updates
(``benchmarks/speed/learner_vs_trl.py``, ``benchmarks/scale/role_adapters.py``).
"""

from __future__ import annotations

import numpy as np

from srpo_agents.config import TrainConfig
from srpo_agents.learning.events import build_units
from srpo_agents.learning.objective import ADVANTAGE_ESTIMATORS
from srpo_agents.rollout.engine import RolloutEngine
from srpo_agents.rollout.envs import env_factory


def make_batch(policy, tasks: int, group: int, max_new_tokens: int, fill_zero: bool = True,
               **setting):
    """(units, advantages) of ``tasks`` x ``group`` train episodes played by ``policy``
    (``setting``: TrainConfig fields; default the tiny math parallel team): set units,
    per-task advantages, random ones where a group had one reward (unless not
    ``fill_zero``)."""
    make = env_factory(TrainConfig(**(setting or {"model": "tiny"})), "train")
    envs = [make(i) for i in range(tasks * group)]
    engine = RolloutEngine(policy, max_new_tokens=max_new_tokens, seed=0)
    options = [{"task_index": t, "episode_id": f"t{t}-g{g}"}
               for t in range(tasks) for g in range(group)]
    units, _ = build_units(engine.run(envs, options), "set")
    advantages = ADVANTAGE_ESTIMATORS["task"]([u.info for u in units])
    # Random advantages where a group had one reward, so both sides do real work.
    if fill_zero:
        rng = np.random.default_rng(0)
        advantages = np.where(advantages == 0, rng.normal(size=len(units)), advantages)
    return units, advantages
