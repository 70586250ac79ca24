"""Env step rate: events/s of SRPO-Math-v0 and SRPO-Search-v0 with scripted teams.

Measures what the environments themselves cost per event (prompt building, grading,
retrieval, Transition records), with no model in the loop, so it can be set against a
policy's generation rate. The search env uses the generated world (512 documents) and
bm25s; its oracle team searches supporting titles, so every search event runs a query.

    python benchmarks/speed/env_throughput.py [--episodes N]

Writes benchmarks/results/env_throughput.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time
from pathlib import Path

from srpo_bench.machine import cpu_model
from srpo_envs import math_v0, search_v0
from srpo_envs.scripted import OracleSearchTeam, ScriptedMathTeam

CASES = [
    ("SRPO-Math-v0", "single", 1), ("SRPO-Math-v0", "solve_verify", 1),
    ("SRPO-Math-v0", "parallel", 3), ("SRPO-Math-v0", "parallel", 8),
    ("SRPO-Search-v0", "single", 1), ("SRPO-Search-v0", "parallel", 3),
    ("SRPO-Search-v0", "search_answer_verify", 1),
]


def make(env_id: str, workflow: str, k: int, cache_dir: str):
    if env_id == "SRPO-Math-v0":
        env = math_v0.parallel_env(workflow=workflow, n_solvers=k, difficulty=(1, 2, 3, 4, 5),
                                   seed=0)
        return env, ScriptedMathTeam(skill=0.6, seed=0)
    env = search_v0.parallel_env(workflow=workflow, n_searchers=k, seed=0, cache_dir=cache_dir)
    return env, OracleSearchTeam()


def measure(env_id: str, workflow: str, k: int, episodes: int, cache_dir: str) -> dict:
    env, team = make(env_id, workflow, k, cache_dir)
    events = outputs = tool_calls = 0
    start = time.perf_counter()
    for _ in range(episodes):
        observations, _ = env.reset()
        while env.agents:
            observations, *_ = env.step(team.act(env, observations))
        events += len(env.transitions)
        outputs += sum(t.set_size for t in env.transitions)
        tool_calls += sum(t.info.get("tool_calls", 0) for t in env.transitions)
    seconds = time.perf_counter() - start
    return {"env": env_id, "workflow": workflow, "k": k, "episodes": episodes,
            "events": events, "events_per_s": events / seconds,
            "outputs_per_s": outputs / seconds, "queries_per_s": tool_calls / seconds}




def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--episodes", type=int, default=1000)
    parser.add_argument("--out", default=str(Path(__file__).resolve().parents[1] / "results" /
                                             "env_throughput.md"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as cache_dir:
        rows = [measure(e, w, k, args.episodes, cache_dir) for e, w, k in CASES]
    lines = [
        "# Env step rate with scripted teams (no model)", "",
        f"Command: `python benchmarks/speed/env_throughput.py --episodes {args.episodes}`  ",
        f"Machine: {cpu_model()}, {os.cpu_count()} cores, python "
        f"{platform.python_version()}, one process", "",
        "| env | workflow | K | episodes | events | events/s | consumed outputs/s | "
        "queries/s |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    lines += [f"| {r['env']} | {r['workflow']} | {r['k']} | {r['episodes']} | {r['events']} | "
              f"{r['events_per_s']:,.0f} | {r['outputs_per_s']:,.0f} | "
              f"{r['queries_per_s']:,.0f} |" for r in rows]
    text = "\n".join(lines) + "\n"
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text, encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
