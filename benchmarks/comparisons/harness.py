"""The paired comparison harness: envs x workflows x algorithms x seeds on identical task
splits and an identical budget of generated samples (every run: the same steps x tasks
per step x group size, the same held-out tasks and k).

    python benchmarks/comparisons/harness.py --preset smoke --out runs/harness-smoke
    python benchmarks/comparisons/harness.py --preset small --out runs/harness-small --workers 2

The runs of one env/workflow pair start from one policy (for the tiny model: one warm
start per pair, built once), and the runs of one pair and seed share their "before"
evaluation and their random numbers, so step 0 of every algorithm samples the very same
rollouts: the algorithms differ only in what they do with them.

Writes, under ``--out``:
- ``results.jsonl``: one row per run and checkpoint ("before" = the shared starting
  policy, "after" = the trained one) with avg@k, pass@k, per-task accuracy, tokens and
  tool calls per task, token-normalized utility, gradient-norm CV, mean active-set size
  and events dropped;
- ``table.md``: mean ± std over seeds per env/workflow and algorithm, the macro average
  over pairs, SRPO against each baseline paired by seed and task, and the kappa ablation;
- ``learning_curves.png`` (training accuracy per step, per algorithm, mean over seeds)
  and ``accuracy_vs_tokens.png`` (held-out avg@k against generated tokens spent).

Presets: ``smoke`` (a fresh untrained tiny policy, 2 algorithms, 2 steps; a test runs it),
``small`` (the warm-started tiny policy, both envs, parallel and division-of-labor
workflows, every algorithm, 3 seeds), ``routing`` (mode switching: the routed workflow,
with and without the team cost, against fixed K = 1 and fixed K = K_max on the same
budget and starting policy), ``compare`` (SRPO against every baseline on three pairs
with the demo's settings, 3 seeds, twins for the noise floor, single-agent references
and verdicts: ``srpo_bench/harness/compare.py``) and ``paper`` (a Qwen-class model with
the vLLM backend on a GPU).

``--report`` runs nothing and writes the table and plots over the runs already finished
(a preset that spans sittings reports as it goes).

A pair is ``(env, workflow)``, or ``(env, label)`` with the label's settings in the
preset's ``variants`` (a workflow and config overrides, e.g. the routed workflow with a
cost, or a fixed K); ``warm_pair`` there names the pair whose warm start it shares.
Finished runs are kept, so an interrupted harness picks up where it stopped when
started again with the same ``--out``.

``--retable FOLDER ...`` runs nothing and rewrites those folders' ``table.md`` from their
committed ``results.jsonl`` under today's verdict rule.

This file parses the arguments; the harness itself is the package ``srpo_bench.harness``
(``presets.py``: the presets; ``runner.py``: running one; ``report.py``: the table;
``plots.py``, ``compare.py``: the figures and the comparison's verdicts).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from srpo_bench.harness import PRESETS, retable, run_preset


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", choices=sorted(PRESETS), default="smoke")
    parser.add_argument("--out", default="")
    parser.add_argument("--workers", type=int, default=1,
                        help="runs in parallel, one process and one thread each")
    parser.add_argument("--envs", nargs="*", default=[],
                        help="run only the preset's pairs of these env ids")
    parser.add_argument("--labels", nargs="*", default=[],
                        help="run only the preset's pairs with these workflow labels")
    parser.add_argument("--seeds", nargs="*", type=int, default=[],
                        help="run only these of the preset's seeds")
    parser.add_argument("--report", action="store_true",
                        help="run nothing: write the table and plots over the finished runs")
    parser.add_argument("--retable", nargs="+", type=Path, default=[], metavar="FOLDER",
                        help="run nothing: rewrite these folders' table.md from their "
                        "results.jsonl under today's verdict rule")
    args = parser.parse_args()
    if args.retable:
        for folder in args.retable:
            retable(folder)
            print(f"rewrote {folder / 'table.md'}")
        return
    if args.workers < 1:
        sys.exit(f"--workers={args.workers}: expected an int >= 1")
    known = {env for env, _ in PRESETS[args.preset]["pairs"]}
    if set(args.envs) - known:
        sys.exit(f"--envs={args.envs}: expected env ids of the {args.preset} preset, "
                 f"{sorted(known)}")
    labels = {label for _, label in PRESETS[args.preset]["pairs"]}
    if set(args.labels) - labels:
        sys.exit(f"--labels={args.labels}: expected workflow labels of the {args.preset} "
                 f"preset, {sorted(labels)}")
    if set(args.seeds) - set(PRESETS[args.preset]["seeds"]):
        sys.exit(f"--seeds={args.seeds}: expected seeds of the {args.preset} preset, "
                 f"{PRESETS[args.preset]['seeds']}")
    out = Path(args.out or f"runs/harness-{args.preset}")
    rows = run_preset(args.preset, out, workers=args.workers, envs=tuple(args.envs),
                      report_only=args.report, labels=tuple(args.labels),
                      seeds=tuple(args.seeds))
    if rows:
        print((out / "table.md").read_text())


if __name__ == "__main__":
    main()
