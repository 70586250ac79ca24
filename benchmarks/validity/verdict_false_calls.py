"""How often the comparison's verdict rule calls a difference that is not there.

Simulated A-minus-B per-task differences with no true effect: per seed a training
offset drawn with sd ``--seed-sd`` (the run-to-run spread), plus per-task noise with sd
``--task-sd`` (a per-task avg@4 difference spreads about 0.3 on the demo's tasks), over
500 tasks and 3 seeds. Each case is judged by ``srpo_agents.running.verdicts.difference`` under
its bar (max(2, t quantile)) and under a bar of 2 standard errors, the rule first used.

    python benchmarks/validity/verdict_false_calls.py [--trials 300]

Writes benchmarks/results/verdict_false_calls.md and .json.
"""

from __future__ import annotations

import argparse

import numpy as np

from srpo_agents.running import verdicts
from srpo_bench.machine import write_results


def trial(rng, seeds: int, tasks: int, seed_sd: float, task_sd: float) -> dict:
    offsets = rng.normal(0, seed_sd, seeds)
    a = [{"seed": s, "per_task_avg": list(offsets[s] + rng.normal(0, task_sd, tasks))}
         for s in range(seeds)]
    b = [{"seed": s, "per_task_avg": [0.0] * tasks} for s in range(seeds)]
    return verdicts.difference(a, b)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=300)
    parser.add_argument("--seeds", type=int, default=3)
    args = parser.parse_args()
    verdicts.BOOTSTRAP_DRAWS = 500  # the SE to about 3%; the rates are what matter
    rng = np.random.default_rng(0)
    rows = []
    for seed_sd, task_sd in ((0.03, 0.3), (0.0, 0.3), (0.03, 0.0)):
        calls = {"t": 0, "two": 0}
        for _ in range(args.trials):
            d = trial(rng, args.seeds, 500, seed_sd, task_sd)
            agree = all(x > 0 for x in d["per_seed"]) or all(x < 0 for x in d["per_seed"])
            calls["t"] += d["verdict"] != "within noise"
            calls["two"] += agree and abs(d["diff"]) > 2 * d["se"]
        rows.append({"seed_sd": seed_sd, "task_sd": task_sd, "trials": args.trials,
                     "called_at_t": calls["t"] / args.trials,
                     "called_at_2": calls["two"] / args.trials})
    bar = verdicts.bar(args.seeds)
    lines = ["# False calls of the verdict rule (no true difference)", "",
             f"Command: `python benchmarks/validity/verdict_false_calls.py --trials {args.trials}"
             f" --seeds {args.seeds}`", "",
             f"{args.seeds} seeds x 500 tasks per trial; a call is 'ahead' or 'behind' with "
             f"every seed agreeing in sign. The bar at {args.seeds} seeds is {bar:.2f} "
             "standard errors.", "",
             "| seed spread (sd) | task noise (sd) | called at the bar | called at 2 SE |",
             "|---:|---:|---:|---:|"]
    lines += [f"| {r['seed_sd']} | {r['task_sd']} | {r['called_at_t']:.3f} | "
              f"{r['called_at_2']:.3f} |" for r in rows]
    write_results("verdict_false_calls", lines, rows)


if __name__ == "__main__":
    main()
