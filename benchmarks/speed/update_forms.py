"""Two more update levers for the real model on this CPU (issue 61): micro-batches of 16
rows instead of the recipe's 8, and PyTorch's fused AdamW instead of its default
(a loop over the parameters on the CPU), each on one fixed real team batch under bf16
autocast, alternating, two rounds.

    python benchmarks/speed/update_forms.py

Each form gets a fresh learner on a fresh copy of the same weights, warmed by one update
on 4 units (its AdamW state allocated) before the timed update of the whole batch; the
batch is ``real_precision.py``'s (the recipe's solve_verify setting played once by the
untrained model, every unit updated). Prints seconds per form, their medians and the peak
resident memory; one learner is alive at a time (four at once did not fit in 24 GiB).
"""

from __future__ import annotations

import gc
import resource
import statistics

import torch
from real_precision import update_seconds  # this folder's: the same timed update

from srpo_agents.models.policy import load_policy
from srpo_agents.running.real_recipe import BATCH, SETTING, TEAM
from srpo_bench.batches import make_batch

FORMS = {"mb8": (8, False), "mb16": (16, False), "mb8 fused": (8, True)}
"""name: (micro-batch rows, fused AdamW)."""


def main() -> None:
    torch.manual_seed(0)
    policy = load_policy(SETTING["model"])
    setting = {k: v for k, v in SETTING.items() if k not in ("temperature", "max_new_tokens")}
    units, advantages = make_batch(policy, BATCH["tasks_per_step"], BATCH["group_size"],
                                   SETTING["max_new_tokens"], workflow=TEAM, **setting)
    times: dict[str, list[float]] = {name: [] for name in FORMS}
    for round_ in range(2):
        for name, (rows, fused) in FORMS.items():
            times[name].append(update_seconds(policy, units, advantages, torch.bfloat16,
                                              rows, fused))
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6
            print(round_, name, f"{times[name][-1]:.1f} s", f"peak RSS {peak:.2f} GB",
                  flush=True)
            gc.collect()
    for name, seconds in times.items():
        print(name, f"median {statistics.median(seconds):.1f} s", [round(s, 1) for s in seconds])


if __name__ == "__main__":
    main()
