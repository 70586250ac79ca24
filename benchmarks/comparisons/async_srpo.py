"""Asynchronous SRPO against synchronous, on the demo's setting (issue 39).

    python benchmarks/comparisons/async_srpo.py speed [--steps 8] [--backend hf|vllm]
    python benchmarks/comparisons/async_srpo.py train [--seeds 0 1 2]
        [--runs sync n1 n4 grpo grpo_n4]
    python benchmarks/comparisons/async_srpo.py report

``speed``: the demo's setting for ``--steps`` steps (held-out evaluation cut to 16
tasks x 1), synchronous and then one step off (``max_staleness`` 1), one after the
other in this script's subprocesses; the seconds of each step after the first (which
also starts the rollout process) and where they went. ``--backend vllm`` needs the
``.venv-vllm`` interpreter. Writes ``results/async_speed_<backend>.md``.

``train``: the demo's whole run (50 steps, held-out 500 questions x k = 4) for each
named run and seed, into ``runs/async-srpo/<run>-s<seed>`` (the runs of a seed share its
"before" evaluation, measured once); a finished run is read back,
an unfinished one resumes from its checkpoint (every 10 steps), so the matrix can span
sessions. Each finished run leaves a small record (its per-task scores and the means of
its async metrics) in ``results/async_srpo_runs.json``, which is committed: a run recorded
there is not trained again. ``report`` writes ``results/async_srpo.md`` from those
records, with the verdicts of ``srpo_agents.running.verdicts`` (several seeds: bootstrap,
t bar, signs).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from srpo_agents.running.demo import demo_config, ensure_start
from srpo_agents.running.metrics_log import read_metrics_rows
from srpo_agents.running.verdicts import common_seeds, diff_cell, difference
from srpo_bench.machine import describe, write_results

RUNS = {"sync": {}, "n1": {"max_staleness": 1}, "n4": {"max_staleness": 4},
        "n1_bypass": {"max_staleness": 1, "proximal": "behaviour"},
        "grpo": {"algo": "grpo"}, "grpo_n4": {"algo": "grpo", "max_staleness": 4}}
OUT = Path("runs/async-srpo")
RECORDS = Path(__file__).resolve().parents[1] / "results" / "async_srpo_runs.json"  # committed
STEP_KEYS = ("seconds", "generation_seconds", "update_seconds", "proximal_seconds",
             "rollout_wait_seconds", "overlap_seconds")


def config_for(run: str, seed: int, out: Path, **overrides):
    start = ensure_start(OUT / "demo-start")
    settings = {"save_every": 10, "resume": True, **RUNS[run], **overrides}
    return demo_config(str(out), seed, model=str(start), **settings)


def launch(config, python: str = sys.executable, before: Path | None = None) -> None:
    """``train(config)`` in a subprocess of its own (its own threads and memory), given
    the "before" evaluation in the JSON file ``before`` when there is one."""
    code = ("import json, sys; from srpo_agents.config import TrainConfig; "
            "from srpo_agents.running.train import train; "
            "before = json.load(open(sys.argv[2])) if len(sys.argv) > 2 else None; "
            "train(TrainConfig(**json.loads(sys.argv[1])), before=before)")
    subprocess.run([python, "-c", code, json.dumps(config.to_dict()),
                    *([str(before)] if before else [])], check=True)


def before_for(seed: int) -> Path:
    """The start's held-out evaluation for ``seed``, measured once and shared by every
    run of that seed (they start from the same policy and evaluate the same questions
    with the same seed), as the comparison harness shares it."""
    path = OUT / f"before-s{seed}.json"
    if not path.exists():
        code = ("import json, os, sys; from srpo_agents.config import TrainConfig; "
                "from srpo_agents.running.train import evaluate_start; "
                "result = evaluate_start(TrainConfig(**json.loads(sys.argv[1]))); "
                "open(sys.argv[2] + '.tmp', 'w').write(json.dumps(result)); "
                "os.replace(sys.argv[2] + '.tmp', sys.argv[2])")
        config = config_for("sync", seed, OUT / f"before-s{seed}")
        subprocess.run([sys.executable, "-c", code, json.dumps(config.to_dict()),
                        str(path)], check=True)
    return path


def speed(steps: int, backend: str) -> None:
    python = sys.executable if backend == "hf" else ".venv-vllm/bin/python"
    rows, lines = {}, []
    for run in ("sync", "n1", "n1_bypass"):
        out = OUT / f"speed-{backend}-{run}"
        config = config_for(run, 0, out, steps=steps, eval_tasks=16, eval_k=1,
                            eval_every=0, backend=backend, resume=False)
        launch(config, python)
        measured = read_metrics_rows(out / "metrics.jsonl")[1:]
        rows[run] = {key: float(np.mean([r.get(key, 0.0) for r in measured]))
                     for key in STEP_KEYS}
    ratio = rows["n1"]["seconds"] / rows["sync"]["seconds"]
    bypass = rows["n1_bypass"]["seconds"] / rows["sync"]["seconds"]
    lines += [f"# Asynchronous SRPO, wall time per step ({backend} backend)", "",
              f"Command: `python benchmarks/comparisons/async_srpo.py speed --steps {steps} "
              f"--backend {backend}`", "", f"Machine: {describe()}.", "",
              "Setting: the demo's (SRPO-Search-v0 search_answer_verify, 16 questions x "
              "G = 8 a step), the synchronous run, then one step off (max_staleness 1) "
              "with pi_prox recomputed, then one step off in bypass (pi_prox = mu), one "
              "after the other; the mean over the steps after the first. The learner has "
              "every core in all three; the rollout process has one torch thread.", "",
              "| run | s/step | generation | update | of which pi_prox pass | learner "
              "waiting for rollouts | generation overlapping updates |",
              "|---|---:|---:|---:|---:|---:|---:|"]
    for run, r in rows.items():
        lines.append(f"| {run} | {r['seconds']:.2f} | {r['generation_seconds']:.2f} | "
                     f"{r['update_seconds']:.2f} | {r['proximal_seconds']:.2f} | "
                     f"{r['rollout_wait_seconds']:.2f} | {r['overlap_seconds']:.2f} |")
    lines += ["", f"Seconds a step over synchronous: one step off **{ratio:.2f}**, in "
              f"bypass **{bypass:.2f}**."]
    write_results(f"async_speed_{backend}", lines, {"steps": steps, "rows": rows,
                                                    "ratio": ratio, "bypass_ratio": bypass})


def train_matrix(runs: list[str], seeds: list[int]) -> None:
    for seed in seeds:  # seed-major: a partial matrix still pairs runs on their seeds
        for run in runs:
            out = OUT / f"{run}-s{seed}"
            if out.name in finished_names():
                continue
            print(f"== {run} seed {seed}", flush=True)
            launch(config_for(run, seed, out), before=before_for(seed))
            finished()  # its record, committed beside the report, outlives runs/


def finished_names() -> set[str]:
    records = json.loads(RECORDS.read_text()) if RECORDS.exists() else {}
    return set(records) | {p.parent.name for p in OUT.glob("*/summary.json")}


def record(path: Path) -> dict:
    """What the report needs of one finished run, small enough to commit: the per-task
    scores the verdicts pair, and the means of the per-step async metrics."""
    summary = json.loads(path.read_text())
    metrics = read_metrics_rows(path.parent / "metrics.jsonl")
    mean = lambda key: float(np.mean([r.get(key, 0.0) for r in metrics]))  # noqa: E731
    return {"seed": summary["config"]["seed"],
            "before": summary["before"]["avg_at_k"], "after": summary["after"]["avg_at_k"],
            "gain": summary["difference"]["avg_at_k"],
            "gain_se": summary["difference"]["avg_at_k_stderr"],
            "wall_time_s": summary["wall_time_s"],
            "staleness": mean("staleness_mean"), "mismatch_kl": mean("mismatch_kl"),
            "mismatch_kl_max": max(r.get("mismatch_kl", 0.0) for r in metrics),
            "truncated": mean("behaviour_truncated"), "overlap": mean("overlap_seconds"),
            "per_task_avg": summary["after"]["per_task_avg"]}


def finished() -> dict[str, list[dict]]:
    """Every finished run: those committed in ``RECORDS`` (runs of earlier sessions,
    whose folders are gone), refreshed by what ``runs/`` holds now."""
    records = json.loads(RECORDS.read_text()) if RECORDS.exists() else {}
    for run in RUNS:
        for path in sorted(OUT.glob(f"{run}-s*/summary.json")):
            records[path.parent.name] = record(path)
    RECORDS.write_text(json.dumps(records, indent=0, sort_keys=True) + "\n")
    found: dict[str, list[dict]] = {}
    for name, row in sorted(records.items()):
        found.setdefault(name.rsplit("-s", 1)[0], []).append(row)
    return {run: found[run] for run in RUNS if run in found}


def cost(rows_async: list[dict], rows_sync: list[dict]) -> list[dict]:
    """Per seed, asynchronous minus synchronous held-out score of each question."""
    sync = {r["seed"]: r for r in rows_sync}
    return [{"seed": r["seed"], "per_task_avg": list(np.subtract(
        r["per_task_avg"], sync[r["seed"]]["per_task_avg"]))}
        for r in rows_async if r["seed"] in sync]


def report() -> None:
    found = finished()
    lines = ["# Asynchronous SRPO on the demo's setting", "",
             "Command: `python benchmarks/comparisons/async_srpo.py train --seeds 0 1 2` then "
             "`python benchmarks/comparisons/async_srpo.py report`.", "",
             f"Machine: {describe()}.", "",
             "Setting: the demo's run (SRPO-Search-v0 search_answer_verify from its "
             "committed start, 50 steps of 16 questions x G = 8, lr 6e-5); held-out 500 "
             "test-split questions x k = 4. n1 and n4: max_staleness 1 and 4, pi_prox "
             "recomputed, behaviour weight truncated at 3; grpo and grpo_n4: GRPO (token "
             "ratio, the same correction per token) synchronous and four steps off. "
             "Staleness, mismatch KL (k3 of "
             "KL(mu || pi_prox)), the truncated share and the overlap (seconds of a "
             "step's batch generated during updates) are means over the run's steps. Runs "
             "may have shared the 2 cores with tests and other work, so their wall times "
             "say little; `async_speed_hf.md` measures speed alone.", "",
             "| run | seed | avg@4 before | avg@4 after | after - before | mean staleness "
             "| mismatch KL (mean, max) | truncated share | overlap s/step | wall time (min) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for run, rows in found.items():
        for r in sorted(rows, key=lambda r: r["seed"]):
            lines.append(
                f"| {run} | {r['seed']} | {r['before']:.3f} | {r['after']:.3f} | "
                f"{r['gain']:+.3f} ± {r['gain_se']:.3f} | {r['staleness']:.2f} | "
                f"{r['mismatch_kl']:.1e}, {r['mismatch_kl_max']:.1e} | "
                f"{r['truncated']:.3f} | {r['overlap']:.1f} | {r['wall_time_s'] / 60:.1f} |")
    # Does the set-level correction keep learning where the per-token one loses it? Each
    # algorithm's cost of four steps off (per seed and question) is a row set of its own,
    # compared under the same rule as the runs.
    rows_by = dict(found)
    for a, b in (("n4", "sync"), ("grpo_n4", "grpo")):
        if a in found and b in found:
            rows_by[f"({a} - {b})"] = cost(found[a], found[b])
    pairs = [("n1", "sync"), ("n4", "sync"), ("grpo_n4", "grpo"), ("n4", "grpo_n4"),
             ("(n4 - sync)", "(grpo_n4 - grpo)")]
    verdicts = {}
    lines += ["", "Held-out avg@4 after training, A minus B, paired by question over the "
              "seeds both finished. The last row is each algorithm's cost of four steps off "
              "compared (per seed and question, SRPO's n4 - sync minus GRPO's grpo_n4 - "
              "grpo): behind means staleness cost SRPO more than GRPO.", "",
              "| A - B | difference |", "|---|---|"]
    for a, b in pairs:
        if a in rows_by and b in rows_by and common_seeds(rows_by[a], rows_by[b]):
            d = difference(rows_by[a], rows_by[b])
            verdicts[f"{a} - {b}"] = d
            lines.append(f"| {a} - {b} | {diff_cell(d)} |")
    data = {"runs": {run: [{k: v for k, v in r.items() if k != "per_task_avg"}
                            for r in rows] for run, rows in found.items()},
            "verdicts": verdicts}
    write_results("async_srpo", lines, data)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", choices=["speed", "train", "report"])
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--backend", choices=["hf", "vllm"], default="hf")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--runs", nargs="+", choices=sorted(RUNS),
                        default=["sync", "n1", "n4", "grpo_n4", "grpo"])
    args = parser.parse_args()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if args.mode == "speed":
        speed(args.steps, args.backend)
    elif args.mode == "train":
        train_matrix(args.runs, args.seeds)
    else:
        report()


if __name__ == "__main__":
    main()
