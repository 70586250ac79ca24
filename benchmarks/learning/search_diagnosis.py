"""Why training accuracy rose while held-out accuracy did not (issue 26, must-hold 2).

    python benchmarks/learning/search_diagnosis.py --workflow search_answer_verify \\
        --policy benchmarks/warmstarts/SRPO-Search-v0-search_answer_verify/warmstart \\
        [--after RUN/policy] [--metrics RUN/metrics.jsonl] [--tasks 500] [--k 4]

Three questions, each answered by a measurement:

1. **Do the splits differ?** The same policy plays the first ``--tasks`` questions of
   the train, validation and test splits (the world's people are disjoint between
   splits; names, prompts and passage order are made by one generator). A split
   difference in names, prompts or passage order would show as a gap in accuracy or in
   a role's rate between splits beyond their standard errors.
2. **Was the training curve's rise real?** The training accuracy of each step (its
   fresh train questions, sampled with replacement) is fit by a line; the rise over the
   run and the difference of the first and last five steps are given with standard
   errors from the steps' scatter about the line.
3. **Which role changed?** With ``--after``, the role-by-role rates of the policy after
   RL beside those before, on the test split, each difference with the standard error
   of the paired per-question difference.

Role rates (per episode, then averaged per question): searcher, the first round's
queries with the gold document on top; answerer (search_answer_verify), answers right,
and right when the round's search found the gold document; verifier, verdicts that
match the proposed answer (accept right, reject wrong); final accuracy. Writes
``benchmarks/results/search_diagnosis.md`` and ``.json``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from srpo_agents.models.policy import load_policy
from srpo_agents.rollout.engine import RolloutEngine
from srpo_bench.machine import describe, write_results
from srpo_bench.search_diagnosis import (
    RATES,
    paired,
    per_question,
    rate_row,
    summary,
    training_trend,
)
from srpo_bench.search_track import track_config


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workflow", default="search_answer_verify")
    parser.add_argument("--policy", required=True, help="the policy before RL (a folder)")
    parser.add_argument("--after", help="the policy after RL (a folder)")
    parser.add_argument("--metrics", help="the RL run's metrics.jsonl (its training curve)")
    parser.add_argument("--splits", nargs="+", default=["train", "validation", "test"])
    parser.add_argument("--tasks", type=int, default=500)
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--name", default="search_diagnosis")
    args = parser.parse_args()
    config = track_config(args.workflow, "runs/search-diagnosis", 1, 1.0, args.seed)
    data: dict = {"workflow": args.workflow, "tasks": args.tasks, "k": args.k}
    engine = RolloutEngine(load_policy(args.policy), max_new_tokens=config.max_new_tokens,
                           seed=args.seed)
    before = {split: per_question(engine, config, split, args.tasks, args.k)
              for split in args.splits}
    data["splits"] = {split: summary(rows) for split, rows in before.items()}
    header = "| | " + " | ".join(RATES) + " |"
    rule = "|---|" + "---:|" * len(RATES)
    lines = ["# Search: train against held-out, role by role", "",
             f"Command: `python benchmarks/learning/search_diagnosis.py --workflow {args.workflow} "
             f"--policy {args.policy}" + (f" --after {args.after}" if args.after else "")
             + (f" --metrics {args.metrics}" if args.metrics else "")
             + f" --tasks {args.tasks} --k {args.k} --seed {args.seed}`", "",
             f"Machine: {describe()}.", "",
             f"## 1. The policy before RL on each split ({args.tasks} questions x {args.k})",
             "", header, rule]
    lines += [rate_row(split, stats) for split, stats in data["splits"].items()]
    if args.metrics:
        trend = training_trend(Path(args.metrics))
        data["training_trend"] = trend
        lines += ["", "## 2. The training curve", "",
                  f"{trend['steps']} steps; training accuracy of the first 5 steps "
                  f"{trend['first']:.3f}, of the last 5 {trend['last']:.3f}: "
                  f"{trend['last_minus_first']:+.3f} ± {trend['last_minus_first_stderr']:.3f}; "
                  f"the fitted line rises {trend['fitted_rise']:+.3f} ± "
                  f"{trend['fitted_rise_stderr']:.3f} over the run (steps scatter "
                  f"{trend['step_scatter']:.3f} about it)."]
    if args.after:
        engine = RolloutEngine(load_policy(args.after), max_new_tokens=config.max_new_tokens,
                               seed=args.seed)
        after = per_question(engine, config, "test", args.tasks, args.k)
        data["test_after"] = summary(after)
        data["test_after_minus_before"] = paired(before["test"], after)
        lines += ["", "## 3. Test split, before and after RL", "", header, rule,
                  rate_row("before", data["splits"]["test"]), rate_row("after", data["test_after"]),
                  "| after - before | " + " | ".join(
                      f"{d['difference']:+.3f} ± {d['stderr']:.3f}"
                      for d in data["test_after_minus_before"].values()) + " |"]
    lines += ["", "± is the standard error over questions (of the paired per-question "
              "difference for after - before); a role's rate counts the questions where "
              "that role acted."]
    write_results(args.name, lines, data)


if __name__ == "__main__":
    main()
