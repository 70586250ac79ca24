"""SRPO on a pretrained LLM, on 2 CPU cores (issue 37): SmolLM2-135M-Instruct (the pinned
``smollm2-135m-instruct`` source) trained as a two-agent math team, and as a single agent
at the same budget, each evaluated before and after on 500 held-out tasks.

    python benchmarks/real_model/real_model_run.py pilot [--lrs 1e-5 3e-6] [--steps 6]
    python benchmarks/real_model/real_model_run.py run --lr LR [--steps N]
    python benchmarks/real_model/real_model_run.py report --lr LR [--steps N]   # what has finished

Setting (``BASE``): SRPO-Math-v0 level 1 (one addition or subtraction of numbers up to
20), the full role prompts in the model's chat template, ``max_new_tokens`` 128 per
agent, 4 tasks x G = 8 episodes a step, one epoch, full-parameter AdamW in micro-batches
of 8 rows (32 rows of ~350 tokens do not fit 24 GB on this model), hf backend. The team
is ``solve_verify`` with one round: the solver answers, the verifier accepts or rejects
with a corrected answer (two active sets of K = 1 an episode); the single agent is
``single`` (one). Both use the same tasks, steps, lr and seed; the team spends more
tokens a step, which the table reports.

``pilot`` runs the single agent for a few steps at each lr and writes each step's mean
training reward. The rule, fixed before it ran: ``run`` takes the lr with the highest mean
reward over the pilot's second half, the smaller lr on a tie. The choice reads nothing
else (``train`` always evaluates before and
after: here on 4 test tasks, which the pilot neither reports nor uses). ``run``
trains the team, then the single agent; a run with a checkpoint resumes from it, and a
finished one is read back, so the command can be repeated until both are done. Writes
``benchmarks/results/real_model_run.md`` and ``.json`` (``pilot``: real_model_pilot.md).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from srpo_agents.config import TrainConfig
from srpo_agents.running.checkpoint import checkpoint_dirs
from srpo_agents.running.metrics_log import read_metrics_rows
from srpo_agents.running.real_recipe import run_one
from srpo_agents.running.verdicts import diff_cell, difference, task_difference
from srpo_bench.machine import describe, write_results

BASE = dict(env="SRPO-Math-v0", difficulty=(1,), model="smollm2-135m-instruct",
            max_new_tokens=128, max_turns=1, tasks_per_step=4, group_size=8, epochs=1,
            microbatch_rows=8, eval_tasks=500, eval_k=1, save_every=2, algo="srpo", seed=0)
RUNS = {"team": "solve_verify", "single": "single"}


def config_for(name: str, out: Path, lr: float, steps: int, **changes) -> TrainConfig:
    return TrainConfig(**{**BASE, "workflow": RUNS[name], "lr": lr, "steps": steps,
                          "out": str(out / name), **changes})


def pilot(args, out: Path) -> None:
    lines = ["# Real-model pilot: training reward per step (single agent)", "",
             f"Command: `python benchmarks/real_model/real_model_run.py pilot --lrs "
             f"{' '.join(map(str, args.lrs))} --steps {args.steps}`", "",
             f"Machine: {describe()}.", "",
             "Prompts: the math env's built-in templates (prompt set \"default\").", "",
             "| lr | " + " | ".join(f"step {s}" for s in range(args.steps)) + " | wall (min) |",
             "|---:|" + "---:|" * (args.steps + 1)]
    data = {}
    for lr in args.lrs:
        config = config_for("single", out / f"pilot-lr{lr:g}", lr, args.steps, eval_tasks=4)
        summary = run_one(config)
        rows = [json.loads(line) for line in
                (Path(config.out) / "metrics.jsonl").read_text().splitlines()]
        rewards = [r["reward"] for r in rows]
        wall = summary["time_breakdown"]["total"]
        data[str(lr)] = {"reward": rewards, "time_breakdown": summary["time_breakdown"]}
        lines.append(f"| {lr:g} | " + " | ".join(f"{r:.3f}" for r in rewards)
                     + f" | {wall / 60:.1f} |")
    half = args.steps // 2
    late = {lr: sum(d["reward"][half:]) / len(d["reward"][half:]) for lr, d in data.items()}
    chosen = max(sorted(late, key=float), key=lambda lr: late[lr])  # ties: the smaller lr
    lines += ["", "Mean training reward over steps "
              f"{half}-{args.steps - 1}: " + ", ".join(f"lr {float(lr):g}: {v:.3f}"
                                                     for lr, v in late.items())
              + f". Chosen (the rule above): lr {float(chosen):g}."]
    data["chosen"] = float(chosen)
    write_results("real_model_pilot", lines, data)


def report(args, summaries: dict[str, dict]) -> None:
    lines = ["# SRPO on SmolLM2-135M-Instruct, CPU: a math team and a single agent", "",
             f"Command: `python benchmarks/real_model/real_model_run.py run --lr {args.lr:g} "
             f"--steps {args.steps}`", "", f"Machine: {describe()}.", "",
             f"Setting: {json.dumps({k: v for k, v in BASE.items()})}, lr {args.lr:g}, "
             f"{args.steps} steps; held-out: the first {BASE['eval_tasks']} distinct tasks "
             "of the generator's test split, k = 1. Prompts: the math env's built-in "
             "templates (prompt set \"default\").", "",
             "| run | workflow | before avg@1 | after avg@1 | after - before (paired) | z | "
             "boxed before | boxed after | tokens/task before | tokens/task after | "
             "wall of its last invocation (min) |", "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    data = {}
    for name, summary in summaries.items():
        if "after" not in summary:  # still training (``report`` mode)
            lines.append(f"| {name} | {RUNS[name]} | {summary['before']['avg_at_k']:.3f} | "
                         f"running: {summary['steps_done']} of {args.steps} steps done | "
                         "| | | | | | |" if summary.get("before") else
                         f"| {name} | {RUNS[name]} | running | | | | | | | | |")
            continue
        before, after = summary["before"], summary["after"]
        diff = task_difference(before, after)
        wall = summary.get("time_breakdown", {}).get("total", 0.0)
        lines.append(
            f"| {name} | {RUNS[name]} | {before['avg_at_k']:.3f} | {after['avg_at_k']:.3f} | "
            f"{diff['avg_at_k']:+.3f} ± {diff['avg_at_k_stderr']:.3f} | "
            f"{diff['avg_at_k_z']:+.1f} | {before.get('boxed_rate', float('nan')):.3f} | "
            f"{after.get('boxed_rate', float('nan')):.3f} | {before['tokens_per_task']:.0f} | "
            f"{after['tokens_per_task']:.0f} | {wall / 60:.0f} |")
        data[name] = {"before": {k: v for k, v in before.items() if not k.startswith("per_")},
                      "after": {k: v for k, v in after.items() if not k.startswith("per_")},
                      "difference": diff, "time_breakdown": summary.get("time_breakdown"),
                      "config": summary["config"]}
    lines += ["", "Wall: the run's last invocation, evaluations included (a resumed run "
              "counts from its resume: the team resumed at step 6). Other jobs shared the "
              "2 cores for much of it (the single agent ran beside the team), so the times "
              "are upper bounds, not costs."]
    if not all("after" in summary for summary in summaries.values()):
        lines += ["", "Partial: a run is still training. The command above resumes it from "
                  "its last checkpoint and rewrites this table when both are done."]
    if all("after" in summary for summary in summaries.values()):
        rows = {name: [{"seed": 0, "per_task_avg": summary["after"]["per_task_avg"]}]
                for name, summary in summaries.items()}
        versus = difference(rows["team"], rows["single"])
        data["team_minus_single"] = {k: versus[k] for k in ("diff", "se", "verdict",
                                                             "seeds_to_separate")}
        lines += ["", "Team minus single agent after training, paired by task: "
                  + diff_cell(versus) + "."]
    write_results("real_model_run", lines, data)


def progress(config: TrainConfig) -> dict:
    """A run's finished summary, or how far it got (its checkpointed "before" and the
    steps in its metrics.jsonl)."""
    summary = Path(config.out) / "summary.json"
    if summary.is_file():
        return json.loads(summary.read_text())
    rows = read_metrics_rows(Path(config.out) / "metrics.jsonl")
    folders = checkpoint_dirs(Path(config.out))  # newest first; its state.json, not weights
    state = json.loads((folders[0] / "state.json").read_text()) if folders else {}
    before = state.get("payload", {}).get("extra", {}).get("before")
    return {"before": before, "steps_done": len(rows)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=["pilot", "run", "report"],
                        help="report: write the table of what has finished, running nothing")
    parser.add_argument("--lrs", type=float, nargs="+", default=[1e-5, 3e-6, 3e-5])
    parser.add_argument("--lr", type=float, default=1e-5)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--out", default="runs/real-model")
    args = parser.parse_args()
    out = Path(args.out)
    if args.mode == "pilot":
        pilot(args, out)
        return
    step = run_one if args.mode == "run" else progress
    report(args, {name: step(config_for(name, out, args.lr, args.steps)) for name in RUNS})


if __name__ == "__main__":
    main()
