"""How far above their levels the learning tests pass, per start seed and float path.

``tests/test_learning.py`` trains a skilled start and asks every algorithm to reach a
stated reward level. This script runs the same cases for several start seeds under
each of torch's CPU kernel paths (``ATEN_CPU_CAPABILITY``: default, avx2, avx512; a path
the CPU lacks falls back, and the table says which one torch reported), one subprocess
per (path, seed) because the path is read when torch is imported. It writes a table of
start -> end reward and the margin over the level.

    python benchmarks/validity/learning_margin.py --seeds 0 1 2 \\
        --out benchmarks/results/learning_margin.md
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_one(seed: int, kinds: list[str], algos: list[str] | None) -> list[dict]:
    """Every (kind, algorithm) case from the start of ``seed``, in this process."""
    import tempfile

    import numpy as np
    import torch

    from srpo_agents.learning.objective import ALGORITHMS
    from tests import test_learning as tl  # the worker runs with the repository on its path

    policy, levels, steps = tl.skilled_start(seed, Path(tempfile.mkdtemp()) / "tiny")
    rows = []
    for kind in kinds:
        n_steps, level = tl.CASES[kind]
        for algo in algos or sorted(ALGORITHMS):
            tick = time.monotonic()
            rewards = tl.train_rewards(policy, kind, algo, n_steps)
            start, end = float(rewards[0]), float(np.mean(rewards[-3:]))
            rows.append({"seed": seed, "kind": kind, "algo": algo, "start": start, "end": end,
                         "level": level, "passed": bool(end >= level and start < tl.START_LIMIT),
                         "copy": levels["copy"], "habit": levels["habit"], "sft_steps": steps,
                         "capability": torch.backends.cpu.get_cpu_capability(),
                         "rewards": [round(r, 4) for r in rewards],
                         "seconds": time.monotonic() - tick})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--paths", nargs="+", default=["default", "avx2", "avx512"])
    parser.add_argument("--kinds", nargs="+", default=["copy", "pair", "relay"])
    parser.add_argument("--algos", nargs="+", default=None)
    parser.add_argument("--out", default="benchmarks/results/learning_margin.md")
    parser.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker is not None:
        print(json.dumps(run_one(args.worker, args.kinds, args.algos)))
        return
    rows = []
    for path in args.paths:
        for seed in args.seeds:
            command = [sys.executable, __file__, "--worker", str(seed), "--kinds", *args.kinds]
            if args.algos:
                command += ["--algos", *args.algos]
            # The worker imports tests/test_learning.py as tests.test_learning.
            env = {**os.environ, "ATEN_CPU_CAPABILITY": path, "PYTHONPATH": os.pathsep.join(
                filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
            out = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
            got = json.loads(out.stdout.strip().splitlines()[-1])
            for row in got:
                row["asked"] = path
            rows.extend(got)
            worst = min(r["end"] - r["level"] for r in got)
            print(f"{path} seed {seed}: {sum(r['passed'] for r in got)}/{len(got)} passed, "
                  f"worst margin {worst:+.3f}", flush=True)
    write_table(rows, Path(args.out))
    Path(args.out).with_suffix(".json").write_text(json.dumps(rows, indent=1) + "\n")


def write_table(rows: list[dict], out: Path) -> None:
    lines = ["# Learning-test margins by start seed and CPU kernel path", "",
             "`python benchmarks/validity/learning_margin.py` (the cases of "
             "tests/test_learning.py; "
             "margin = mean reward of the last 3 steps minus the level).", "",
             "| path asked | torch used | seed | copy skill | habit | SFT steps | passed | "
             "worst case | worst margin |", "|---|---|---:|---:|---:|---:|---:|---|---:|"]
    groups: dict[tuple, list[dict]] = {}
    for row in rows:
        groups.setdefault((row["asked"], row["seed"]), []).append(row)
    for (asked, seed), got in groups.items():
        worst = min(got, key=lambda r: r["end"] - r["level"])
        lines.append(f"| {asked} | {got[0]['capability']} | {seed} | {got[0]['copy']:.3f} | "
                     f"{got[0]['habit']:.3f} | {got[0]['sft_steps']} | "
                     f"{sum(r['passed'] for r in got)}/{len(got)} | {worst['algo']} on "
                     f"{worst['kind']} ({worst['start']:.2f} -> {worst['end']:.2f}) | "
                     f"{worst['end'] - worst['level']:+.3f} |")
    lines += ["", "Per case (start -> end):", "",
              "| path | seed | kind | algo | start | end | level |", "|---|---:|---|---|---:|---:|---:|"]
    lines += [f"| {r['asked']} | {r['seed']} | {r['kind']} | {r['algo']} | {r['start']:.3f} | "
              f"{r['end']:.3f} | {r['level']} |" for r in rows]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
