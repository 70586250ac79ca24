"""Where a parallel math team's answer comes from: per-role accuracy of a policy on the
demo's setting (SRPO-Math-v0 parallel, 3 solvers + an aggregator, compact prompts),
sampled on held-out tasks.

    python benchmarks/learning/team_roles.py POLICY_DIR [POLICY_DIR ...] [--tasks 200] [--k 4]

Per policy: how often one solver is right, at least one is right, their majority is
right, the aggregator (the team) is right, the aggregator copies some solver's answer,
and it follows the majority answer in the episodes where two or more solvers agree.
The gap between "majority right" and "team right" is what the aggregator loses.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter

import numpy as np

from srpo_agents.models.policy import load_policy
from srpo_agents.rollout.engine import RolloutEngine
from srpo_agents.rollout.envs import env_factory, env_pool
from srpo_agents.running.evaluate import run_tasks
from srpo_bench.math_team import math_demo_config as demo_config


def team_roles(policy_dir: str, tasks: int, k: int, seed: int = 1) -> dict[str, float]:
    config = demo_config("unused", seed)
    engine = RolloutEngine(load_policy(policy_dir), max_new_tokens=config.max_new_tokens,
                           seed=seed)
    envs = env_pool(env_factory(config, "test"), 256, seed)
    episodes = tasks * k
    counts, agreeing, follows = Counter(), 0, 0
    for _, _, _, rollout in run_tasks(engine, envs, range(tasks), k, tag="roles"):
        solve, final = rollout.transitions[0].info, rollout.transitions[-1].info
        right = list(solve["member_correct"].values())
        answers = [a for a in solve["member_answers"].values() if a]
        chosen = final.get("final_answer")
        counts["solver right"] += float(np.mean(right))
        counts["any solver right"] += any(right)
        counts["majority right"] += solve["correct"]
        counts["team right"] += bool(final["correct"])
        counts["aggregator copies a solver"] += chosen in answers
        majority = solve["majority_answer"]
        if answers.count(majority) >= 2:
            agreeing += 1
            follows += chosen == majority
    out = {key: value / episodes for key, value in counts.items()}
    out["aggregator follows a majority"] = follows / max(agreeing, 1)
    out["episodes with a majority"] = agreeing / episodes
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("policies", nargs="+")
    parser.add_argument("--tasks", type=int, default=200)
    parser.add_argument("--k", type=int, default=4)
    args = parser.parse_args()
    rows = {path: team_roles(path, args.tasks, args.k) for path in args.policies}
    keys = list(next(iter(rows.values())))
    print(f"held-out: {args.tasks} tasks x {args.k} samples\n")
    print("| policy | " + " | ".join(keys) + " |")
    print("|---|" + "---:|" * len(keys))
    for path, row in rows.items():
        print(f"| {path} | " + " | ".join(f"{row[key]:.3f}" for key in keys) + " |")
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
