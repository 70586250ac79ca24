"""The tiny policy's search track: build its warm start once, then measure it.

    python benchmarks/learning/search_track.py [--workflows search_answer_verify routed]
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

from srpo_agents.models.registry import prepare_policy
from srpo_agents.rollout.engine import RolloutEngine
from srpo_agents.running.search_recipe import READERS, RECIPE, WARM_ROOT, warm_folder
from srpo_bench.machine import describe, write_results
from srpo_bench.search_track import measure, stored_results, track_config, track_lines


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
    command = (f"python benchmarks/learning/search_track.py --workflows {' '.join(args.workflows)} "
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


if __name__ == "__main__":
    main()
