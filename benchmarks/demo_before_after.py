"""Held-out avg@k and pass@k of the tiny policy before and after `make demo`'s training,
on more tasks than the demo itself evaluates (500 held-out tasks, k = 8), so the
difference can be read against its standard error.

"Before" is the warm-started policy (``<run>/warmstart``), "after" the trained one
(``<run>/policy``); both are sampled at temperature 1 on the same task indices of the
generator's test split, with the demo's environment settings.

    make demo   # or: python -m srpo_agents.demo --out runs/demo
    python benchmarks/demo_before_after.py --run runs/demo [--tasks 500 --k 8]

Writes benchmarks/results/demo_before_after.md.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
from pathlib import Path

from srpo_agents.cli import format_table
from srpo_agents.config import TrainConfig
from srpo_agents.envs import env_factory
from srpo_agents.evaluate import eval_pool, evaluate
from srpo_agents.policy import load_policy
from srpo_agents.rollout import RolloutEngine


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--run", default="runs/demo")
    parser.add_argument("--tasks", type=int, default=500)
    parser.add_argument("--k", type=int, default=8)
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" /
                                             "demo_before_after.md"))
    args = parser.parse_args()
    run = Path(args.run)
    saved = json.loads((run / "summary.json").read_text())
    config = TrainConfig(**{**saved["config"], "difficulty": tuple(saved["config"]["difficulty"])})
    envs = eval_pool(env_factory(config, "test"), 256, config.seed + 7)
    results = {}
    for label, folder in (("before", run / "warmstart"), ("after", run / "policy")):
        engine = RolloutEngine(load_policy(str(folder)), max_new_tokens=config.max_new_tokens,
                               temperature=config.temperature, seed=config.seed + 7)
        results[label] = evaluate(engine, envs, list(range(args.tasks)), args.k, tag=label)
    diff = results["after"]["avg_at_k"] - results["before"]["avg_at_k"]
    err = math.hypot(results["after"]["avg_at_k_stderr"], results["before"]["avg_at_k_stderr"])
    lines = [
        "# Tiny policy before and after `make demo`'s SRPO training", "",
        f"Command: `python benchmarks/demo_before_after.py --run {args.run} --tasks {args.tasks} "
        f"--k {args.k}`  ",
        f"Machine: {platform.machine()}, 2-core CPU, python {platform.python_version()}  ",
        f"Training: {config.steps} SRPO steps x {config.tasks_per_step} tasks x G={config.group_size}"
        f", {config.env} `{config.workflow}` with K={config.n_agents}, lr {config.lr}, "
        f"difficulty {list(config.difficulty)}, warm start {saved['warm_start'].get('steps')} "
        f"SFT steps (held-out avg@2 {saved['warm_start'].get('accuracy', float('nan')):.3f}).", "",
        f"Held-out: {args.tasks} tasks of the generator's test split, k={args.k} samples each at "
        f"temperature {config.temperature}; ± is the standard error over tasks.", "",
        format_table(results["before"], results["after"]), "",
        f"avg@{args.k} change: {diff:+.3f} ± {err:.3f} (combined standard error).",
    ]
    text = "\n".join(lines) + "\n"
    Path(args.out).write_text(text, encoding="utf-8")
    (Path(args.out).with_suffix(".json")).write_text(json.dumps(results, indent=2))
    print(text)


if __name__ == "__main__":
    main()
