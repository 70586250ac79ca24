"""Decode speed of the hf backend with the real model, the same prompts for every loop:
the loop as it was (``srpo_agents/rollout/generation.py`` at ``--before``, read from git
and imported beside this checkout's), this checkout's loop as the CPU runs it
(``sync_every=1``), as a GPU runs it (the host looks at the batch every 16 steps), and
its compiled loop (``--hf-compile``: static cache under ``torch.compile``; inductor on
the CPU, CUDA graphs on CUDA).

SmolLM2-135M-Instruct, float32, greedy (so every loop must emit the same tokens, which
the script checks), 64 new tokens, on SRPO-Math-v0 solver prompts: ``--tasks`` tasks x
``--group`` rollouts each (identical prompts share their prefill, as in training).
Rounds are interleaved (before, after, after/16, compiled, then again) and the median
of ``--rounds`` is reported; the compiled loop's first call, which compiles, is timed
apart. Speeds are ratios to the first loop, measured in one process.

    python benchmarks/speed/decode_speed.py [--tasks 4] [--group 8] [--rounds 3]
        [--device cpu] [--before f5a81ac]

Writes benchmarks/results/decode_speed.md (and .json).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from srpo_agents.models.policy import load_policy
from srpo_agents.rollout.hf_generator import HFGenerator
from srpo_envs import math_v0

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"
NEW_TOKENS = 64


def old_generator_type(commit: str):
    """``HFGenerator`` as ``commit`` had it, imported from git under another name."""
    source = subprocess.run(["git", "show", f"{commit}:srpo_agents/rollout/generation.py"],
                            cwd=ROOT, check=True, capture_output=True, text=True).stdout
    path = Path(tempfile.mkdtemp()) / "generation_before.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("generation_before", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module.HFGenerator


def solver_prompts(policy, tasks: int, group: int) -> list[list[int]]:
    prompts = []
    for task in range(tasks):
        env = math_v0.parallel_env(workflow="solve_verify", seed=task)
        observations, _ = env.reset(options={"task_index": task})
        agent = env.due_agents[0]
        prompts += [policy.prompt_ids("solver", observations[agent])] * group
    return prompts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=4)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--before", default="f5a81ac")
    parser.add_argument("--out", default=str(RESULTS / "decode_speed"))
    args = parser.parse_args()

    torch.manual_seed(0)
    policy = load_policy("smollm2-135m-instruct", device=args.device, dtype=torch.float32)
    prompts = solver_prompts(policy, args.tasks, args.group)
    settings = {"max_new_tokens": NEW_TOKENS, "temperature": 0.0, "top_p": 1.0,
                "max_batch": len(prompts), "seed": 0}
    loops = {"before": old_generator_type(args.before)(policy, **settings),
             "after": HFGenerator(policy, **settings, sync_every=1),
             "after, host looks every 16 steps": HFGenerator(policy, **settings,
                                                             sync_every=16),
             "after, --hf-compile": HFGenerator(policy, **settings, compile=True)}
    start = time.perf_counter()
    outputs = {"after, --hf-compile": loops["after, --hf-compile"].generate(prompts)}
    compile_seconds = time.perf_counter() - start
    seconds: dict[str, list[float]] = {name: [] for name in loops}
    for _ in range(args.rounds):
        for name, loop in loops.items():
            start = time.perf_counter()
            outputs[name] = loop.generate(prompts)
            seconds[name].append(time.perf_counter() - start)
    reference = outputs["before"]
    tokens = sum(len(ids) for ids, _, _ in reference)
    rows = []
    for name in loops:
        same = all(a[0] == b[0] and a[2] == b[2]
                   for a, b in zip(reference, outputs[name], strict=True))
        gap = max(abs(x - y) for a, b in zip(reference, outputs[name], strict=True)
                  for x, y in zip(a[1], b[1], strict=True))
        median = statistics.median(seconds[name])
        rows.append({"loop": name, "seconds": median, "tokens_per_second": tokens / median,
                     "same_tokens": same, "max_logprob_gap": gap})
    base = rows[0]["seconds"]
    record = {"model": "SmolLM2-135M-Instruct (Q4_1 GGUF, float32)", "device": args.device,
              "prompts": len(prompts), "distinct_prompts": args.tasks,
              "new_tokens_limit": NEW_TOKENS, "tokens": tokens, "rounds": args.rounds,
              "before": args.before, "compile_seconds": compile_seconds,
              "torch": torch.__version__, "cpu": platform.processor() or platform.machine(),
              "rows": rows}
    Path(args.out + ".json").write_text(json.dumps(record, indent=2) + "\n")
    lines = [
        "# Decode speed of the hf loop (SmolLM2-135M-Instruct)", "",
        f"`python benchmarks/speed/decode_speed.py --tasks {args.tasks} --group {args.group} "
        f"--rounds {args.rounds} --device {args.device}`: {len(prompts)} solver prompts "
        f"({args.tasks} distinct), greedy, float32, at most {NEW_TOKENS} new tokens "
        f"({tokens} generated per call), on {args.device} ({record['cpu']}, torch "
        f"{torch.__version__}); median of {args.rounds} interleaved rounds. \"before\" is "
        f"the loop at `{args.before}`. The compiled loop's first call, which compiles, "
        f"took {compile_seconds:.1f} s.", "",
        "| loop | seconds | tokens/s | x before | same tokens | max abs logprob gap |",
        "|---|---|---|---|---|---|"]
    lines += [f"| {r['loop']} | {r['seconds']:.2f} | {r['tokens_per_second']:.0f} | "
              f"{base / r['seconds']:.2f} | {'yes' if r['same_tokens'] else 'NO'} | "
              f"{r['max_logprob_gap']:.1e} |" for r in rows]
    Path(args.out + ".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    if not all(r["same_tokens"] for r in rows):
        sys.exit("a loop emitted other tokens than the loop before")


if __name__ == "__main__":
    main()
