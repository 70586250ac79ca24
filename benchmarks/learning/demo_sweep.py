"""The sweep behind ``make demo``'s defaults: learning rate x optimizer updates per step
on the demo's setting (SRPO-Math-v0 parallel, K = 3 solvers and an aggregator, the tiny
policy), every cell from one warm start and one shared "before" evaluation.

    python benchmarks/learning/demo_sweep.py [--out runs/demo-sweep] [--workers 2]
        [--lrs 3e-5 1e-4 3e-4] [--updates 1 4] [--seed 0] [--steps N]

"Updates per step" is the number of optimizer steps per batch of rollouts: one epoch
over the batch in that many mini-batches (1 = the whole batch at once, on-policy).
Each cell reports the held-out avg@k and pass@k change, paired by task, with its
standard error, and the policy's mean token entropy, clip fraction and approximate KL
to the behaviour policy over the last 5 steps. Finished cells are read back, so an
interrupted sweep resumes. Writes ``table.md`` and ``results.jsonl`` under ``--out``
and copies the table to ``benchmarks/results/demo_sweep.md``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import time
from dataclasses import replace
from pathlib import Path

from srpo_agents.running.verdicts import task_difference
from srpo_agents.tiny.config import with_tiny
from srpo_bench.harness import before_job, make_pool, map_jobs, run_job, warm_start_job
from srpo_bench.machine import describe
from srpo_bench.math_team import math_demo_config as demo_config

RESULTS = Path(__file__).resolve().parents[1] / "results" / "demo_sweep.md"


def cell_config(base, out: Path, cell: dict):
    episodes = base.tasks_per_step * base.group_size
    extra = {k: v for k, v in cell.items() if k not in ("lr", "updates")}
    name = f"lr{cell['lr']:g}-u{cell['updates']}" + "".join(f"-{k}{v:g}" for k, v in extra.items())
    return replace(base, lr=cell["lr"], epochs=1, minibatch_episodes=-(-episodes // cell["updates"]),
                   out=str(out / "runs" / name), save_every=0, **extra)


def parse_extra(text: str) -> dict:
    """"beta=0.05,eps_high=0.2" -> {"beta": 0.05, "eps_high": 0.2}"""
    return {k: float(v) for k, v in (item.split("=") for item in text.split(",") if item)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="runs/demo-sweep")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--lrs", type=float, nargs="+", default=[3e-5, 1e-4, 3e-4])
    parser.add_argument("--updates", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=0,
                        help="RL steps per cell (default: the demo's)")
    parser.add_argument("--extra", nargs="*", default=[],
                        help="more cells at the demo's lr and updates, each a comma list of "
                             "overrides, e.g. beta=0.05 eps_high=0.2")
    args = parser.parse_args()
    out = Path(args.out)
    started = time.monotonic()
    base = demo_config(str(out / "warmstart"), args.seed, eval_every=0)
    base = replace(with_tiny(base, warmstart_dir=str(out / "warmstart")),
                   steps=args.steps or base.steps)
    warm = warm_start_job(base)
    base = replace(base, model=str(out / "warmstart" / "warmstart"), model_options={},
                   compact_prompts=True)
    before = before_job(replace(base, out=str(out / "before")), out / "before.json")
    demo_updates = -(-base.tasks_per_step * base.group_size // base.minibatch_episodes)
    cells = [{"lr": lr, "updates": u} for lr in args.lrs for u in args.updates]
    cells += [{"lr": base.lr, "updates": demo_updates, **parse_extra(e)} for e in args.extra]
    pool = make_pool(args.workers)
    try:
        map_jobs(pool, run_job, [(cell_config(base, out, cell), before) for cell in cells])
    finally:
        if pool is not None:
            pool.shutdown()
    rows = []
    for cell in cells:
        run_dir = Path(cell_config(base, out, cell).out)
        summary = json.loads((run_dir / "summary.json").read_text())
        steps = [json.loads(line) for line in
                 (run_dir / "metrics.jsonl").read_text().splitlines() if line]
        last = steps[-5:]
        config = json.loads((run_dir / "summary.json").read_text())["config"]
        rows.append({"lr": cell["lr"], "updates_per_step": cell["updates"],
                     "eps_high": config["eps_high"], "beta": config["beta"],
                     "difference": task_difference(before, summary["after"]),
                     "after": {k: summary["after"][k] for k in
                               ("avg_at_k", "avg_at_k_stderr", "pass_at_k", "pass_at_k_stderr")},
                     **{key: statistics.mean(s.get(key, 0.0) for s in last)
                        for key in ("entropy", "clip_fraction", "approx_kl")},
                     "entropy_first": steps[0].get("entropy", 0.0),
                     "wall_time_s": summary["wall_time_s"]})
    with (out / "results.jsonl").open("w") as handle:
        handle.writelines(json.dumps(r) + "\n" for r in rows)
    k = base.eval_k
    command = (f"python benchmarks/learning/demo_sweep.py --out {args.out} "
               f"--workers {args.workers} "
               f"--lrs {' '.join(f'{x:g}' for x in args.lrs)} "
               f"--updates {' '.join(map(str, args.updates))} --seed {args.seed} "
               f"--steps {base.steps}"
               + (f" --extra {' '.join(args.extra)}" if args.extra else ""))
    lines = [
        "# Demo sweep: learning rate x updates per step", "",
        f"Command: `{command}`", "",
        f"Machine: {describe()}. Wall time {(time.monotonic() - started) / 60:.0f} min "
        f"(this invocation; finished cells are read back).", "",
        f"Setting: `srpo_agents.running.demo` (SRPO-Math-v0 parallel, 3 solvers + aggregator, tiny "
        f"policy, level 0), seed {args.seed}: {base.steps} steps of {base.tasks_per_step} "
        f"tasks x G={base.group_size}, one epoch per batch split into the given number of "
        f"mini-batches, eps_low {base.eps_low}. One warm start "
        f"({warm.get('steps')} steps, held-out avg@2 {warm.get('accuracy', 0):.3f}) and one "
        f"'before' evaluation shared by every cell: avg@{k} "
        f"{before['avg_at_k']:.3f} ± {before['avg_at_k_stderr']:.3f}, pass@{k} "
        f"{before['pass_at_k']:.3f} on {before['tasks']} held-out tasks x k={k}.", "",
        "Gains are after minus before, paired by task, ± the standard error of the "
        "per-task difference. Entropy (nats per response token), clip fraction and "
        "approximate KL to the behaviour policy are means over the last 5 steps.", "",
        f"| lr | updates/step | eps_high | KL beta | avg@{k} gain | z | pass@{k} change "
        f"| entropy (step 1 -> end) | clip fraction | approx KL | run time |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        d = r["difference"]
        lines.append(
            f"| {r['lr']:g} | {r['updates_per_step']} | {r['eps_high']:g} | {r['beta']:g} | "
            f"{d['avg_at_k']:+.3f} ± "
            f"{d['avg_at_k_stderr']:.3f} | {d['avg_at_k_z']:+.1f} | {d['pass_at_k']:+.3f} ± "
            f"{d['pass_at_k_stderr']:.3f} | {r['entropy_first']:.3f} -> {r['entropy']:.3f} | "
            f"{r['clip_fraction']:.3f} | {r['approx_kl']:.4f} | "
            f"{r['wall_time_s'] / 60:.1f} min |")
    (out / "table.md").write_text("\n".join(lines) + "\n")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(out / "table.md", RESULTS)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
