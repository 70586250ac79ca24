"""The demo's held-out evaluation in one process and shared with helper processes
(``--eval-processes``, issue 61).

    python benchmarks/speed/eval_processes.py [--rounds 2] [--helpers 1] [--tasks 500]
        [--real]   # make demo-real's team (SmolLM2-135M-Instruct), eval_processes_real.md

The demo's "before" evaluation (``--tasks`` test questions x k = 4, the committed start,
seed 0) with torch's default threads in this process alone, then with ``--helpers``
helper processes of one thread each (this process on the remaining threads), alternating
round by round. The helpers start once, as in a run (their start, a spawn that imports
torch and copies the policy, is timed apart). avg@4 is shown beside the seconds: the
two differ only by which random numbers each episode drew.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch

from srpo_agents.models.registry import prepare_policy
from srpo_agents.rollout.engine import engine_for
from srpo_agents.running.demo import COMMITTED_START, demo_config
from srpo_agents.running.eval_process import EvalProcesses
from srpo_agents.running.evaluate import evaluate, held_out
from srpo_bench.machine import describe, write_results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--helpers", type=int, default=1)
    parser.add_argument("--tasks", type=int, default=500)
    parser.add_argument("--note", default="", help="a sentence on how the run shared the CPU")
    parser.add_argument("--real", action="store_true",
                        help="make demo-real's team instead of the demo's")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as out:
        if args.real:
            from srpo_agents.running.real_demo import demo_config as real_config

            config = real_config(0, out, eval_tasks=args.tasks, dtype="float32")
        else:
            config = demo_config(out, 0, model=str(COMMITTED_START / "warmstart"),
                                 eval_tasks=args.tasks)
        policy = prepare_policy(config, Path(out), lambda *_: None)[0]
    engine = engine_for(config, policy)
    envs, indices = held_out(config, policy.count_tokens)
    tick = time.monotonic()
    helpers = EvalProcesses(config, policy, {}, args.helpers)
    # the first share waits for the helpers to be ready: a warm-up of one task each
    evaluate(engine, envs, indices[:args.helpers + 1], 1, helpers=helpers)
    started = time.monotonic() - tick
    cases = {"this process alone": None, f"with {args.helpers} helper process(es)": helpers}
    seconds: dict[str, list[float]] = {name: [] for name in cases}
    scores: dict[str, list[float]] = {name: [] for name in cases}
    threads = torch.get_num_threads()
    for _ in range(args.rounds):
        for name, shared in cases.items():
            tick = time.monotonic()
            result = evaluate(engine, envs, indices, config.eval_k, tag="before", votes=True,
                              helpers=shared)
            seconds[name].append(time.monotonic() - tick)
            scores[name].append(result["avg_at_k"])
    helpers.shutdown()
    base = statistics.median(seconds["this process alone"])
    rows = [{"case": name, "seconds": seconds[name], "median_s": statistics.median(seconds[name]),
             "speedup": base / statistics.median(seconds[name]), "avg_at_k": scores[name]}
            for name in cases]
    episodes = len(indices) * config.eval_k
    start = "untrained SmolLM2-135M-Instruct" if args.real else "committed start"
    whose = "make demo-real's" if args.real else "The demo's"
    lines = [f"# {whose} held-out evaluation, alone and with helper processes", "",
             f"Command: `python benchmarks/speed/eval_processes.py --rounds {args.rounds} "
             f"--helpers {args.helpers} --tasks {args.tasks}{' --real' * args.real}`", "",
             f"Machine: {describe()}; torch threads {threads}. {args.note}".rstrip(), "",
             f"{whose} \"before\" evaluation: {len(indices)} test questions x "
             f"{config.eval_k} = {episodes} episodes of the {start}, alternating "
             f"round by round. The helpers' start (spawn, imports, the policy's copy and "
             f"a one-task warm-up): {started:.1f} s, once a run.", "",
             f"| evaluation | seconds by round | median | speed-up | avg@{config.eval_k} by round |",
             "|---|---|---:|---:|---|"]
    for r in rows:
        lines.append(f"| {r['case']} | " + " / ".join(f"{s:.1f}" for s in r["seconds"])
                     + f" | {r['median_s']:.1f} | {r['speedup']:.2f}x | "
                     + " / ".join(f"{a:.3f}" for a in r["avg_at_k"]) + " |")
    write_results("eval_processes_real" if args.real else "eval_processes", lines,
                  {"rows": rows, "helper_start_s": started, "threads": threads,
                   "episodes": episodes})


if __name__ == "__main__":
    main()
