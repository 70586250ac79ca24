"""What ``--skip-zero-advantage`` saves: one SRPO update of SmolLM2-135M-Instruct on a
real team batch, with and without it, from the same weights.

    python benchmarks/speed/skip_zero_speed.py [--repeats 2]

The batch: the real-model recipe's setting (``srpo_agents.running.real_recipe``: level-0
math, the ``example-v1`` prompts, the solve_verify team, 4 tasks x G = 8, at most 128
new tokens) played once by the untrained model (temperature 1); per-task advantages,
zero where a task's 8 episodes all scored alike. The two updates alternate, ``repeats``
times each, each from a fresh copy of the weights, in this one process (so other load
on the machine falls on both); the weights after each are compared.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time

import torch

from srpo_agents.learning.learner import Learner, LearnerConfig
from srpo_agents.learning.objective import ALGORITHMS
from srpo_agents.models.policy import load_policy
from srpo_agents.running.real_recipe import BATCH, SETTING, TEAM
from srpo_bench.batches import make_batch
from srpo_bench.machine import describe, write_results


def update(policy, units, advantages, skip: bool) -> tuple[float, list[torch.Tensor]]:
    trained = copy.deepcopy(policy)
    learner = Learner(trained, ALGORITHMS["srpo"],
                      LearnerConfig(lr=1e-5, microbatch_rows=BATCH["microbatch_rows"],
                                    skip_zero_advantage=skip))
    start = time.perf_counter()
    learner.update(units, advantages)
    return time.perf_counter() - start, [p.detach() for p in trained.model.parameters()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    torch.manual_seed(0)
    policy = load_policy(SETTING["model"])
    setting = {k: v for k, v in SETTING.items() if k not in ("temperature", "max_new_tokens")}
    units, advantages = make_batch(policy, BATCH["tasks_per_step"], BATCH["group_size"],
                                   SETTING["max_new_tokens"], fill_zero=False,
                                   workflow=TEAM, **setting)
    seconds = {False: [], True: []}
    weights = {}
    for _ in range(args.repeats):
        for skip in (False, True):
            took, weights[skip] = update(policy, units, advantages, skip)
            seconds[skip].append(took)
    gap = max(float((a - b).abs().max()) for a, b in zip(weights[False], weights[True],
                                                          strict=True))
    full, skipped = (statistics.median(seconds[s]) for s in (False, True))
    zero = float((advantages == 0).mean())
    rows = sum(u.size for u in units)
    lines = ["# `--skip-zero-advantage`: one update's time", "",
             f"Command: `python benchmarks/speed/skip_zero_speed.py --repeats {args.repeats}`", "",
             f"Machine: {describe()}.", "",
             f"One SRPO update of SmolLM2-135M-Instruct (float32, micro-batches of "
             f"{BATCH['microbatch_rows']} rows) on a real solve_verify batch of the real-model "
             f"recipe: {len(units)} units ({rows} rows), {zero:.0%} of them with advantage 0. "
             f"The two updates alternate in one process, {args.repeats} times each.", "",
             "| update | seconds (median) | each |", "|---|---:|---|",
             f"| every unit | {full:.1f} | {', '.join(f'{s:.1f}' for s in seconds[False])} |",
             f"| --skip-zero-advantage | {skipped:.1f} | "
             f"{', '.join(f'{s:.1f}' for s in seconds[True])} |", "",
             f"Time with the flag over time without: **{skipped / full:.2f}**. Largest "
             f"difference between the weights after the two updates: {gap:.2e} (float "
             "round-off: the passes group the rows differently)."]
    write_results("skip_zero_speed", lines, {
        "units": len(units), "rows": rows, "zero_fraction": zero, "seconds": {
            "full": seconds[False], "skip": seconds[True]}, "ratio": skipped / full,
        "max_weight_difference": gap, "repeats": args.repeats})


if __name__ == "__main__":
    main()
