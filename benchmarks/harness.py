"""The paired comparison harness: envs x workflows x algorithms x seeds on identical task
splits and an identical budget of generated samples (every run: the same steps x tasks
per step x group size, the same held-out tasks and k).

    python benchmarks/harness.py --preset smoke --out runs/harness-smoke
    python benchmarks/harness.py --preset small --out runs/harness-small

Writes, under ``--out``:
- ``results.jsonl``: one row per run and checkpoint ("before" = the shared starting
  policy, "after" = the trained one) with avg@k, pass@k, tokens and tool calls per task,
  token-normalized utility, gradient-norm CV, mean active-set size and events dropped;
- ``table.md``: mean ± std over seeds per env/workflow and algorithm, and the macro
  average over env/workflow pairs;
- ``learning_curves.png`` (training accuracy per step, per algorithm) and
  ``accuracy_vs_tokens.png`` (held-out avg@k against generated tokens spent).

Presets: ``smoke`` (a fresh untrained tiny policy, 2 algorithms, 2 steps; a test runs it),
``small`` (the warm-started tiny policy, both envs, parallel and division-of-labor
workflows, every algorithm, 3 seeds) and ``paper`` (a Qwen-class model with the vLLM
backend on a GPU).
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

from srpo_agents.config import TrainConfig
from srpo_agents.objective import ALGORITHMS
from srpo_agents.train import train

ALL_ALGOS = sorted(ALGORITHMS)
PRESETS: dict[str, dict[str, Any]] = {
    "smoke": {"pairs": [("SRPO-Math-v0", "parallel")], "algos": ["srpo", "grpo"],
              "seeds": [0], "base": dict(model="fresh-tiny", compact_prompts=True, steps=2,
                                         group_size=2, tasks_per_step=2, eval_tasks=4,
                                         eval_k=2, max_new_tokens=12, n_agents=2)},
    "small": {"pairs": [("SRPO-Math-v0", "parallel"), ("SRPO-Math-v0", "solve_verify"),
                        ("SRPO-Search-v0", "parallel"),
                        ("SRPO-Search-v0", "search_answer_verify")],
              "algos": ALL_ALGOS, "seeds": [0, 1, 2],
              "base": dict(model="tiny", steps=4, group_size=4, tasks_per_step=8,
                           eval_tasks=64, eval_k=4, max_new_tokens=32, difficulty=(0,),
                           warmstart_minutes=3.0)},
    "paper": {"pairs": [("SRPO-Math-v0", "parallel"), ("SRPO-Search-v0", "parallel")],
              "algos": ALL_ALGOS, "seeds": [0, 1, 2],
              "base": dict(model="Qwen/Qwen2.5-3B-Instruct", backend="vllm", device="cuda",
                           steps=200, group_size=8, tasks_per_step=32, eval_tasks=500,
                           eval_k=16, max_new_tokens=512, lr=1e-6)},
}


def _read_metrics(run_dir: Path) -> list[dict]:
    path = run_dir / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line]


def run_rows(config: TrainConfig, summary: dict, run_dir: Path) -> list[dict]:
    steps = _read_metrics(run_dir)
    norms = [s["grad_norm"] for s in steps if "grad_norm" in s]
    mean_norm = statistics.mean(norms) if norms else 0.0
    train_tokens = sum(s["tokens_per_task"] for s in steps) * config.tasks_per_step * config.group_size
    common = {"env": config.env, "workflow": config.workflow, "algo": config.algo,
              "seed": config.seed, "steps": config.steps, "train_tokens": train_tokens,
              "grad_norm_cv": statistics.pstdev(norms) / mean_norm if mean_norm else 0.0,
              "mean_set_size": statistics.mean(s["mean_set_size"] for s in steps) if steps else 0.0,
              "events_dropped": sum(s["events_dropped"] for s in steps)}
    rows = []
    for checkpoint in ("before", "after"):
        result = summary[checkpoint]
        utility = result["avg_at_k"] / result["tokens_per_task"] * 1e6 if result[
            "tokens_per_task"] else 0.0
        rows.append({**common, "checkpoint": checkpoint, **result,
                     "correct_per_million_tokens": utility})
    return rows


def _mean_std(values: list[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:.3f}"
    return f"{statistics.mean(values):.3f} ± {statistics.stdev(values):.3f}"


def write_table(rows: list[dict], path: Path, command: str) -> None:
    after = [r for r in rows if r["checkpoint"] == "after"]
    pairs = sorted({(r["env"], r["workflow"]) for r in after})
    algos = sorted({r["algo"] for r in after})
    k = after[0]["k"]
    lines = [f"# Paired comparison ({command})", "",
             f"Held-out avg@{k} / pass@{k} after training, mean ± std over seeds; the same "
             f"tasks, seeds and sample budget for every algorithm.", "",
             "| env | workflow | algo | avg@k | pass@k | tokens/task | tool calls/task | "
             "correct/M tokens | grad-norm CV | mean set size | events dropped |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for env, workflow in pairs:
        for algo in algos:
            sel = [r for r in after if (r["env"], r["workflow"], r["algo"]) == (env, workflow, algo)]
            if not sel:
                continue

            def col(key, rows_=sel):
                return [r[key] for r in rows_]

            lines.append(
                f"| {env} | {workflow} | {algo} | {_mean_std(col('avg_at_k'))} | "
                f"{_mean_std(col('pass_at_k'))} | {statistics.mean(col('tokens_per_task')):.1f} | "
                f"{statistics.mean(col('tool_calls_per_task')):.2f} | "
                f"{statistics.mean(col('correct_per_million_tokens')):,.0f} | "
                f"{statistics.mean(col('grad_norm_cv')):.2f} | "
                f"{statistics.mean(col('mean_set_size')):.2f} | {sum(col('events_dropped'))} |")
    lines += ["", "Macro average over env/workflow pairs:", "", "| algo | avg@k | pass@k |",
              "|---|---:|---:|"]
    for algo in algos:
        per_pair = [[r for r in after if r["algo"] == algo and (r["env"], r["workflow"]) == p]
                    for p in pairs]
        avg = [statistics.mean(r["avg_at_k"] for r in sel) for sel in per_pair if sel]
        pas = [statistics.mean(r["pass_at_k"] for r in sel) for sel in per_pair if sel]
        lines.append(f"| {algo} | {statistics.mean(avg):.3f} | {statistics.mean(pas):.3f} |")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def write_plots(rows: list[dict], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    for run_dir in sorted((out / "runs").iterdir()):
        steps = _read_metrics(run_dir)
        ax.plot([s["step"] + 1 for s in steps], [s["accuracy"] for s in steps],
                label=run_dir.name, alpha=0.8)
    ax.set_xlabel("step")
    ax.set_ylabel("training accuracy")
    ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(out / "learning_curves.png", dpi=120)
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for algo in sorted({r["algo"] for r in rows}):
        sel = [r for r in rows if r["algo"] == algo and r["checkpoint"] == "after"]
        ax.scatter([r["train_tokens"] for r in sel], [r["avg_at_k"] for r in sel], label=algo)
    ax.set_xlabel("generated training tokens")
    ax.set_ylabel("held-out avg@k")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "accuracy_vs_tokens.png", dpi=120)
    plt.close(fig)


def run_preset(name: str, out: Path, log=print) -> list[dict]:
    preset = PRESETS[name]
    out.mkdir(parents=True, exist_ok=True)
    base = dict(preset["base"])
    if base["model"] == "fresh-tiny":
        from srpo_agents.tiny import build_tiny_policy

        model_dir = out / "fresh-tiny"
        if not (model_dir / "config.json").is_file():
            build_tiny_policy(["x"], model_dir, hidden_size=64, num_layers=2, num_heads=2)
        base["model"] = str(model_dir)
    rows = []
    for env, workflow in preset["pairs"]:
        for seed in preset["seeds"]:
            for algo in preset["algos"]:
                # Every algorithm of a pair and seed starts from the same warm start.
                config = TrainConfig(env=env, workflow=workflow, algo=algo, seed=seed,
                                     out=str(out / "runs" / f"{env}-{workflow}-{algo}-s{seed}"),
                                     warmstart_dir=str(out / "warmstart" /
                                                       f"{env}-{workflow}-s{seed}"),
                                     save_every=0, **base)
                log(f"harness: {env} {workflow} {algo} seed {seed}")
                summary = train(config, log=lambda *_: None)
                rows += run_rows(config, summary, Path(config.out))
    with (out / "results.jsonl").open("w") as handle:
        handle.writelines(json.dumps(r) + "\n" for r in rows)
    command = f"python benchmarks/harness.py --preset {name} --out {out}"
    write_table(rows, out / "table.md", command)
    write_plots(rows, out)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--preset", choices=sorted(PRESETS), default="smoke")
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    out = Path(args.out or f"runs/harness-{args.preset}")
    run_preset(args.preset, out)
    print((out / "table.md").read_text())


if __name__ == "__main__":
    main()
