"""Soak: many scripted episodes across every built-in env and workflow, watching resident
memory. A leak in the event loop, the graders, the retriever or the transition records
would show as growth after the warm-up.

    python benchmarks/scale/soak.py --episodes 10000 --out benchmarks/results/soak.json

One env per (env, workflow) plays its scripted team (``EnvSpec.reference_team``)
round-robin, each episode on a fresh task; the search env uses the compact generated
world and BM25. After a warm-up (every env plays ``--warmup`` episodes, so caches,
the grader's worker and allocator pools have settled) the resident set size (VmRSS) is
read every ``--every`` episodes after a ``gc.collect()``. The figure is the growth from
the first reading after the warm-up to the last (the issue's bound: under 50 MB).
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import resource
import sys
import time
from pathlib import Path

from srpo_envs import registry

ENVS = ("SRPO-Math-v0", "SRPO-Search-v0", "SRPO-Countdown-v0")


def rss_mb() -> float:
    """Resident set size now (Linux /proc), else the peak from getrusage."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1024 * 1024 if sys.platform == "darwin" else 1024)


def build(cache_dir: str) -> list[tuple[str, str, object, object]]:
    players = []
    for name in ENVS:
        spec = registry.get(name)
        for workflow in spec.workflows:
            kwargs = {"workflow": workflow, "seed": 0}
            if name == "SRPO-Search-v0":
                kwargs.update(world="compact", cache_dir=cache_dir)
            players.append((name, workflow, spec.make(**kwargs), spec.team(skill=0.7, seed=0)))
    return players


def play(env, team, task_index: int) -> float:
    observations, _ = env.reset(options={"task_index": task_index})
    while env.agents:
        observations, *_ = env.step(team.act(env, observations))
    return env.last_transition.reward


def soak(episodes: int, warmup: int, every: int, cache_dir: str, log=print) -> dict:
    players = build(cache_dir)
    start = time.monotonic()
    for i in range(warmup):
        for _, _, env, team in players:
            play(env, team, 1_000_000 + i)
    gc.collect()
    readings = [(0, rss_mb())]
    rewards = {f"{name} {workflow}": [] for name, workflow, _, _ in players}
    for episode in range(1, episodes + 1):
        name, workflow, env, team = players[episode % len(players)]
        rewards[f"{name} {workflow}"].append(play(env, team, episode))
        if episode % every == 0:
            gc.collect()
            readings.append((episode, rss_mb()))
            log(f"{episode} episodes: RSS {readings[-1][1]:.1f} MB")
    seconds = time.monotonic() - start
    values = [mb for _, mb in readings]
    return {"episodes": episodes, "warmup_per_env": warmup, "envs": len(players),
            "rss_after_warmup_mb": values[0], "rss_last_mb": values[-1],
            "rss_max_mb": max(values), "growth_mb": values[-1] - values[0],
            "max_growth_mb": max(values) - values[0], "readings": readings,
            "mean_reward": {k: sum(v) / len(v) for k, v in rewards.items() if v},
            "seconds": seconds, "python": platform.python_version(),
            "machine": platform.processor() or platform.machine()}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=10_000, help="episodes after warm-up")
    parser.add_argument("--warmup", type=int, default=30, help="warm-up episodes per env")
    parser.add_argument("--every", type=int, default=500, help="read RSS every N episodes")
    parser.add_argument("--cache-dir", default="runs/soak-cache", help="search index cache")
    parser.add_argument("--out", default="", help="write the result as JSON here")
    args = parser.parse_args(argv)
    result = soak(args.episodes, args.warmup, args.every, args.cache_dir)
    print(f"{result['episodes']} episodes over {result['envs']} env/workflows in "
          f"{result['seconds']:.0f} s: RSS {result['rss_after_warmup_mb']:.1f} -> "
          f"{result['rss_last_mb']:.1f} MB (growth {result['growth_mb']:+.1f} MB, max "
          f"{result['max_growth_mb']:+.1f})")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
