"""The tiny policy's search track: build its warm start once, then measure it.

    python benchmarks/search_track.py [--workflows search_answer_verify routed]
        [--tasks 500] [--k 4] [--out benchmarks/warmstarts]

The defaults are the track's recipe (``RECIPE``), supervised steps on the env's oracle
trajectories (``srpo_agents.tiny.warmstart``) in three phases, each of the two copy skills
waited for rather than given a fixed number of steps, since each appears suddenly at a
step that moves with the seed and the float kernels (``results/search_track.md``):

1. the searchers' examples alone at a constant lr, until the searcher copies the
   question's name exactly on 30% of validation prompts (at most 1500 steps);
2. 400 steps of every role's, with a warm-up and cosine decay (they sharpen the copy);
3. the readers' (``READERS``), every 4th batch every role's, with a fresh warm-up and
   cosine over 1000 steps, until validation avg@2 reaches 0.3.

SRPO-Search-v0's compact world, one-hop questions, two rounds, the top passage per
query. At most 60 minutes per workflow, once: the build writes a checkpoint every 100
steps (a killed build resumes), and the result is cached in
``OUT/SRPO-Search-v0-WORKFLOW/warmstart`` under a key of everything that shapes it. The
default OUT, ``benchmarks/warmstarts``, is committed (about 4 MB per workflow) and is the
folder the harness's search presets read (``warm_root``), so every later run, seed,
session and fresh clone starts in seconds; a change of anything in the key rebuilds it
there. ``routed``'s warm start also serves ``parallel`` (its searchers and aggregator).

On held-out (test-split) questions it measures:

- **well-formed tags**: the share of turns whose text is a well-formed action of its
  role (``srpo_envs.envs.search_env.well_formed``), overall and per role;
- **retrieval**: the share of first-round queries whose top k holds the question's gold
  document, and the share of questions where at least one first-round query did;
- **accuracy**: held-out avg@k and pass@k (exact match after SQuAD normalization).

Writes ``benchmarks/results/search_track_run.md`` and ``.json`` (the findings over many
runs are kept by hand in ``search_track.md``, which this script leaves alone).
"""

from __future__ import annotations

import argparse
import json
from collections import Counter

import numpy as np
from machine import RESULTS, describe, write_results

from srpo_agents.config import TrainConfig
from srpo_agents.envs import env_factory
from srpo_agents.evaluate import eval_pool, run_tasks
from srpo_agents.rollout import RolloutEngine
from srpo_agents.search_recipe import (  # noqa: F401 (re-exported)
    INIT_FROM,
    READERS,
    RECIPE,
    WARM_ROOT,
    track_settings,
    warm_folder,
)
from srpo_agents.tiny.config import tiny_run
from srpo_agents.train import prepare_policy
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
    envs = eval_pool(env_factory(config, "test"), 128, config.seed)
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workflows", nargs="+", default=["search_answer_verify", "routed"],
                        choices=sorted(READERS))
    parser.add_argument("--steps", type=int, default=RECIPE["warmstart_steps"])
    parser.add_argument("--minutes", type=float, default=RECIPE["warmstart_minutes"])
    parser.add_argument("--first-steps", type=int, default=RECIPE["warmstart_first_steps"],
                        help="warm-start steps on the searchers' examples alone, first")
    parser.add_argument("--first-target", type=float,
                        default=RECIPE["warmstart_first_target"],
                        help="end the searchers' phase once their exact-response rate on "
                             "validation examples reaches this (1: the first steps of --steps)")
    parser.add_argument("--focus-steps", type=int, default=RECIPE["warmstart_focus_steps"],
                        help="warm-start steps on the readers' examples after the rest")
    parser.add_argument("--focus-target", type=float,
                        default=RECIPE["warmstart_focus_target"],
                        help="stop the focus phase once validation avg@2 reaches this "
                             "(checked every 100 steps; 1: run all its steps)")
    parser.add_argument("--top-k", type=int, default=RECIPE["top_k"], help="passages per query")
    parser.add_argument("--tasks", type=int, default=500)
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=WARM_ROOT,
                        help="folder of the warm starts (default: the committed ones)")
    args = parser.parse_args()
    results = {}
    for workflow in args.workflows:
        run_dir = warm_folder(args.out, workflow)
        config = track_config(workflow, str(run_dir), args.steps, args.minutes, args.seed,
                              first_steps=args.first_steps, top_k=args.top_k,
                              focus_steps=args.focus_steps, focus_target=args.focus_target,
                              first_target=args.first_target,
                              warmstart_dir=str(run_dir))
        policy, meta = prepare_policy(config, run_dir, print)
        engine = RolloutEngine(policy, max_new_tokens=config.max_new_tokens, seed=args.seed)
        results[workflow] = {"warm_start": {k: v for k, v in meta.items() if k != "settings"},
                             **measure(engine, config, args.tasks, args.k)}
        print(workflow, json.dumps(results[workflow]), flush=True)
    command = (f"python benchmarks/search_track.py --workflows {' '.join(args.workflows)} "
               f"--first-steps {args.first_steps} --first-target {args.first_target:g} "
               f"--steps {args.steps} "
               f"--focus-steps {args.focus_steps} --focus-target {args.focus_target:g} "
               f"--top-k {args.top_k} "
               f"--minutes {args.minutes:g} --tasks {args.tasks} "
               f"--k {args.k} --seed {args.seed} --out {args.out}")
    for r in results.values():
        r.update(command=command, machine=describe())
    everything = {**stored_results(), **results}
    write_results("search_track_run", track_lines(args, everything), everything)


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


if __name__ == "__main__":
    main()
