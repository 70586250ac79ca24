"""``make demo``: warm start a tiny policy, then train it with SRPO on SRPO-Math-v0's
parallel workflow (3 solvers in one event, then an aggregator) on the embedded task
generator, and print a before/after table with the paired difference and its standard
error. Sized for 2 CPU cores and at most 15 minutes.

    python -m srpo_agents.demo [--out runs/demo] [--seed 0] [--steps N]

Why these settings (measured in ``benchmarks/results/demo_sweep.md``, see docs/training.md):
- the warm start imitates a scripted team for a fixed number of steps (400, with a
  20-step lr warm-up and a cosine decay to a tenth), so it does not depend on the
  machine's speed (its time cap only guards against a hang). Its solvers imitate only
  right solutions. Its aggregator sees only the solvers' final answers (not the
  question, not the working) and imitates their majority, right or wrong (the team it
  imitates is right half the time), so it learns to follow its solvers: the team's
  answer comes from the solvers and their credit is real. With 400 steps and the decay
  the arithmetic "clicked" by the end on every seed tried; at a constant lr, 250 steps
  had left seeds 1 and 2 near guessing. It leaves the team right about half to four
  fifths of the time, with the aggregator still often not following the majority: the
  skill is there but used unreliably, which is where RL helps;
- SRPO then runs 60 steps of 16 tasks x G=8 and makes 4 clipped updates per batch of
  rollouts (one epoch in mini-batches of 64 of the 256 units), as PPO-family trainers
  do, at lr 3e-5 with clip-higher (eps_high 0.28), chosen from the sweep on seed 0. A
  larger step sharpened the team and lost pass@8, so the time the short aggregator
  prompt saved buys more steps instead;
- held-out: 500 test-split tasks x k = 8 before and after, and the first 100 of them
  halfway (a third point of the learning curve, at a fifth of the cost).
"""

from __future__ import annotations

import argparse
import time

from srpo_agents.cli import format_table
from srpo_agents.config import TrainConfig
from srpo_agents.train import train

DEMO = dict(env="SRPO-Math-v0", workflow="parallel", n_agents=3, algo="srpo", model="tiny",
            steps=60, group_size=8, tasks_per_step=16, lr=3e-5, epochs=1, minibatch_units=64,
            eps_high=0.28, difficulty=(0,), max_new_tokens=32, eval_tasks=500, eval_k=8,
            eval_every=30, curve_tasks=100, warmstart_steps=400, warmstart_decay=True,
            warmstart_minutes=60.0, warmstart_target=1.0,
            warmstart_skill=0.5, save_every=6)


def demo_config(out: str = "runs/demo", seed: int = 0, **overrides) -> TrainConfig:
    return TrainConfig(**{**DEMO, "out": out, "seed": seed, **overrides})


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="runs/demo")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=DEMO["steps"])
    args = parser.parse_args(argv)
    config = demo_config(args.out, args.seed, steps=args.steps,
                         eval_every=max(1, args.steps // 2))
    start = time.monotonic()
    summary = train(config)
    d, k = summary["difference"], config.eval_k
    print()
    print(format_table(summary["before"], summary["after"]))
    print(f"| after - before, paired by task | avg@{k} {d['avg_at_k']:+.3f} ± "
          f"{d['avg_at_k_stderr']:.3f} ({d['avg_at_k_z']:+.1f} SE) | pass@{k} "
          f"{d['pass_at_k']:+.3f} ± {d['pass_at_k_stderr']:.3f} |")
    times = summary["time_breakdown"]
    print(f"\nheld-out: {d['tasks']} tasks x k={k}; ± is the standard error over tasks "
          f"(of the per-task difference in the last row). Wall time "
          f"{time.monotonic() - start:.0f} s: " + ", ".join(
              f"{name} {seconds:.0f} s" for name, seconds in times.items() if name != "total"))
    print(f"run directory: {config.out} (metrics.jsonl, summary.json, learning_curve.png)")


if __name__ == "__main__":
    main()
