"""Optimizer steps and clipped share per algorithm on one batch, before and after issue 60.

One batch of the harness's Math parallel team (K = 3 solvers, then the aggregator; 16
tasks x G = 8, 32 new tokens, the committed warm start of
``benchmarks/results/harness_compare``): every algorithm's one update on the very same
episodes, read from one rollouts file, each from the same starting weights. The same
script runs on two code trees: issue 60's (mini-batches of 32 episodes, losses that sum
tokens divided by the 32-token budget) and the commit before it (mini-batches of 64
units, no normalizer: the settings the harness's compare preset ran with).

    python benchmarks/comparisons/fair_steps.py play --out runs/fair-steps   # the batch, once
    python benchmarks/comparisons/fair_steps.py update --out runs/fair-steps --label after
    git worktree add /tmp/before fd4385c
    PYTHONPATH=/tmp/before python benchmarks/comparisons/fair_steps.py update \\
        --out runs/fair-steps --label before
    python benchmarks/comparisons/fair_steps.py report --out runs/fair-steps

Writes ``benchmarks/results/fair_steps.md`` and ``.json``. About 3 minutes on one core.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[2]
START = REPO / "benchmarks/results/harness_compare/warmstart/SRPO-Math-v0-parallel/warmstart"
RESULTS = REPO / "benchmarks" / "results"
ALGOS = ("srpo", "srpo_sum", "srpo_mean", "srpo_singleton", "grpo", "dr_mas", "at_grpo",
         "magrpo")
TASKS, GROUP, NEW_TOKENS = 16, 8, 32


def play(out: Path) -> None:
    from srpo_agents.config import TrainConfig
    from srpo_agents.models.policy import load_policy
    from srpo_agents.rollout.engine import RolloutEngine
    from srpo_agents.rollout.envs import env_factory
    from srpo_agents.rollout.files import write_rollouts

    out.mkdir(parents=True, exist_ok=True)
    config = TrainConfig(env="SRPO-Math-v0", workflow="parallel", n_agents=3,
                         difficulty=(0, 1), compact_prompts=True, max_new_tokens=NEW_TOKENS)
    make = env_factory(config, "train")
    envs = [make(i) for i in range(TASKS * GROUP)]
    engine = RolloutEngine(load_policy(str(START)), max_new_tokens=NEW_TOKENS, seed=0)
    options = [{"task_index": t, "episode_id": f"t{t}-g{g}"}
               for t in range(TASKS) for g in range(GROUP)]
    rollouts = engine.run(envs, options)
    write_rollouts(rollouts, out / "rollouts.jsonl")
    print(f"{len(rollouts)} episodes, mean return "
          f"{np.mean([r.reward for r in rollouts]):.3f} -> {out / 'rollouts.jsonl'}")


def update(out: Path, label: str) -> None:
    from srpo_agents.learning.events import build_units
    from srpo_agents.learning.learner import Learner, LearnerConfig
    from srpo_agents.learning.objective import ADVANTAGE_ESTIMATORS, ALGORITHMS
    from srpo_agents.models.policy import load_policy
    from srpo_agents.rollout.files import read_rollouts

    torch.set_num_threads(1)
    names = {f.name for f in dataclasses.fields(LearnerConfig)}
    # the compare preset's learner settings as each tree names them
    sizing = ({"minibatch_episodes": 32, "token_budget": NEW_TOKENS}
              if "minibatch_episodes" in names else {"minibatch_units": 64})
    rollouts = read_rollouts(out / "rollouts.jsonl")
    base = load_policy(str(START))
    # every optimizer step's pre-clip norm, from the clip itself (the tree before issue 60
    # logged only the mean)
    norms: list[float] = []
    clip = torch.nn.utils.clip_grad_norm_

    def recording_clip(parameters, max_norm, *args, **kwargs):
        norm = clip(parameters, max_norm, *args, **kwargs)
        norms.append(float(norm))
        return norm

    torch.nn.utils.clip_grad_norm_ = recording_clip
    rows = {}
    for algo in ALGOS:
        algorithm = ALGORITHMS[algo]
        units, _ = build_units(rollouts, algorithm.unit)
        advantages = ADVANTAGE_ESTIMATORS[algorithm.advantage]([u.info for u in units])
        learner = Learner(copy.deepcopy(base), algorithm,
                          LearnerConfig(lr=3e-5, eps_high=0.28, **sizing), seed=0)
        norms.clear()
        figures = learner.update(units, advantages)
        assert len(norms) == figures["updates"]
        rows[algo] = {"units": len(units), "updates": figures["updates"],
                      "grad_norm": float(np.mean(norms)), "grad_norm_max": max(norms),
                      "grad_clipped": float(np.mean([n > 1.0 for n in norms])),
                      "norms": norms, "sizing": sizing}
        print(label, algo, rows[algo])
    path = out / f"{label}.json"
    path.write_text(json.dumps(rows, indent=1))


def report(out: Path) -> None:
    runs = {label: json.loads((out / f"{label}.json").read_text())
            for label in ("before", "after")}
    lines = ["# Optimizer steps and clipped share per algorithm, one batch, before and after "
             "issue 60", "",
             f"`python benchmarks/comparisons/fair_steps.py` (its docstring has the commands): "
             f"one batch of "
             f"the harness's Math parallel team (K = 3, then the aggregator; {TASKS} tasks x "
             f"G = {GROUP}, {NEW_TOKENS} new tokens, levels 0-1, the compare preset's warm "
             "start), one update per algorithm from the same weights, lr 3e-5, "
             "max_grad_norm 1.0. Before (commit fd4385c): mini-batches of 64 units, losses as "
             "written. After: mini-batches of 32 episodes, losses that sum tokens divided by "
             f"the {NEW_TOKENS}-token budget. \"clipped\": the share of the update's optimizer "
             "steps whose pre-clip gradient norm exceeded 1.0, read from the clip itself in "
             "both trees.", "",
             "| algo | units | steps before | steps after | grad norm before | "
             "grad norm after | max before | max after | clipped before | clipped after |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]

    def fmt(value, spec=".3f"):
        return "" if value is None else format(value, spec)

    for algo in ALGOS:
        b, a = runs["before"][algo], runs["after"][algo]
        lines.append(f"| {algo} | {a['units']} | {b['updates']} | {a['updates']} | "
                     f"{fmt(b['grad_norm'])} | {fmt(a['grad_norm'])} | "
                     f"{fmt(b['grad_norm_max'])} | {fmt(a['grad_norm_max'])} | "
                     f"{fmt(b['grad_clipped'], '.2f')} | {fmt(a['grad_clipped'], '.2f')} |")
    (RESULTS / "fair_steps.md").write_text("\n".join(lines) + "\n")
    (RESULTS / "fair_steps.json").write_text(json.dumps(runs, indent=1) + "\n")
    print("\n".join(lines))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=("play", "update", "report"))
    parser.add_argument("--out", default="runs/fair-steps")
    parser.add_argument("--label", default="after")
    args = parser.parse_args()
    out = Path(args.out)
    {"play": lambda: play(out), "update": lambda: update(out, args.label),
     "report": lambda: report(out)}[args.command]()


if __name__ == "__main__":
    main()
