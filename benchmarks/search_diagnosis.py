"""Why training accuracy rose while held-out accuracy did not (issue 26, must-hold 2).

    python benchmarks/search_diagnosis.py --workflow search_answer_verify \\
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

import numpy as np
from machine import describe, write_results
from search_track import track_config

from srpo_agents.envs import env_factory
from srpo_agents.evaluate import eval_pool, run_tasks
from srpo_agents.metrics_log import read_metrics_rows
from srpo_agents.policy import load_policy
from srpo_agents.rollout import RolloutEngine

RATES = ("searcher_gold_on_top", "answerer_right", "answerer_right_after_gold",
         "verifier_agrees", "accuracy")


def episode_rates(env, task_index: int, rollout) -> dict[str, float]:
    """One episode's role rates (NaN where the episode had no such event)."""
    gold = set(env.task(task_index).supporting_ids)
    first_hits: list[bool] = []
    answers, answers_after_gold, agrees = [], [], []
    gold_this_round = False
    for transition in rollout.transitions:
        info = transition.info
        if transition.event_type == "search":
            # a searcher whose query was malformed retrieved nothing: a miss
            retrieved = info.get("retrieved_ids") or {}
            hits = [bool(gold & set(retrieved.get(c.agent_id, ()))) for c in transition.consumed]
            if not first_hits:
                first_hits = hits or [False]
            gold_this_round = any(hits)
        if transition.event_type == "answer":
            right = bool(info.get("correct"))
            answers.append(right)
            if gold_this_round:
                answers_after_gold.append(right)
        if transition.event_type == "verify" and answers:
            agrees.append((info.get("verdict") == "accept") == answers[-1])

    def mean(values) -> float:
        return float(np.mean(values)) if values else float("nan")

    return {"searcher_gold_on_top": mean(first_hits), "answerer_right": mean(answers),
            "answerer_right_after_gold": mean(answers_after_gold),
            "verifier_agrees": mean(agrees), "accuracy": float(bool(rollout.correct))}


def per_question(engine: RolloutEngine, config, split: str, tasks: int, k: int) -> np.ndarray:
    """(questions, rates) array: each rate averaged over the question's k episodes."""
    envs = eval_pool(env_factory(config, split), 128, config.seed)
    tasks = min(tasks, envs[0].num_tasks)
    values = np.full((tasks, k, len(RATES)), np.nan)
    for t, j, env, rollout in run_tasks(engine, envs, range(tasks), k, tag=f"diag-{split}"):
        rates = episode_rates(env, t, rollout)
        values[t, j] = [rates[name] for name in RATES]
    with np.errstate(invalid="ignore"):
        return np.nanmean(values, axis=1)


def summary(rows: np.ndarray) -> dict[str, dict[str, float]]:
    out = {}
    for i, name in enumerate(RATES):
        column = rows[:, i][~np.isnan(rows[:, i])]
        out[name] = {"mean": float(column.mean()) if len(column) else float("nan"),
                     "stderr": float(column.std(ddof=1) / np.sqrt(len(column)))
                     if len(column) > 1 else float("nan"), "questions": int(len(column))}
    return out


def paired(before: np.ndarray, after: np.ndarray) -> dict[str, dict[str, float]]:
    out = {}
    for i, name in enumerate(RATES):
        both = ~np.isnan(before[:, i]) & ~np.isnan(after[:, i])
        diff = after[both, i] - before[both, i]
        out[name] = {"difference": float(diff.mean()) if both.any() else float("nan"),
                     "stderr": float(diff.std(ddof=1) / np.sqrt(both.sum()))
                     if both.sum() > 1 else float("nan"), "questions": int(both.sum())}
    return out


def training_trend(path: Path, edge: int = 5) -> dict[str, float]:
    """The training accuracy's linear trend over the steps of a run's metrics.jsonl, and
    the last ``edge`` steps' mean minus the first ``edge``'s, each with its standard
    error from the steps' scatter about the line."""
    rows = [r for r in read_metrics_rows(path) if "accuracy" in r]
    if len(rows) < 2 * edge + 1:
        raise ValueError(f"--metrics {path}: {len(rows)} training steps; expected at least "
                         f"{2 * edge + 1}")
    steps = np.array([r["step"] for r in rows], dtype=float)
    accuracy = np.array([r["accuracy"] for r in rows])
    slope, intercept = np.polyfit(steps, accuracy, 1)
    residual = accuracy - (slope * steps + intercept)
    scatter = residual.std(ddof=2)
    slope_se = scatter / np.sqrt(((steps - steps.mean()) ** 2).sum())
    span = steps[-1] - steps[0]
    return {"steps": len(rows), "first": float(accuracy[:edge].mean()),
            "last": float(accuracy[-edge:].mean()),
            "last_minus_first": float(accuracy[-edge:].mean() - accuracy[:edge].mean()),
            "last_minus_first_stderr": float(scatter * np.sqrt(2 / edge)),
            "fitted_rise": float(slope * span), "fitted_rise_stderr": float(slope_se * span),
            "step_scatter": float(scatter)}


def _row(label: str, stats: dict) -> str:
    cells = [f"{stats[n]['mean']:.3f} ± {stats[n]['stderr']:.3f}" for n in RATES]
    return f"| {label} | " + " | ".join(cells) + " |"


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
             f"Command: `python benchmarks/search_diagnosis.py --workflow {args.workflow} "
             f"--policy {args.policy}" + (f" --after {args.after}" if args.after else "")
             + (f" --metrics {args.metrics}" if args.metrics else "")
             + f" --tasks {args.tasks} --k {args.k} --seed {args.seed}`", "",
             f"Machine: {describe()}.", "",
             f"## 1. The policy before RL on each split ({args.tasks} questions x {args.k})",
             "", header, rule]
    lines += [_row(split, stats) for split, stats in data["splits"].items()]
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
                  _row("before", data["splits"]["test"]), _row("after", data["test_after"]),
                  "| after - before | " + " | ".join(
                      f"{d['difference']:+.3f} ± {d['stderr']:.3f}"
                      for d in data["test_after_minus_before"].values()) + " |"]
    lines += ["", "± is the standard error over questions (of the paired per-question "
              "difference for after - before); a role's rate counts the questions where "
              "that role acted."]
    write_results(args.name, lines, data)


if __name__ == "__main__":
    main()
