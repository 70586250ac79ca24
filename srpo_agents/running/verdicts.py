"""Every verdict the project prints: tables, reports and the CLI decide "ahead", "behind"
or "learned" here, and nowhere else.

Two kinds of question, two rules:

**Is A better than B (an algorithm, a workflow, a setting)?** ``difference`` compares
runs of A and B on the same held-out tasks, paired by seed and by task within a seed.
Training is noisier than evaluation (two runs of one setting from one start differ by
more than their per-task standard errors), so the answer must include the spread of
seeds:

- several seeds: the standard error is the larger of a two-level bootstrap (seeds with
  replacement, then tasks within each drawn seed) and the between-seed standard error;
  "ahead"/"behind" only beyond ``bar(seeds)`` of them (max(2, t), t the two-sided 95%
  quantile of Student's t with seeds - 1 degrees of freedom: 4.30 at 3 seeds), and only
  when every seed agrees in sign. At 2 standard errors a simulated null difference was
  called about once in seven comparisons over 3 seeds
  (``benchmarks/validity/verdict_false_calls.py``).
- one seed: the per-task standard error is reported, and the difference is "not called":
  it says nothing of run-to-run spread. The exception is a pair whose noise floor was
  measured (``Floor``: twin runs that differ only in their random draws); then the
  one-seed difference must clear that floor's standard error by the same bar.

Either way the result says how many seeds would decide it (``seeds_to_separate``; for one
seed with no floor, a lower bound from the per-task SE alone).

**Did this run's policy improve? Does it treat hard tasks differently?** ``task_difference``
is after minus before of one trained policy on the same tasks. The policy is fixed; only
the evaluation's samples vary, so its per-task standard error is the whole error, and
``cleared`` applies a bar to it (the demo's). ``contrast`` calls a difference between
groups of tasks within one evaluation (the router's team size on hard against easy
tasks) beyond 2 of its standard errors. These are statements about one trained policy,
never about the algorithm that produced it.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any

import numpy as np

BOOTSTRAP_DRAWS = 4000
# Two-sided 95% quantiles of Student's t by degrees of freedom (beyond 10: 2 is used).
T_975 = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31, 9: 2.26,
         10: 2.23}
NOT_CALLED = "not called: one seed"


def bar_df(df: int) -> float:
    """Standard errors a difference must clear when its error has ``df`` degrees of freedom."""
    return max(2.0, T_975.get(df, 2.0))


def bar(seeds: int) -> float:
    """How many standard errors a difference over ``seeds`` seeds must clear."""
    return bar_df(seeds - 1)


@dataclass(frozen=True)
class Floor:
    """A pair's measured run-to-run spread: ``sigma``, one run's spread around its expected
    gain, from ``twin_seeds`` twin pairs. Two independent runs differ with sd sqrt(2) sigma."""
    sigma: float
    twin_seeds: int

    @classmethod
    def from_twin_gaps(cls, gaps: list[float]) -> Floor:
        """Each gap is a twin pair's difference, of variance 2 sigma^2."""
        if len(gaps) < 2:
            raise ValueError(f"a noise floor needs at least 2 twin pairs, got {len(gaps)}")
        return cls(math.sqrt(statistics.mean(g * g for g in gaps) / 2), len(gaps))


def seeds_for(delta: float, sd: float) -> int | None:
    """Seeds at which a true difference ``delta`` clears the bar when one seed's difference
    has spread ``sd`` (None: more than 1,000)."""
    return next((n for n in range(2, 1001) if abs(delta) > bar(n) * sd / math.sqrt(n)), None)


def _by_seed(rows: list[dict]) -> dict[int, dict]:
    return {r["seed"]: r for r in rows}


def common_seeds(rows_a: list[dict], rows_b: list[dict]) -> list[int]:
    return sorted(set(_by_seed(rows_a)) & set(_by_seed(rows_b)))


def _paired(rows_a, rows_b, key, key_b) -> tuple[list[int], list[np.ndarray]]:
    a, b = _by_seed(rows_a), _by_seed(rows_b)
    seeds = common_seeds(rows_a, rows_b)
    if not seeds:
        raise ValueError("difference: the two sets of runs share no seed")
    diffs = []
    for s in seeds:
        x, y = np.asarray(a[s][key], float), np.asarray(b[s][key_b or key], float)
        if x.shape != y.shape:
            raise ValueError(f"seed {s}: {len(x)} tasks against {len(y)}; a paired "
                             f"difference needs the same held-out tasks")
        diffs.append(x - y)
    return seeds, diffs


def _bootstrap_se(diffs: list[np.ndarray]) -> float:
    rng = np.random.default_rng(0)
    stack = np.stack(diffs)                                            # [S, n]
    n_seeds, n_tasks = stack.shape
    draws = np.empty(BOOTSTRAP_DRAWS)
    for i in range(BOOTSTRAP_DRAWS):
        rows = rng.integers(0, n_seeds, n_seeds)
        cols = rng.integers(0, n_tasks, (n_seeds, n_tasks))
        draws[i] = stack[rows[:, None], cols].mean()
    return float(draws.std(ddof=1))


def difference(rows_a: list[dict], rows_b: list[dict], key: str = "per_task_avg",
               key_b: str | None = None, floor: Floor | None = None,
               independent: bool = True) -> dict[str, Any]:
    """A minus B over their common seeds (see the module docstring). ``key`` names each
    row's per-task list (``key_b`` B's, when it differs). ``floor``: the pair's measured
    noise, which lets a one-seed difference be called; ``independent``: A and B are two
    training runs (their one-seed difference spreads sqrt(2) sigma), not a run against
    its fixed start (sigma)."""
    seeds, diffs = _paired(rows_a, rows_b, key, key_b)
    per_seed = [float(d.mean()) for d in diffs]
    per_seed_se = [float(d.std(ddof=1) / math.sqrt(len(d))) if len(d) > 1 else 0.0
                   for d in diffs]
    pooled = statistics.mean(per_seed)
    out = {"diff": pooled, "per_seed": per_seed, "per_seed_se": per_seed_se, "seeds": seeds,
           "seeds_to_separate": None, "lower_bound": False}
    if len(seeds) > 1:
        between = statistics.stdev(per_seed) / math.sqrt(len(seeds))
        boot = _bootstrap_se(diffs)
        se = max(between, boot)
        agree = all(d > 0 for d in per_seed) or all(d < 0 for d in per_seed)
        called = agree and abs(pooled) > bar(len(seeds)) * se
        out.update(se=se, between_se=between, bootstrap_se=boot, bar=bar(len(seeds)),
                   rule="seeds", verdict=_call(pooled) if called else "within noise")
        if not called and pooled and se:
            # the standard error shrinking as 1/sqrt(seeds)
            out["seeds_to_separate"] = next(
                (n for n in range(len(seeds) + 1, 1001)
                 if abs(pooled) > bar(n) * se * math.sqrt(len(seeds) / n)), None)
        return out
    task_se = per_seed_se[0]
    if floor is None:
        out.update(se=task_se, bar=None, rule="one seed", verdict=NOT_CALLED,
                   seeds_to_separate=seeds_for(pooled, task_se) if pooled else None,
                   lower_bound=True)
        return out
    sd = floor.sigma * (math.sqrt(2) if independent else 1.0)
    se = max(task_se, sd)
    called = abs(pooled) > bar_df(floor.twin_seeds) * se
    out.update(se=se, task_se=task_se, bar=bar_df(floor.twin_seeds), rule="one seed, floor",
               verdict=_call(pooled) if called else "within noise",
               seeds_to_separate=None if called or not pooled else seeds_for(pooled, sd))
    return out


def _call(diff: float) -> str:
    return "ahead" if diff > 0 else "behind"


def diff_cell(d: dict) -> str:
    """One table cell: the difference, its error, the seeds, the verdict, and what would
    decide it."""
    if d["rule"] == "one seed":
        cell = f"{d['diff']:+.3f} ± {d['se']:.3f} (one seed, per-task SE) **{NOT_CALLED}**"
        need = d["seeds_to_separate"]
        return cell + (f"; at least {need} seeds would decide it" if need else
                       "; over 1,000 seeds would decide it" if d["diff"] else "")
    if d["rule"] == "one seed, floor":
        cell = (f"{d['diff']:+.3f} ± {d['se']:.3f} (one seed against the twins' noise floor)"
                f" **{d['verdict']}**")
    else:
        seeds = " ".join(f"{x:+.3f}" for x in d["per_seed"])
        cell = f"{d['diff']:+.3f} ± {d['se']:.3f} (seeds: {seeds}) **{d['verdict']}**"
    if d["seeds_to_separate"]:
        cell += f"; ~{d['seeds_to_separate']} seeds would separate it"
    elif d["verdict"] == "within noise" and d["diff"]:
        cell += "; over 1,000 seeds would separate it"
    return cell


def task_difference(before: dict[str, Any], after: dict[str, Any]) -> dict[str, float]:
    """After minus before of one run's policy on the same tasks, with the standard error of
    the per-task differences (paired: task difficulty cancels). Keys: ``avg_at_k``,
    ``avg_at_k_stderr``, ``pass_at_k``, ``pass_at_k_stderr``, ``tasks``, and ``avg_at_k_z``
    (the difference in standard errors)."""
    out: dict[str, float] = {}
    for key in ("avg", "pass"):
        a = np.array(after[f"per_task_{key}"])
        b = np.array(before[f"per_task_{key}"])
        if a.shape != b.shape:
            raise ValueError(f"per_task_{key}: {len(b)} tasks before, {len(a)} after; a "
                             f"paired difference needs the same tasks")
        diff = a - b
        n = len(diff)
        out[f"{key}_at_k"] = float(diff.mean())
        out[f"{key}_at_k_stderr"] = float(diff.std(ddof=1) / math.sqrt(n)) if n > 1 else 0.0
    out["tasks"] = len(before["per_task_avg"])
    se = out["avg_at_k_stderr"]
    out["avg_at_k_z"] = out["avg_at_k"] / se if se > 0 else 0.0
    return out


def cleared(gain: dict[str, float], min_gain: float, min_z: float) -> bool:
    """Whether one run's ``task_difference`` clears a bar: at least ``min_gain`` and at
    least ``min_z`` of its per-task standard errors (about this run, not its algorithm)."""
    return gain["avg_at_k"] >= min_gain and gain["avg_at_k_z"] >= min_z


def contrast(diff: float, se: float) -> str:
    """"higher", "lower" or "within noise": a difference between two groups of tasks in
    one evaluation of one policy, called beyond 2 standard errors."""
    if abs(diff) > 2 * se:
        return "higher" if diff > 0 else "lower"
    return "within noise"
