"""How fast does the tiny policy learn to copy a name into a query? The skill the search
track hinges on, measured alone.

    python benchmarks/labs/search_copy.py [--steps 300] [--seeds 0 1] [--tasks 200]
        [--out runs/search-copy]

Per seed: a warm start of the tiny policy (``srpo_agents.tiny.warmstart``; batch 64, lr 3e-3,
20-step warm-up, cosine decay) on the searcher's examples alone, from the compact
world's oracle trajectories (SRPO-Search-v0 ``search_answer_verify``, one-hop questions,
no slipped queries). That is the first phase of the search track's curriculum
(``warmstart_first_roles``). Then one sampled query (temperature 1) for each of the first
``--tasks`` held-out questions, from the env's own first-round searcher prompt; a query
counts when it is exactly ``<search>NAME</search>`` with the question's name. Seeds run one after the
other (each on the threads torch is given); a warm start whose settings match is read
back from ``OUT/seedS/warmstart``. Writes ``benchmarks/results/search_copy.md``/``.json``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from srpo_agents.rollout.engine import RolloutEngine
from srpo_agents.rollout.envs import env_factory
from srpo_agents.tiny.warmstart import warm_start
from srpo_bench.machine import describe, write_results
from srpo_bench.search_track import track_config


def copy_rate(steps: int, seed: int, tasks: int, out: Path, vocab: int = 0) -> dict:
    config = track_config("search_answer_verify", str(out), steps, 60.0, seed)
    make_test = env_factory(config, "test")
    policy, meta = warm_start(out, env_factory(config, "train"),
                              env_factory(config, "validation"), minutes=60.0,
                              target=1.0, seed=seed, max_new_tokens=32, steps=steps,
                              episodes=6000, eval_tasks=4, skill=1.0, warmup=20, decay=True,
                              first_roles=("searcher",), first_steps=steps,
                              env_name=config.env, vocab_size=vocab)
    env = make_test(0)
    prompts, names = [], []
    for index in range(tasks):
        observations, _ = env.reset(options={"task_index": index})
        prompts.append(policy.prompt_ids("searcher", observations["searcher_0"]))
        names.append(env.current_task.meta["path"][0])
    outputs = RolloutEngine(policy, max_new_tokens=32, seed=0).generate(prompts)
    texts = [policy.decode(o[0]) for o in outputs]
    exact = sum(t == f"<search>{n}</search>" for t, n in zip(texts, names, strict=True))
    return {"seed": seed, "vocab": len(policy.tokenizer), "steps": meta["steps"],
            "seconds": meta["seconds"],
            "prompt_tokens": sum(map(len, prompts)) / len(prompts),
            "copied": exact / tasks, "tasks": tasks, "examples": texts[:3],
            "prompt": env.task(0).question}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--tasks", type=int, default=200)
    parser.add_argument("--out", default="runs/search-copy")
    parser.add_argument("--vocab", type=int, default=0,
                        help="tokenizer size (0: one token per byte; see tiny_vocab)")
    parser.add_argument("--name", default="search_copy", help="results/NAME.md")
    args = parser.parse_args()
    rows = []
    for seed in args.seeds:
        rows.append(copy_rate(args.steps, seed, args.tasks, Path(args.out) / f"seed{seed}",
                              args.vocab))
        print(json.dumps(rows[-1]), flush=True)
    command = (f"python benchmarks/labs/search_copy.py --steps {args.steps} --seeds "
               f"{' '.join(map(str, args.seeds))} --tasks {args.tasks} --out {args.out}"
               + (f" --vocab {args.vocab} --name {args.name}" if args.vocab else ""))
    lines = ["# Copying a name into a query: the tiny searcher alone", "",
             f"Command: `{command}`", "", f"Machine: {describe()}.", "",
             "Warm start on the searcher's oracle examples alone (compact world, one-hop, "
             "batch 64, lr 3e-3, warm-up and cosine decay), then one sampled query per "
             f"held-out question; copied = exactly `<search>NAME</search>`. Questions look "
             f"like {rows[0]['prompt']!r}.", "",
             "| seed | vocabulary | prompt tokens | steps | copied | warm start time | "
             "first queries |", "|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        lines.append(f"| {r['seed']} | {r['vocab']} | {r['prompt_tokens']:.0f} | "
                     f"{r['steps']} | {r['copied']:.3f} | {r['seconds']:.0f} s "
                     f"| {', '.join(f'`{t}`' for t in r['examples'])} |")
    lines += ["", f"Held-out: the first {args.tasks} one-hop test questions."]
    write_results(args.name, lines, rows)


if __name__ == "__main__":
    main()
