"""The measurements of ``benchmarks/learning/search_diagnosis.py`` (why training accuracy rose
while held-out accuracy did not): the role rates of one episode read off its
transitions, their per-question means on a split, paired differences, and the training
curve's linear trend with its standard error. The command's docstring describes them.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from srpo_agents.rollout.engine import RolloutEngine
from srpo_agents.rollout.envs import env_factory, env_pool
from srpo_agents.running.evaluate import run_tasks
from srpo_agents.running.metrics_log import read_metrics_rows

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
    envs = env_pool(env_factory(config, split), 128, config.seed)
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


def rate_row(label: str, stats: dict) -> str:
    """A table row of ``summary``'s rates: mean ± standard error per rate."""
    cells = [f"{stats[n]['mean']:.3f} ± {stats[n]['stderr']:.3f}" for n in RATES]
    return f"| {label} | " + " | ".join(cells) + " |"
