"""``make demo`` for several seeds, each run separately, and one table of their results:
held-out avg@8 and pass@8 before and after, the after-minus-before difference paired by
task with its standard error, and where the wall time went.

    python benchmarks/demo_seeds.py [--seeds 0 1 2] [--out runs/demo-seeds]

A seed whose run directory already holds a finished ``summary.json`` with the demo's
configuration is read back, not rerun. Writes ``benchmarks/results/demo_seeds.md`` and
``benchmarks/results/demo_seeds.json`` (the summaries without the per-task lists), and
copies the first seed's learning curve to ``benchmarks/results/demo_learning_curve.png``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

from machine import describe

from srpo_agents.demo import demo_config

RESULTS = Path(__file__).resolve().parent / "results"
PHASES = ("warm_start", "generation", "env", "update", "evaluation", "other")


def finished(run_dir: Path, seed: int) -> dict | None:
    path = run_dir / "summary.json"
    if not path.is_file():
        return None
    summary = json.loads(path.read_text())
    expected = json.loads(json.dumps(demo_config(str(run_dir), seed).to_dict()))
    return summary if summary.get("config") == expected else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--out", default="runs/demo-seeds")
    args = parser.parse_args()
    summaries = {}
    for seed in args.seeds:
        run_dir = Path(args.out) / f"seed{seed}"
        if finished(run_dir, seed) is None:
            # The demo exactly as `make demo` runs it, in its own process.
            subprocess.run([sys.executable, "-m", "srpo_agents.demo", "--seed", str(seed),
                            "--out", str(run_dir)], check=True)
        summaries[seed] = finished(run_dir, seed)
    k = demo_config().eval_k
    lines = [
        "# `make demo` on three seeds", "",
        f"Command: `python benchmarks/demo_seeds.py --seeds {' '.join(map(str, args.seeds))} "
        f"--out {args.out}` (each seed is `python -m srpo_agents.demo --seed S`, run alone).",
        "", f"Machine: {describe()}.", "",
        f"Held-out: {next(iter(summaries.values()))['difference']['tasks']} test-split tasks "
        f"x k={k}. ± is the standard error over tasks; the difference is paired by task.", "",
        f"| seed | avg@{k} before | avg@{k} after | avg@{k} after - before | z | pass@{k} before "
        f"| pass@{k} after | pass@{k} after - before | wall time |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for seed, s in summaries.items():
        b, a, d = s["before"], s["after"], s["difference"]
        lines.append(
            f"| {seed} | {b['avg_at_k']:.3f} ± {b['avg_at_k_stderr']:.3f} | "
            f"{a['avg_at_k']:.3f} ± {a['avg_at_k_stderr']:.3f} | **{d['avg_at_k']:+.3f} ± "
            f"{d['avg_at_k_stderr']:.3f}** | {d['avg_at_k_z']:+.1f} | {b['pass_at_k']:.3f} | "
            f"{a['pass_at_k']:.3f} | {d['pass_at_k']:+.3f} ± {d['pass_at_k_stderr']:.3f} | "
            f"{s['wall_time_s'] / 60:.1f} min |")
    lines += ["", "Where the time went (seconds):", "",
              "| seed | " + " | ".join(PHASES) + " | total |",
              "|---:|" + "---:|" * (len(PHASES) + 1)]
    for seed, s in summaries.items():
        t = s["time_breakdown"]
        lines.append(f"| {seed} | " + " | ".join(f"{t[p]:.0f}" for p in PHASES)
                     + f" | {t['total']:.0f} |")
    lines += ["", "Generation and env are the training rollouts; evaluation is the held-out "
              "evaluations before, halfway and after; other is checkpoints, plots and set-up."]
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "demo_seeds.md").write_text("\n".join(lines) + "\n")
    slim = {seed: {key: ({k2: v for k2, v in value.items() if not k2.startswith("per_task")}
                         if isinstance(value, dict) else value)
                   for key, value in s.items()} for seed, s in summaries.items()}
    (RESULTS / "demo_seeds.json").write_text(json.dumps(slim, indent=2) + "\n")
    first = Path(args.out) / f"seed{args.seeds[0]}" / "learning_curve.png"
    if first.is_file():
        shutil.copy(first, RESULTS / "demo_learning_curve.png")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
