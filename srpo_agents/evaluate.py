"""Held-out evaluation: avg@k, pass@k, EM/F1, tokens and tool calls per task.

k episodes are run per task (sampling at the run's temperature). Per task, avg@k is the
mean correctness of its k episodes and pass@k whether any was correct; both are then
averaged over tasks, with their standard error over tasks (std / sqrt(n)) so every
before/after figure comes with its noise. "Tokens per task" is the mean number of
generated team tokens of one episode (all agents, all events), "tool calls per task"
likewise for search queries.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from srpo_agents.rollout import RolloutEngine
from srpo_agents.routing_stats import routing_summary


def episode_correct(rollout) -> bool:
    return bool(rollout.correct) if rollout.correct is not None else rollout.reward > 0


def run_tasks(engine: RolloutEngine, envs: Sequence, task_indices: Sequence[int], k: int,
              tag: str = "eval") -> Iterator[tuple[int, int, Any, Any]]:
    """``(task, sample, env, rollout)`` for ``k`` episodes of each task, played on the
    given env pool (reused in chunks of its size); ``env`` is the one that played it."""
    jobs = [(t, j) for t in task_indices for j in range(k)]
    for start in range(0, len(jobs), len(envs)):
        chunk = jobs[start:start + len(envs)]
        pool = envs[:len(chunk)]
        options = [{"task_index": t, "episode_id": f"{tag}-t{t}-k{j}"} for t, j in chunk]
        for (t, j), env, rollout in zip(chunk, pool, engine.run(pool, options), strict=True):
            yield t, j, env, rollout


def evaluate(engine: RolloutEngine, envs: Sequence, task_indices: Sequence[int], k: int,
             tag: str = "eval") -> dict[str, Any]:
    """Run ``k`` episodes of each task on the given env pool (reused in chunks)."""
    correct: dict[int, list[bool]] = {t: [] for t in task_indices}
    tokens, calls, em, f1, played = [], [], [], [], []
    for t, _, _, rollout in run_tasks(engine, envs, task_indices, k, tag):
        played.append(rollout)
        correct[t].append(episode_correct(rollout))
        tokens.append(rollout.generated_tokens)
        calls.append(rollout.tool_calls)
        final = rollout.transitions[-1].info if rollout.transitions else {}
        if "em" in final:
            em.append(float(final["em"]))
            f1.append(float(final.get("f1", 0.0)))
    per_task_avg = np.array([np.mean(v) for v in correct.values()])
    per_task_pass = np.array([float(any(v)) for v in correct.values()])
    n = len(per_task_avg)

    def stderr(values: np.ndarray) -> float:
        return float(values.std(ddof=1) / math.sqrt(n)) if n > 1 else 0.0

    result = {"k": k, "tasks": n, "avg_at_k": float(per_task_avg.mean()),
              "avg_at_k_stderr": stderr(per_task_avg), "pass_at_k": float(per_task_pass.mean()),
              "pass_at_k_stderr": stderr(per_task_pass),
              "tokens_per_task": float(np.mean(tokens)),
              "tool_calls_per_task": float(np.mean(calls)),
              # per task, in task order: lets two runs on the same tasks be compared
              # pairwise, which is far less noisy than comparing their two means
              "per_task_avg": [float(v) for v in per_task_avg],
              "per_task_pass": [float(v) for v in per_task_pass]}
    if em:
        result.update(em=float(np.mean(em)), f1=float(np.mean(f1)))
    routing = routing_summary(played, episode_correct)
    if routing:
        result["routing"] = routing
    return result


def eval_pool(make_env: Callable[[int], Any], size: int, seed: int) -> list:
    return [make_env(seed * 1_000_003 + i) for i in range(size)]


def paired_difference(before: dict[str, Any], after: dict[str, Any]) -> dict[str, float]:
    """After minus before on the same tasks, with the standard error of the per-task
    differences (paired: task difficulty cancels, so it is far smaller than the two
    results' own standard errors combined). Keys: ``avg_at_k``, ``avg_at_k_stderr``,
    ``pass_at_k``, ``pass_at_k_stderr``, ``tasks``, and ``avg_at_k_z`` (the difference
    in standard errors)."""
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
