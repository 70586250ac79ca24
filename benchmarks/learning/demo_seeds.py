"""``make demo`` on seeds 0-4, each run on its own as ``python -m srpo_agents.running.demo --seed
S``, and one table of their results: held-out avg@4 before and after, the difference
paired by question with its standard error and z, pass@4, and each run's wall time.

    python benchmarks/learning/demo_seeds.py [--seeds 0 1 2 3 4] [--out runs/demo-seeds]
        [--clone] [--note "how the runs shared the CPU"] [--recorded OLD_demo_seeds.json]

``--clone``: each seed is ``make demo`` in a fresh clone of HEAD (commit first), so its
wall time includes creating the clone's .venv, as a newcomer's first run does.

A seed whose folder already holds a finished run of the demo's setting is read back, not
rerun, so seeds can be run by separate invocations (two at a time, say, each with
OMP_NUM_THREADS=1) and a last invocation over all of them writes the table.
``--recorded``: a ``demo_seeds.json`` this script wrote before; a seed whose folder is
gone (a new checkout has no ``runs/``) is read from it when its record is of the demo's
current setting, so a table can be finished without running its seeds again. Each run's
printed output is kept in ``OUT/seedS.log``. Writes ``benchmarks/results/demo_seeds.md``
and ``.json`` (the summaries without their per-question lists) and copies the first
seed's learning curve to ``benchmarks/results/demo_learning_curve.png``. Each run's own
record (summary, metrics, printed output) stays in ``OUT``: the table holds its figures.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

from srpo_agents.config import TrainConfig, same_settings
from srpo_agents.models.policy import load_policy
from srpo_agents.running.demo import BAR, COMMITTED_START, demo_config, redraw_curve, setting_text
from srpo_agents.running.verdicts import cleared
from srpo_agents.tiny.config import tiny_run
from srpo_bench.machine import RESULTS, describe

PHASES = ("warm_start", "generation", "env", "update", "evaluation", "other")


def finished(run_dir: Path, seed: int) -> dict | None:
    """The seed's summary plus its ``demo.json`` (wall time, threads) when the folder
    holds a finished run of the demo's current setting."""
    run_dir = run_dir.resolve()  # run_seed gives the demo an absolute --out
    path, wall = run_dir / "summary.json", run_dir / "demo.json"
    if not (path.is_file() and wall.is_file()):
        return None
    summary = json.loads(path.read_text())
    model = summary["config"]["model"]
    expected = demo_config(str(run_dir), seed, model=model)
    return {**summary, **json.loads(wall.read_text())} if same_settings(
        summary["config"], expected, ignore=()) else None


def recorded_run(path: str | None, seed: int) -> dict | None:
    """The seed's record in an earlier ``demo_seeds.json`` when it ran the demo's current
    setting (its per-question lists were not kept: the table needs none)."""
    if not path:
        return None
    run = json.loads(Path(path).read_text())["seeds"].get(str(seed))
    if run is None:
        return None
    expected = demo_config(run["config"]["out"], seed, model=run["config"]["model"])
    return run if same_settings(run["config"], expected, ignore=()) else None


def run_seed(run_dir: Path, seed: int, clone: bool) -> None:
    """The demo exactly as ``make demo`` runs it, in its own process; with ``clone``,
    ``make demo`` itself in a fresh clone of this repository's HEAD (its own .venv,
    installed by make: the wall time then includes the install)."""
    run_dir = run_dir.resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    repo = Path(__file__).resolve().parents[2]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=repo, check=True,
                            capture_output=True, text=True).stdout.strip()
    command = [sys.executable, "-m", "srpo_agents.running.demo", "--seed", str(seed),
               "--out", str(run_dir)]
    cwd = repo
    if clone:
        cwd = run_dir.parent / f"clone-seed{seed}"
        shutil.rmtree(cwd, ignore_errors=True)
        subprocess.run(["git", "clone", "--quiet", str(repo), str(cwd)], check=True)
        command = ["make", "demo", f"DEMO_ARGS=--seed {seed} --out {run_dir}"]
    started = time.monotonic()
    with open(run_dir.parent / f"seed{seed}.log", "w") as log:
        subprocess.run(command, cwd=cwd, check=True, stdout=log, stderr=subprocess.STDOUT)
    (run_dir / "demo.json").write_text(json.dumps({
        "demo_wall_s": time.monotonic() - started, "fresh_clone": clone, "commit": commit,
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS", "")}) + "\n")
    if clone:  # its .venv is 1-2 GB
        shutil.rmtree(cwd, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--out", default="runs/demo-seeds")
    parser.add_argument("--note", default="", help="a sentence on how the runs shared the CPU")
    parser.add_argument("--clone", action="store_true",
                        help="run each seed as `make demo` in a fresh clone (install included)")
    parser.add_argument("--recorded", help="a demo_seeds.json written before: a seed whose "
                        "folder is gone is read from it if it ran the current setting")
    args = parser.parse_args()
    runs = {}
    for seed in args.seeds:
        run_dir = Path(args.out) / f"seed{seed}"
        if finished(run_dir, seed) is None:
            runs[seed] = recorded_run(args.recorded, seed)
            if runs[seed] is not None:
                print(f"seed {seed}: read from {args.recorded} (its folder is gone)")
                continue
            run_seed(run_dir, seed, args.clone)
        runs[seed] = finished(run_dir, seed)
    k = demo_config().eval_k
    lines = [
        "# `make demo` on five seeds", "",
        "Command: `python benchmarks/learning/demo_seeds.py "
        f"--seeds {' '.join(map(str, args.seeds))} "
        f"--out {args.out}{' --clone' * args.clone}"
        + (f" --recorded {args.recorded}" if args.recorded else "") + "`; each seed is "
        + ("`make demo DEMO_ARGS=\"--seed S\"` in a fresh clone of commit "
           f"{runs[args.seeds[0]]['commit']}, its install included in the wall time"
           if args.clone else "`python -m srpo_agents.running.demo --seed S` in its own process")
        + ", from the committed start point.", "",
        f"Machine: {describe()}. {args.note}".rstrip(), "",
        f"Setting: {setting_text(demo_config(model=str(COMMITTED_START / 'warmstart')))}.",
        "",
        f"Held-out: {next(iter(runs.values()))['difference']['tasks']} test-split questions "
        f"x k={k}. ± is the standard error over questions; the difference is paired by "
        f"question. The bar: after - before >= +{BAR[0]} and >= {BAR[1]:.0f} SE.", "",
        f"| seed | avg@{k} before | avg@{k} after | after - before | z | bar | "
        f"pass@{k} before | pass@{k} after | threads | wall time |",
        "|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|"]
    for seed, s in runs.items():
        b, a, d = s["before"], s["after"], s["difference"]
        met = cleared(d, *BAR)
        lines.append(
            f"| {seed} | {b['avg_at_k']:.3f} ± {b['avg_at_k_stderr']:.3f} | "
            f"{a['avg_at_k']:.3f} ± {a['avg_at_k_stderr']:.3f} | **{d['avg_at_k']:+.3f} ± "
            f"{d['avg_at_k_stderr']:.3f}** | {d['avg_at_k_z']:+.1f} | "
            f"{'met' if met else 'missed'} | {b['pass_at_k']:.3f} | {a['pass_at_k']:.3f} | "
            f"{s['omp_num_threads'] or 'default'} | {s['demo_wall_s'] / 60:.1f} min |")
    lines += ["", "Where the time of each run went (seconds). Other is the rest: with "
              "--clone the install (make's .venv), and the start point's check, the "
              "episodes shown and the curve's start point:", "",
              "| seed | " + " | ".join(PHASES) + " | total |",
              "|---:|" + "---:|" * (len(PHASES) + 1)]
    for seed, s in runs.items():
        t = dict(s["time_breakdown"], other=s["time_breakdown"]["other"]
                 + s["demo_wall_s"] - s["time_breakdown"]["total"])
        lines.append(f"| {seed} | " + " | ".join(f"{t[p]:.0f}" for p in PHASES)
                     + f" | {s['demo_wall_s']:.0f} |")
    lines += ["", "Generation and env are the training rollouts; evaluation is the held-out "
              "evaluations before and after and the validation curve."]
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "demo_seeds.md").write_text("\n".join(lines) + "\n")
    slim = {str(seed): {key: ({k2: v for k2, v in value.items() if not k2.startswith("per_task")}
                              if isinstance(value, dict) else value)
                        for key, value in s.items()} for seed, s in runs.items()}
    (RESULTS / "demo_seeds.json").write_text(json.dumps(
        {"machine": describe(), "note": args.note, "seeds": slim}, indent=2) + "\n")
    # The first seed's curve, drawn again with the start's validation point at step 0
    # (runs made before the demo drew it had none; drawing it touches no result).
    first = runs[args.seeds[0]]
    if not Path(first["config"]["out"]).is_dir():
        print("\n".join(lines) + "\n(the first seed's folder is gone: the committed curve "
              "stays as it was drawn from it)")
        return
    config = TrainConfig(**tiny_run({k: tuple(v) if isinstance(v, list) else v
                                     for k, v in first["config"].items()},
                                    model=str(COMMITTED_START / "warmstart")))
    redraw_curve(replace(config, out=first["config"]["out"]),
                 load_policy(config.model), first)
    shutil.copy(Path(first["config"]["out"]) / "learning_curve.png",
                RESULTS / "demo_learning_curve.png")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
