"""A real-model held-out evaluation under vLLM on the CPU, by engine setting (issue 61): the
KV-cache size (how many episodes decode at once) and vLLM's compiled model against eager.

    .venv-vllm/bin/python benchmarks/speed/vllm_eval_levers.py [--forms "kv 0.5" "kv 2"]
        [--tasks 100] [--rounds 2] [--results vllm_eval_levers]

Each form evaluates ``make demo-real``'s starting policy (``real_demo.demo_config``: the
team, bf16, vLLM) on the same ``--tasks`` test tasks x k = 2 with the same seed, in a
process of its own (a vLLM engine's settings are fixed when it starts), the forms
alternating round by round. Per form: the engine's start-up seconds, the evaluation's
seconds per 100 episodes, its generated tokens per second and its accuracy (the same
policy and seed: a form that changes the accuracy beyond noise changes what is sampled,
not only how fast). Why: a 0.5 GiB KV cache holds 23k of SmolLM2's tokens, about 80
episodes' worth of a solve-verify team, while an evaluation offers 256 at a time.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from srpo_bench.machine import describe, write_results

FORMS = {"kv 0.5": (0.5, True), "kv 2": (2.0, True), "kv 4": (4.0, True),
         "kv 0.5 compiled": (0.5, False), "kv 2 compiled": (2.0, False)}
"""name: (KV-cache GiB, eager). "compiled": ``--vllm-compile``, vLLM's ``torch.compile`` of
the model, where srpo's CPU engines run eager by default (``vllm_generator._device_kwargs``)."""


def measure_one(name: str, tasks: int) -> dict:
    """One form's evaluation in this process."""
    from srpo_agents.models.registry import prepare_policy
    from srpo_agents.rollout import vllm_generator
    from srpo_agents.rollout.engine import engine_for
    from srpo_agents.running.evaluate import evaluate, held_out
    from srpo_agents.running.real_demo import demo_config
    from srpo_agents.running.real_recipe import ISSUE_50_TASKS

    gib, eager = FORMS[name]
    os.environ.pop("VLLM_CPU_KVCACHE_SPACE", None)
    vllm_generator.CPU_KV_CACHE_GIB = gib
    with tempfile.TemporaryDirectory() as out:
        config = demo_config(0, out, eval_tasks=tasks, eval_k=2, vllm_compile=not eager,
                             **ISSUE_50_TASKS)
        start = time.perf_counter()
        engine = engine_for(config, prepare_policy(config, Path(out), lambda *_: None)[0])
        started = time.perf_counter() - start
        envs, indices = held_out(config, engine.policy.count_tokens)
        start = time.perf_counter()
        result = evaluate(engine, envs, indices, config.eval_k, tag="before")
        seconds = time.perf_counter() - start
    episodes = len(indices) * config.eval_k
    tokens = result["tokens_per_task"] * episodes
    return {"form": name, "kv_cache_gib": gib, "eager": eager, "startup_seconds": started,
            "seconds_per_100_episodes": seconds / episodes * 100,
            "tokens_per_s": tokens / seconds, "accuracy": result["avg_at_k"],
            "episodes": episodes}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--forms", nargs="+", default=["kv 0.5", "kv 2"], choices=list(FORMS))
    parser.add_argument("--tasks", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--results", default="vllm_eval_levers")
    parser.add_argument("--note", default="", help="a sentence on how the run shared the CPU")
    parser.add_argument("--one", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure_one(args.one, args.tasks)))
        return
    runs: dict[str, list[dict]] = {name: [] for name in args.forms}
    for round_ in range(args.rounds):
        for name in args.forms:
            done = subprocess.run([sys.executable, __file__, "--one", name, "--tasks",
                                   str(args.tasks)], text=True, capture_output=True)
            if done.returncode:
                raise SystemExit(f"{name}: exit {done.returncode}: {done.stderr[-2000:]}")
            runs[name].append(json.loads(done.stdout.strip().splitlines()[-1]))
            print(round_, runs[name][-1], flush=True)
    write_results(args.results, table(runs, args), runs)


def table(runs: dict[str, list[dict]], args) -> list[str]:
    def median(name, key):
        return statistics.median(r[key] for r in runs[name])

    first = median(args.forms[0], "seconds_per_100_episodes")
    forms = " ".join(f'"{name}"' for name in args.forms)
    lines = ["# A real-model evaluation under vLLM on the CPU, by engine setting", "",
             f"Command: `.venv-vllm/bin/python benchmarks/speed/vllm_eval_levers.py --forms "
             f"{forms} --tasks {args.tasks} --rounds {args.rounds}`", "",
             f"Machine: {describe()}. {args.note}".rstrip(), "",
             f"`make demo-real`'s starting policy (SmolLM2-135M-Instruct, solve-verify team, "
             f"bf16) on the same {args.tasks} test tasks x k = 2, one process per form and "
             "round, the forms alternating; medians over the rounds.", "",
             "| form | KV cache GiB | eager | start-up s | s / 100 episodes | tokens/s "
             "| avg@k | speed-up over the first form |",
             "|---|---:|---|---:|---:|---:|---:|---:|"]
    for name in args.forms:
        per_100 = median(name, "seconds_per_100_episodes")
        lines.append(f"| {name} | {FORMS[name][0]:g} | {FORMS[name][1]} | "
                     f"{median(name, 'startup_seconds'):.1f} | {per_100:.1f} | "
                     f"{median(name, 'tokens_per_s'):.0f} | {median(name, 'accuracy'):.3f} | "
                     f"{first / per_100:.2f}x |")
    return lines


if __name__ == "__main__":
    main()
