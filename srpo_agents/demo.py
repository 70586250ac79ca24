"""``make demo``: warm start a tiny policy, then train it with SRPO on SRPO-Math-v0's
parallel workflow (3 solvers in one event, then an aggregator) on the embedded task
generator, and print a before/after table. Sized for 2 CPU cores and about 10 minutes.

    python -m srpo_agents.demo [--out runs/demo] [--steps 20]
"""

from __future__ import annotations

import argparse
import time

from srpo_agents.cli import format_table
from srpo_agents.config import TrainConfig
from srpo_agents.train import train


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", default="runs/demo")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    config = TrainConfig(env="SRPO-Math-v0", workflow="parallel", n_agents=3, algo="srpo",
                         model="tiny", steps=args.steps, group_size=8, tasks_per_step=16,
                         lr=2e-5, difficulty=(0,), max_new_tokens=32, eval_tasks=100,
                         eval_k=8, warmstart_minutes=3.0, warmstart_target=0.2,
                         seed=args.seed, out=args.out, save_every=5)
    start = time.monotonic()
    summary = train(config)
    print()
    print(format_table(summary["before"], summary["after"]))
    print(f"\nheld-out: {summary['after']['tasks']} tasks x k={summary['after']['k']}; "
          f"± is the standard error over tasks. Wall time {time.monotonic() - start:.0f} s.")
    print(f"run directory: {config.out} (metrics.jsonl, summary.json, learning_curve.png)")


if __name__ == "__main__":
    main()
