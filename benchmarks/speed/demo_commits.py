"""The demo at two commits on one machine, interleaved: where its time goes in each
(issue 61: "the demo got slower: find why").

    python benchmarks/speed/demo_commits.py --commits 5f6735c HEAD --steps 4 --rounds 2

Each commit is checked out in a temporary worktree (sharing this checkout's .venv), and
its own demo runs ``--steps N`` from its own committed start point, one thread, the
commits alternating round by round, so both meet the same machine and the same load.
The demo's closing line gives each phase's seconds; the wall time is the whole process.
A few steps cost the same per step as fifty, and the held-out evaluations (500 questions
x 4, before and after) are whole.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from srpo_bench.machine import describe, write_results

ROOT = Path(__file__).resolve().parents[2]
PHASES = ("generation", "update", "evaluation", "other")


def demo_module(tree: Path) -> str:
    """Before the package was grouped into stages (6b52437) the demo was srpo_agents.demo."""
    return ("srpo_agents.running.demo" if (tree / "srpo_agents/running/demo.py").is_file()
            else "srpo_agents.demo")


def run_demo(tree: Path, steps: int, out: Path) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(tree)}
    tick = time.monotonic()
    done = subprocess.run([sys.executable, "-m", demo_module(tree), "--steps", str(steps),
                           "--out", str(out)], cwd=tree, env=env, text=True,
                          capture_output=True, check=True)
    wall = time.monotonic() - tick
    line = next(x for x in done.stdout.splitlines() if x.startswith("Wall time"))
    phases = {name: float(value) for name, value in re.findall(r"(\w+) (\d+) s", line)}
    return {"wall_s": wall, **{p: phases.get(p, 0.0) for p in PHASES}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--commits", nargs=2, default=["5f6735c", "HEAD"])
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--note", default="", help="a sentence on how the runs shared the CPU")
    args = parser.parse_args()
    shas = [subprocess.run(["git", "rev-parse", "--short", c], cwd=ROOT, text=True,
                           capture_output=True, check=True).stdout.strip() for c in args.commits]
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        trees = {}
        for sha in shas:
            tree = Path(scratch) / sha
            subprocess.run(["git", "worktree", "add", "-f", "--detach", str(tree), sha], cwd=ROOT,
                           check=True, capture_output=True)
            trees[sha] = tree
        try:
            for round_ in range(args.rounds):
                for sha in shas:
                    out = Path(scratch) / "runs" / f"{sha}-{round_}"
                    rows.append({"commit": sha, "round": round_,
                                 **run_demo(trees[sha], args.steps, out)})
                    print(rows[-1], flush=True)
        finally:
            for tree in trees.values():
                subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT,
                               capture_output=True)
    lines = ["# The demo at two commits, one machine", "",
             "Command: `python benchmarks/speed/demo_commits.py "
             f"--commits {' '.join(args.commits)} "
             f"--steps {args.steps} --rounds {args.rounds}`", "",
             f"Machine: {describe()}; one thread a run, the commits alternating. "
             f"{args.note}".rstrip(), "",
             f"Each run: the commit's own `make demo` with `--steps {args.steps}`; seconds by "
             "the demo's closing line (generation and update: the training steps; evaluation: "
             "500 x 4 held-out before and after and the validation points).", "",
             "| commit | round | generation | update | evaluation | other | wall |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['commit']} | {r['round']} | " + " | ".join(
            f"{r[p]:.0f}" for p in PHASES) + f" | {r['wall_s']:.0f} |")
    write_results("demo_commits", lines, rows)


if __name__ == "__main__":
    main()
