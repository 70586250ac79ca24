"""The tiny policy's search track as a library: its run settings (``track_config``), the
measurement of a policy on held-out questions (``measure``) and the results table of
``benchmarks/learning/search_track.py`` (the command that builds the track's warm starts and
measures them; its docstring describes the recipe).
"""

from __future__ import annotations

import argparse
import json
from collections import Counter

import numpy as np

from srpo_agents.config import TrainConfig
from srpo_agents.rollout.engine import RolloutEngine
from srpo_agents.rollout.envs import env_factory, env_pool
from srpo_agents.running.evaluate import run_tasks
from srpo_agents.running.search_recipe import INIT_FROM, track_settings
from srpo_agents.tiny.config import tiny_run
from srpo_bench.machine import RESULTS
from srpo_envs.envs.search_env import well_formed


def track_config(workflow: str, out: str, warmstart_steps: int, minutes: float, seed: int = 0,
                 first_steps: int = 0, top_k: int = 2, focus_steps: int = 0,
                 focus_target: float = 1.0, first_target: float = 1.0,
                 **overrides) -> TrainConfig:
    """The tiny search track: compact world, one-hop questions, 2 rounds; the warm start's
    first ``first_steps`` steps train the searchers alone (the copy curriculum), and
    ``focus_steps`` more train the workflow's readers (``READERS``) after the rest."""
    return TrainConfig(**tiny_run(track_settings(workflow, warmstart_steps, minutes,
                                                 first_steps, top_k, focus_steps,
                                                 focus_target, first_target),
                                  env="SRPO-Search-v0", workflow=workflow, seed=seed, out=out,
                                  **overrides))


def measure(engine: RolloutEngine, config: TrainConfig, tasks: int, k: int) -> dict:
    envs = env_pool(env_factory(config, "test"), 128, config.seed)
    tasks = min(tasks, envs[0].num_tasks)
    turns, good = Counter(), Counter()
    queries = query_hits = 0
    correct = np.zeros((tasks, k))
    found = np.zeros((tasks, k))
    for t, j, env, rollout in run_tasks(engine, envs, range(tasks), k, tag="track"):
        gold = set(env.task(t).supporting_ids)
        first_search = True
        for transition in rollout.transitions:
            for output in transition.consumed:
                turns[output.role] += 1
                good[output.role] += well_formed(output.role, output.text, config.n_agents)
            retrieved = transition.info.get("retrieved_ids")
            if retrieved is not None and first_search:
                first_search = False
                hits = [bool(gold & set(ids)) for ids in retrieved.values()]
                queries += len(hits)
                query_hits += sum(hits)
                found[t, j] = any(hits)
        correct[t, j] = bool(rollout.correct)
    per_task = correct.mean(axis=1)
    return {
        "tasks": tasks, "k": k,
        "well_formed": sum(good.values()) / max(1, sum(turns.values())),
        "well_formed_by_role": {r: good[r] / turns[r] for r in sorted(turns)},
        "turns_by_role": dict(sorted(turns.items())),
        "first_round_queries": queries,
        "query_gold_in_top_k": query_hits / max(1, queries),
        "question_gold_in_top_k": float(found.mean()),
        "avg_at_k": float(per_task.mean()),
        "avg_at_k_stderr": float(per_task.std(ddof=1) / np.sqrt(tasks)) if tasks > 1 else 0.0,
        "pass_at_k": float(correct.max(axis=1).mean()),
    }


def stored_results() -> dict:
    """The committed measurements of every workflow (a run of one workflow keeps the
    others' rows, each with its own command and machine)."""
    path = RESULTS / "search_track_run.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def track_lines(args: argparse.Namespace, results: dict) -> list[str]:
    lines = ["# The tiny policy's search track", "",
             "SRPO-Search-v0, compact world, one-hop test-split questions, 2 searchers "
             f"(parallel, routed), 2 rounds, top {args.top_k} passages per query. Warm start "
             f"(batch 64, lr 3e-3) on the env's oracle trajectories: the searchers' examples "
             f"alone at a constant lr until they copy the name exactly on "
             f"{args.first_target:g} of validation prompts (at most {args.first_steps} steps), "
             f"then {args.steps} steps of every role's (warm-up and cosine decay), then up "
             f"to {args.focus_steps} on the readers' (a fresh warm-up and cosine; every 4th "
             f"batch of every role's) until validation avg@2 reaches {args.focus_target:g}. "
             + "".join(f"{w}'s build begins from {INIT_FROM[w]}'s finished warm start "
                       f"(its steps are counted apart). " for w in results if w in INIT_FROM),
             "",
             "| workflow | warm start | well-formed turns | by role | first-round queries "
             "with gold in top k | questions with gold in top k | avg@k | pass@k |",
             "|---|---|---:|---|---:|---:|---:|---:|"]
    for workflow, r in results.items():
        w = r["warm_start"]
        built = "cached" if w.get("cached") else "built"
        roles = ", ".join(f"{role} {v:.3f}" for role, v in r["well_formed_by_role"].items())
        lines.append(
            f"| {workflow} | {w['steps']} steps, {w['seconds']:.0f} s ({built}) "
            f"| {r['well_formed']:.3f} "
            f"| {roles} | {r['query_gold_in_top_k']:.3f} | {r['question_gold_in_top_k']:.3f} "
            f"| {r['avg_at_k']:.3f} ± {r['avg_at_k_stderr']:.3f} | {r['pass_at_k']:.3f} |")
    lines += ["", "Held-out: " + "; ".join(f"{w}: {r['tasks']} questions x k={r['k']}"
                                           for w, r in results.items())
              + "; ± is the standard error over questions.", ""]
    lines += [f"- {w}: `{r['command']}` on {r['machine']}" for w, r in results.items()]
    return lines
