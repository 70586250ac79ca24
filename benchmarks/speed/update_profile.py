"""Where a real-model update's time goes on this CPU (issue 61): torch's profiler over one
SRPO update of one fixed real team batch, as the recipe's speed settings run it (bf16
autocast where the CPU computes bf16 natively, shared prompt prefixes, micro-batches by
response length), and this CPU's matrix-product rate beside it.

    python benchmarks/speed/update_profile.py [--float32] [--results update_profile]

The batch and the warm-up are ``update_forms.py``'s (``real_precision.update_seconds``'s
learner: a fresh copy of the weights, one update of 4 units first so AdamW's state
exists). Then one timed update without the profiler and one with it. The table groups the
operators' own CPU time: matrix products (``aten::mm``/``bmm``/``addmm``), attention
(``scaled_dot_product``: forward and backward kernels), casts and copies (``copy_``,
``_to_copy``: autocast's bf16 copies of the float32 weights and their gradients' way
back), and the rest (element-wise work: norms, rotary, SiLU, the vocabulary-wide
log-softmax and its backward, AdamW). The matrix-product rate: a [2048, 576] x
[576, 1536] product (SmolLM2's MLP) in float32 and in bf16, GFLOP/s; and the update's
arithmetic, counted by ``torch.utils.flop_counter`` over a third update.
"""

from __future__ import annotations

import argparse
import copy
import time

import numpy as np
import torch
from torch.profiler import ProfilerActivity, profile
from torch.utils.flop_counter import FlopCounterMode

from srpo_agents.learning.learner import Learner, LearnerConfig
from srpo_agents.learning.objective import ALGORITHMS
from srpo_agents.models.policy import load_policy, native_bf16
from srpo_agents.running.real_recipe import BATCH, SETTING, TEAM
from srpo_bench.batches import make_batch
from srpo_bench.machine import describe, write_results

GROUPS = {"matrix products": ("aten::mm", "aten::bmm", "aten::addmm"),
          "attention": ("scaled_dot_product",),
          "casts and copies": ("aten::copy_", "aten::_to_copy")}
"""Operator-name fragments of each group; every other operator is "the rest"."""


def matmul_gflops(dtype: torch.dtype, repeats: int = 50) -> float:
    a, b = torch.randn(2048, 576, dtype=dtype), torch.randn(576, 1536, dtype=dtype)
    for _ in range(3):
        a @ b
    start = time.perf_counter()
    for _ in range(repeats):
        a @ b
    return 2 * 2048 * 576 * 1536 * repeats / (time.perf_counter() - start) / 1e9


def group_of(name: str) -> str:
    return next((group for group, parts in GROUPS.items()
                 if any(part in name for part in parts)), "the rest")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--float32", action="store_true", help="float32, not bf16 autocast")
    parser.add_argument("--results", default="update_profile")
    parser.add_argument("--note", default="", help="a sentence on how the run shared the CPU")
    args = parser.parse_args()
    torch.manual_seed(0)
    policy = load_policy(SETTING["model"])
    setting = {k: v for k, v in SETTING.items() if k not in ("temperature", "max_new_tokens")}
    units, advantages = make_batch(policy, BATCH["tasks_per_step"], BATCH["group_size"],
                                   SETTING["max_new_tokens"], workflow=TEAM, **setting)
    trained = copy.deepcopy(policy)
    trained.compute_dtype = None if args.float32 else torch.bfloat16
    learner = Learner(trained, ALGORITHMS["srpo"], LearnerConfig(
        lr=1e-5, microbatch_rows=BATCH["microbatch_rows"], share_prompt_prefix=True))
    learner.update(units[:4], advantages[:4])     # AdamW's state allocated, as in a run
    start = time.perf_counter()
    learner.update(units, advantages)
    plain = time.perf_counter() - start
    with FlopCounterMode(display=False) as flops:
        learner.update(units, advantages)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        learner.update(units, advantages)
    events = [e for e in prof.key_averages() if e.self_cpu_time_total > 0]
    total = sum(e.self_cpu_time_total for e in events) / 1e6
    groups: dict[str, float] = {}
    for e in events:
        groups[group_of(e.key)] = groups.get(group_of(e.key), 0.0) + e.self_cpu_time_total / 1e6
    top = sorted(events, key=lambda e: -e.self_cpu_time_total)[:12]
    rates = {"float32": matmul_gflops(torch.float32), "bfloat16": matmul_gflops(torch.bfloat16)}
    tokens = sum(len(s.response_ids) for u in units for s in u.members)
    figures = {"update_seconds": plain, "profiled_seconds": total, "groups": groups,
               "top": [{"op": e.key, "seconds": e.self_cpu_time_total / 1e6,
                        "calls": e.count} for e in top],
               "matmul_gflops": rates, "response_tokens": tokens,
               "update_gflop": flops.get_total_flops() / 1e9,
               "native_bf16": native_bf16(), "units": len(units),
               "advantages_nonzero": int(np.count_nonzero(advantages))}
    write_results(args.results, table(figures, args), figures)


def table(f: dict, args) -> list[str]:
    total = f["profiled_seconds"]
    lines = [f"# Where a real update's time goes ({'float32' if args.float32 else 'bf16 autocast'})",
             "", f"Command: `python benchmarks/speed/update_profile.py"
             f"{' --float32' if args.float32 else ''}`", "",
             f"Machine: {describe()}. {args.note}".rstrip(), "",
             f"SmolLM2-135M-Instruct, one SRPO update of one fixed real team batch ({f['units']} "
             f"units, {f['response_tokens']} response tokens; shared prompt prefixes, "
             f"micro-batches by response length): {f['update_seconds']:.1f} s unprofiled, "
             f"{total:.1f} s of operators' own CPU time under the profiler. This CPU's "
             f"matrix products ([2048, 576] x [576, 1536]): {f['matmul_gflops']['float32']:.0f} "
             f"GFLOP/s in float32, {f['matmul_gflops']['bfloat16']:.0f} in bf16. The update's "
             f"matrix products and attention (torch's FLOP counter): {f['update_gflop']:.0f} "
             f"GFLOP, {f['update_gflop'] / f['matmul_gflops']['bfloat16']:.1f} s at that bf16 "
             f"rate: the floor the arithmetic sets; the rest of the update's seconds are "
             f"per-operator and memory-bound work. The profiler's own overhead inflates "
             f"small operators most, so the groups' shares are rough.", "",
             "| group | seconds | share |", "|---|---:|---:|"]
    for group, seconds in sorted(f["groups"].items(), key=lambda kv: -kv[1]):
        lines.append(f"| {group} | {seconds:.1f} | {seconds / total:.0%} |")
    lines += ["", "| operator (top 12 by own time) | seconds | calls |", "|---|---:|---:|"]
    lines += [f"| `{t['op'][:60]}` | {t['seconds']:.2f} | {t['calls']} |" for t in f["top"]]
    return lines


if __name__ == "__main__":
    main()
