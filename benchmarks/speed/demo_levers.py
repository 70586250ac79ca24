"""What each update lever saves on the demo's own batch (issue 61).

    python benchmarks/speed/demo_levers.py [--rounds 3] [--threads 1 2]

One step's episodes of ``make demo`` (16 questions x G = 8 from the committed start,
seed 0), then the demo's update on them under each lever (``LEVERS``), every one from
the same weights, AdamW state and mini-batch generator, the levers alternating round by
round; and, per thread count, the seconds to play such a step's episodes. The gradient
norm is shown beside the seconds: a lever that only moves work around leaves it the
same.
"""

from __future__ import annotations

import argparse
import copy
import shutil
import statistics
import tempfile
import time

import torch

from srpo_agents.learning.events import build_units
from srpo_agents.running.demo import COMMITTED_START, demo_config
from srpo_agents.running.training_run import TrainingRun
from srpo_bench.machine import describe, write_results

PLAY = "playing the batch (generation and env)"

# every lever sets all three settings: the demo's own config has taken some of them
SHUFFLED = {"minibatch_by": "episode", "microbatch_rows": 32, "skip_zero_advantage": False}
LEVERS = {"shuffled episodes, micro-batches of 32 rows (the demo before issue 61)": SHUFFLED,
          "micro-batches of 16 rows": {**SHUFFLED, "microbatch_rows": 16},
          "mini-batches by task": {**SHUFFLED, "minibatch_by": "task"},
          "by task, micro-batches of 16 rows": {**SHUFFLED, "minibatch_by": "task",
                                                "microbatch_rows": 16},
          # units of all-right or all-wrong groups carry advantage 0 and no gradient
          # (beta 0): the same update without their passes
          "by task, 16 rows, skipping zero advantages": {
              "minibatch_by": "task", "microbatch_rows": 16, "skip_zero_advantage": True}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, nargs="+", default=[1])
    parser.add_argument("--note", default="", help="a sentence on how the run shared the CPU")
    args = parser.parse_args()
    torch.set_num_threads(args.threads[0])
    with tempfile.TemporaryDirectory() as out:
        config = demo_config(out, 0, model=str(COMMITTED_START / "warmstart"), steps=1,
                             eval_tasks=4, eval_k=1)
        run = TrainingRun.open(config, lambda *_: None, before={"skipped": True})
        options = run._options(0)
        rollouts = run.rollout.run(run.train_envs[:len(options)], options)
        shutil.rmtree(out, ignore_errors=True)
    units, _ = build_units(rollouts, run.algorithm.unit)
    learner = next(iter(run.learners.values()))
    advantages = run.estimator([u.info for u in units], learner.config.adv_eps)
    model = learner.policy.model
    start = (copy.deepcopy(model.state_dict()), copy.deepcopy(learner.optimizer.state_dict()),
             copy.deepcopy(learner.rng), copy.deepcopy(learner.config))
    cases = [(t, name) for t in args.threads for name in [PLAY, *LEVERS]]
    times = {case: [] for case in cases}
    figures = {}
    for _ in range(args.rounds):
        for threads, name in cases:
            torch.set_num_threads(threads)
            if name == PLAY:
                tick = time.monotonic()
                run.rollout.run(run.train_envs[:len(options)], options)
                times[(threads, name)].append(time.monotonic() - tick)
                continue
            model.load_state_dict(start[0])
            learner.optimizer.load_state_dict(start[1])
            learner.rng = copy.deepcopy(start[2])
            learner.config = copy.deepcopy(start[3])
            for key, value in LEVERS[name].items():
                setattr(learner.config, key, value)
            tick = time.monotonic()
            out = learner.update(units, advantages)
            times[(threads, name)].append(time.monotonic() - tick)
            figures[(threads, name)] = (out["updates"], out["grad_norm"])
    rows = []
    for threads, name in cases:
        base = statistics.median(times[(args.threads[0], name if name == PLAY else
                                        next(iter(LEVERS)))])
        median = statistics.median(times[(threads, name)])
        steps, norm = figures.get((threads, name), (None, None))
        rows.append({"threads": threads, "lever": name, "seconds": times[(threads, name)],
                     "median_s": median, "speedup": base / median, "updates": steps,
                     "grad_norm": norm})
    lines = ["# The demo's update: what each lever saves", "",
             f"Command: `python benchmarks/speed/demo_levers.py --rounds {args.rounds} --threads "
             f"{' '.join(map(str, args.threads))}`", "",
             f"Machine: {describe()}. {args.note}".rstrip(), "",
             f"One batch of `make demo` ({len(rollouts)} episodes, {len(units)} units, seed 0, "
             "the committed start); the update under each lever from the same weights "
             "and generator, and the playing of such a batch, all alternating each round. "
             f"Speed-up: against the first lever's update (or playing) at {args.threads[0]} "
             "thread(s).", "",
             "| threads | lever | seconds by round | median | speed-up | optimizer steps "
             "| grad norm |", "|---:|---|---|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['threads']} | {r['lever']} | "
                     + " / ".join(f"{s:.1f}" for s in r["seconds"])
                     + f" | {r['median_s']:.1f} | {r['speedup']:.2f}x | "
                     + (" | " if r["updates"] is None else f"{r['updates']} | {r['grad_norm']:.4f}")
                     + " |")
    write_results("demo_levers", lines, rows)


if __name__ == "__main__":
    main()
