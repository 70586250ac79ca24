"""More update levers for the real model on this CPU (issue 61): micro-batches of 16
rows instead of the recipe's 8, PyTorch's fused AdamW instead of its default (a loop
over the parameters on the CPU), shared prompt prefixes run once
(``--share-prompt-prefix``) and, under them, micro-batches ordered by response length
(less padding; ``mb8 prefix by-prompt`` is the order before), each on one fixed real team batch under bf16 autocast (or
float32), alternating, two rounds.

    python benchmarks/speed/update_forms.py [--forms mb8 "mb8 prefix"] [--float32]
        [--results update_forms_order]

Each form gets a fresh learner on a fresh copy of the same weights, warmed by one update
on 4 units (its AdamW state allocated) before the timed update of the whole batch; the
batch is ``real_precision.py``'s (the recipe's solve_verify setting played once by the
untrained model, every unit updated). Writes ``benchmarks/results/update_forms.md``
(``update_forms_float32.md`` with ``--float32``): seconds per form and round, medians; prints
the peak resident memory; one learner is alive at a time (four at once did not fit in 24 GiB).
"""

from __future__ import annotations

import argparse
import gc
import resource
import statistics

import numpy as np
import torch
from real_precision import update_seconds  # this folder's: the same timed update

from srpo_agents.learning.events import UnitBatch
from srpo_agents.learning.learner import Learner, LearnerConfig
from srpo_agents.learning.objective import ALGORITHMS
from srpo_agents.models.policy import load_policy
from srpo_agents.running.real_recipe import BATCH, SETTING, TEAM
from srpo_bench.batches import make_batch
from srpo_bench.machine import describe, write_results


def by_prompt_tokens(unit) -> tuple:
    """The learner's micro-batch order with shared prefixes before ``by_response`` (at
    e1d888a): by prompt tokens, so a task's verifier prompts sit side by side."""
    return (unit.members[0].prompt_ids,
            max(len(m.prompt_ids) + len(m.response_ids) for m in unit.members))


FORMS = {"mb8": (8, False, False, None), "mb16": (16, False, False, None),
         "mb8 fused": (8, True, False, None), "mb8 prefix": (8, False, True, None),
         "mb8 prefix by-prompt": (8, False, True, by_prompt_tokens),
         "mb16 prefix": (16, False, True, None)}
"""name: (micro-batch rows, fused AdamW, shared prompt prefixes run once, micro-batch
order: None for the learner's own, ``learner.by_response`` with shared prefixes)."""


def response_positions(policy, units, advantages, rows: int, prefix: bool, order) -> int:
    """The positions the update's response passes compute: each micro-batch's rows times
    its longest response (padding included), in the form's micro-batches."""
    learner = Learner(policy, ALGORITHMS["srpo"], LearnerConfig(
        microbatch_rows=rows, share_prompt_prefix=prefix))
    learner.microbatch_order = order
    micros = learner._microbatches(UnitBatch(units, np.asarray(advantages, dtype=float)))
    return sum(sum(u.size for u in m.units)
               * max(len(s.response_ids) for u in m.units for s in u.members) for m in micros)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--forms", nargs="+", default=list(FORMS), choices=list(FORMS))
    parser.add_argument("--float32", action="store_true", help="float32, not bf16 autocast")
    parser.add_argument("--note", default="", help="a sentence on how the run shared the CPU")
    parser.add_argument("--results", default=None,
                        help="results name (default update_forms[_float32])")
    args = parser.parse_args()
    forms = {name: FORMS[name] for name in args.forms}
    compute = None if args.float32 else torch.bfloat16
    torch.manual_seed(0)
    policy = load_policy(SETTING["model"])
    setting = {k: v for k, v in SETTING.items() if k not in ("temperature", "max_new_tokens")}
    units, advantages = make_batch(policy, BATCH["tasks_per_step"], BATCH["group_size"],
                                   SETTING["max_new_tokens"], workflow=TEAM, **setting)
    positions = {name: response_positions(policy, units, advantages, rows, prefix, order)
                 for name, (rows, _, prefix, order) in forms.items()}
    tokens = sum(len(s.response_ids) for u in units for s in u.members)
    times: dict[str, list[float]] = {name: [] for name in forms}
    for round_ in range(2):
        for name, (rows, fused, prefix, order) in forms.items():
            times[name].append(update_seconds(policy, units, advantages, compute,
                                              rows, fused, prefix, order))
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6
            print(round_, name, f"{times[name][-1]:.1f} s", f"peak RSS {peak:.2f} GB",
                  flush=True)
            gc.collect()
    write_results(results_name(args), table(times, args, positions, tokens),
                  {"seconds": times, "response_positions": positions, "response_tokens": tokens})


def results_name(args) -> str:
    return args.results or "update_forms" + ("_float32" if args.float32 else "")


def table(times: dict[str, list[float]], args, positions: dict[str, int] | None = None,
          tokens: int = 0) -> list[str]:
    """Each form's seconds per round, its median, and the first form's over it."""
    first = statistics.median(next(iter(times.values())))
    forms = " ".join(f'"{name}"' if " " in name else name for name in times)
    lines = [f"# One real update by form ({'float32' if args.float32 else 'bf16 autocast'})", "",
             f"Command: `python benchmarks/speed/update_forms.py --forms {forms}"
             f"{' --float32' if args.float32 else ''}"
             f"{' --results ' + args.results if args.results else ''}`", "",
             f"Machine: {describe()}. {args.note}".rstrip(), "",
             "SmolLM2-135M-Instruct, one SRPO update of one fixed real team batch (the "
             "recipe's 4 tasks x G = 8, solve-verify, every unit) from a fresh copy of the "
             "same weights per form, the forms alternating; seconds per round (the first "
             "round's first update is the process's first, which runs slower).", "",
             "| form | seconds by round | median | speed-up over the first form "
             f"| response positions ({tokens} tokens) |",
             "|---|---|---:|---:|---:|"]
    for name, seconds in times.items():
        median = statistics.median(seconds)
        lines.append(f"| {name} | {', '.join(f'{s:.1f}' for s in seconds)} | {median:.1f} | "
                     f"{first / median:.2f}x | {(positions or {}).get(name, '-')} |")
    return lines


if __name__ == "__main__":
    main()
