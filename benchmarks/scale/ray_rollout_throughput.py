"""Rollout events/s with 1 and 2 Ray workers against the in-process engine, measured in
one run on the same episodes (Countdown parallel, a tiny policy).

    python benchmarks/scale/ray_rollout_throughput.py  # results/ray_rollout_throughput.{md,json}

Each engine plays ``--tasks`` x ``--group`` episodes once to warm up, then ``--repeats``
times timed; the figure is the median. In-process uses 2 torch threads (the machine's
cores); each worker 1. Workers are local Ray actors (0.5 CPU each).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

import torch  # noqa: E402

from srpo_agents.config import TrainConfig  # noqa: E402
from srpo_agents.rollout.engine import RolloutEngine  # noqa: E402
from srpo_agents.rollout.envs import env_factory  # noqa: E402
from srpo_agents.tiny import build_tiny_policy  # noqa: E402
from srpo_bench.machine import cpu_model  # noqa: E402


def timed(engine, envs, options, repeats: int) -> tuple[float, int]:
    engine.run(envs, options)  # warm-up
    times, events = [], 0
    for _ in range(repeats):
        start = time.perf_counter()
        rollouts = engine.run(envs, options)
        times.append(time.perf_counter() - start)
        events = sum(len(r.transitions) for r in rollouts)
    return statistics.median(times), events


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=32)
    parser.add_argument("--group", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default="benchmarks/results/ray_rollout_throughput")
    args = parser.parse_args()
    import ray

    from srpo_agents.rollout.ray_engine import RayRolloutEngine

    config = TrainConfig(env="SRPO-Countdown-v0", workflow="parallel", n_agents=3,
                         max_new_tokens=16, tasks_per_step=args.tasks, group_size=args.group)
    make = env_factory(config, "train")
    envs = [make(i) for i in range(args.tasks * args.group)]
    texts = [envs[0].reset(options={"task_index": i})[0]["proposer_0"] for i in range(50)]
    policy = build_tiny_policy(texts + ["0123456789+-*/() Final: P"],
                               Path(tempfile.mkdtemp()) / "tiny")
    options = [{"task_index": t, "episode_id": f"t{t}-g{g}"}
               for t in range(args.tasks) for g in range(args.group)]
    torch.set_num_threads(2)
    result = {}
    seconds, events = timed(RolloutEngine(policy, max_new_tokens=16), envs, options,
                            args.repeats)
    result["in_process"] = {"seconds": seconds, "events": events}
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             configure_logging=False, _temp_dir=tempfile.mkdtemp(prefix="srpo-ray-",
                                                                  dir="/tmp"))
    for workers in (1, 2):
        engine = RayRolloutEngine(config, policy, workers)
        seconds, events = timed(engine, None, options, args.repeats)
        result[f"{workers}_workers"] = {"seconds": seconds, "events": events}
        engine.shutdown()
    ray.shutdown()
    base = result["in_process"]["events"] / result["in_process"]["seconds"]
    lines = ["# Rollout events/s: Ray workers against in-process", "",
             "Command: `python benchmarks/scale/ray_rollout_throughput.py`", "",
             f"{args.tasks} tasks x {args.group} episodes of Countdown parallel (3 proposers "
             f"+ aggregator: 2 events each), a tiny policy (untrained), max_new_tokens 16, "
             f"median of {args.repeats} after a warm-up. Machine: {cpu_model()}, "
             f"{os.cpu_count()} cores, python {platform.python_version()}.", "",
             "| engine | seconds | events/s | against in-process |", "|---|---:|---:|---:|"]
    for name, label in (("in_process", "in-process (2 threads)"),
                        ("1_workers", "1 Ray worker (1 thread)"),
                        ("2_workers", "2 Ray workers (1 thread each)")):
        r = result[name]
        rate = r["events"] / r["seconds"]
        lines.append(f"| {label} | {r['seconds']:.2f} | {rate:,.0f} | {rate / base:.2f} |")
    Path(args.out).with_suffix(".json").write_text(json.dumps(result, indent=2))
    Path(args.out).with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
