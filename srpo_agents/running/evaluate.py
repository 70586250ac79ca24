"""Held-out evaluation: avg@k, pass@k, EM/F1, tokens and tool calls per task.

k episodes are run per task (sampling at the run's temperature). Per task, avg@k is the
mean correctness of its k episodes and pass@k whether any was correct; both are then
averaged over tasks, with their standard error over tasks (std / sqrt(n)) so every
before/after figure comes with its noise. "Tokens per task" is the mean number of
generated team tokens of one episode (all agents, all events), "tool calls per task"
likewise for search queries. Where the env says whether the final answer was read from a
``\\boxed{}`` (math's ``boxed``), ``boxed_rate`` is the share of episodes where it was,
and ``boxed_accuracy`` the accuracy among those (a gain in format alone moves the first).
``answer_anywhere_rate`` (math's ``answer_anywhere``): the share of episodes whose team
wrote the gold answer somewhere, as any box or number; a trained accuracy above the
untrained team's rate is more than a better reading of answers it already wrote.
``cut_off_rate`` is the share of agent outputs that hit ``max_new_tokens`` before their
end: near 1, the scores say more about the token cap than about the model.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from srpo_agents.config import TrainConfig
from srpo_agents.models.registry import prepare_policy
from srpo_agents.rollout.engine import RolloutEngine, engine_for
from srpo_agents.rollout.envs import env_factory, env_pool
from srpo_agents.running.progress import Progress
from srpo_agents.running.routing_stats import routing_summary


def episode_correct(rollout) -> bool:
    return bool(rollout.correct) if rollout.correct is not None else rollout.reward > 0


def vote_key(rollout) -> str | None:
    """What a majority vote over independent episodes counts: "right" for a correct
    episode (equivalent right answers written differently pool), else the answer the
    env read in the env's own voting form where it gives one (math ``answer_key``: "2"
    and "2.0" pool), else as written (math ``final_answer``, Countdown ``value``); None
    when it read none (an abstention)."""
    if episode_correct(rollout):
        return "right"
    final = rollout.transitions[-1].info if rollout.transitions else {}
    answer = final.get("answer_key", final.get("final_answer", final.get("value")))
    return None if answer is None else f"answer:{answer}"


def solvers_right(rollout) -> tuple[int, int] | None:
    """(solvers right, solvers) of the episode's first parallel event (its info's
    ``member_correct``), or None for an episode without one."""
    for transition in rollout.transitions:
        members = transition.info.get("member_correct")
        if members is not None:
            flags = list(members.values()) if isinstance(members, Mapping) else list(members)
            return sum(bool(f) for f in flags), len(flags)
    return None


def majority_at(votes: Sequence[str | None], size: int) -> float:
    """Expected correctness of a plurality vote over ``size`` of the given episodes drawn
    without replacement (exact: the mean over every subset, as pass@k's estimator uses
    every subset), a tie credited by the share of right answers among the tied ones and
    an all-abstaining subset wrong. ``votes``: ``vote_key`` of each episode."""
    from itertools import combinations

    if not 1 <= size <= len(votes):
        raise ValueError(f"size={size!r}: expected 1..{len(votes)} (the episodes voting)")
    scores = []
    for subset in combinations(votes, size):
        counts: dict[str, int] = {}
        for key in subset:
            if key is not None:
                counts[key] = counts.get(key, 0) + 1
        if not counts:
            scores.append(0.0)
            continue
        top = max(counts.values())
        tied = [key for key, n in counts.items() if n == top]
        scores.append(tied.count("right") / len(tied))
    return float(np.mean(scores))


def run_tasks(engine: RolloutEngine, envs: Sequence, task_indices: Sequence[int], k: int,
              tag: str = "eval", chunk_size: int | None = None
              ) -> Iterator[tuple[int, int, Any, Any]]:
    """``(task, sample, env, rollout)`` for ``k`` episodes of each task, played on the
    given env pool (reused in chunks of its size, or of ``chunk_size`` when smaller);
    ``env`` is the one that played it. They are held-out episodes: sampled at the
    engine's ``eval_temperature`` when set."""
    jobs = [(t, j) for t in task_indices for j in range(k)]
    evaluating = getattr(engine, "evaluating", contextlib.nullcontext)
    size = min(len(envs), chunk_size or len(envs))
    for start in range(0, len(jobs), size):
        chunk = jobs[start:start + size]
        pool = envs[:len(chunk)]
        options = [{"task_index": t, "episode_id": f"{tag}-t{t}-k{j}"} for t, j in chunk]
        with evaluating():
            rollouts = engine.run(pool, options)
        for (t, j), env, rollout in zip(chunk, pool, rollouts, strict=True):
            yield t, j, env, rollout


def evaluate(engine: RolloutEngine, envs: Sequence, task_indices: Sequence[int], k: int,
             tag: str = "eval", votes: bool = False, progress: str = "",
             chunk_size: int | None = None, log=None, keep: list | None = None,
             helpers=None, split: str = "test") -> dict[str, Any]:
    """Run ``k`` episodes of each task on the given env pool (reused in chunks).

    Teams with a parallel event also get ``solver_majority`` (the share of episodes in
    which more than half of the solvers were right: the team's ceiling if its last agent
    followed the majority) and ``solver_any`` (at least one right). ``votes``: also
    ``per_task_votes``, each episode's ``vote_key`` per task, for majority votes.
    ``progress``: the label of the progress over the episodes (none when empty): a bar in
    a terminal, else a line to ``log`` (stderr by default) every 30 s. ``chunk_size``:
    most episodes played at once (default: the pool's size); smaller chunks update the
    progress more often. ``keep``: a list the played episodes are added to.
    ``helpers``: an ``EvalProcesses`` that plays a share of the tasks in processes of
    their own, from the same ``split``'s pool (``srpo_agents.running.eval_process``);
    the figures are computed over all episodes in task order, as here alone."""
    shown = Progress(len(task_indices) * k, progress, "episode", log) if progress else None
    # a chunk's episodes finish together: counted as one, a line's rate and ETA are the
    # chunks' (counted one by one, the first line after a chunk is the rate of one)
    chunk = min(len(envs), chunk_size or len(envs))

    def play_here(indices: Sequence[int]) -> Iterator[tuple[int, int, Any]]:
        total = len(indices) * k
        for n, (t, j, _, rollout) in enumerate(run_tasks(engine, envs, indices, k, tag,
                                                         chunk_size), start=1):
            if shown is not None and (n % chunk == 0 or n == total):
                shown.update(chunk if n % chunk == 0 else n % chunk)
            yield t, j, rollout

    if helpers is None:
        episodes = play_here(task_indices)
    else:
        episodes = helpers.spread(play_here, task_indices, k, tag, split)
        if shown is not None:  # the helpers' episodes, counted when they arrive
            shown.update(len(task_indices) * k - shown.done)
    result = summarize(episodes, task_indices, k, votes, keep)
    if shown is not None:
        shown.close()
    return result


def summarize(episodes: Iterable[tuple[int, int, Any]], task_indices: Sequence[int], k: int,
              votes: bool = False, keep: list | None = None) -> dict[str, Any]:
    """``evaluate``'s figures over ``(task, sample, rollout)`` episodes in task order."""
    correct: dict[int, list[bool]] = {t: [] for t in task_indices}
    keys: dict[int, list[str | None]] = {t: [] for t in task_indices}
    tokens, calls, em, f1, played, solvers, boxes = [], [], [], [], [], [], []
    cut_off, boxed_right = [], []   # boxed_right: correctness of the boxed episodes
    anywhere = []
    for t, _, rollout in episodes:
        played.append(rollout)
        cut_off += [not sample.finished for sample in rollout.samples.values()]
        correct[t].append(episode_correct(rollout))
        keys[t].append(vote_key(rollout))
        right = solvers_right(rollout)
        if right is not None:
            solvers.append(right)
        tokens.append(rollout.generated_tokens)
        calls.append(rollout.tool_calls)
        final = rollout.transitions[-1].info if rollout.transitions else {}
        if "boxed" in final:
            boxes.append(bool(final["boxed"]))
            if final["boxed"]:
                boxed_right.append(episode_correct(rollout))
        if "answer_anywhere" in final:
            anywhere.append(bool(final["answer_anywhere"]))
        if "em" in final:
            em.append(float(final["em"]))
            f1.append(float(final.get("f1", 0.0)))
    if keep is not None:
        keep.extend(played)
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
    if boxes:
        result["boxed_rate"] = float(np.mean(boxes))
        # accuracy among readable answers: what a gain is made of besides format
        result["boxed_accuracy"] = float(np.mean(boxed_right)) if boxed_right else 0.0
    if anywhere:
        result["answer_anywhere_rate"] = float(np.mean(anywhere))
    if cut_off:
        result["cut_off_rate"] = float(np.mean(cut_off))
    if solvers:
        result.update(solver_majority=float(np.mean([2 * r > n for r, n in solvers])),
                      solver_any=float(np.mean([r > 0 for r, _ in solvers])))
    if votes:
        result["per_task_votes"] = [keys[t] for t in task_indices]
    routing = routing_summary(played, episode_correct)
    if routing:
        result["routing"] = routing
    return result


def task_count(envs: list) -> int | None:
    """Distinct tasks of an env pool, or None for an endless generator."""
    return getattr(envs[0], "num_tasks", None)


def eval_indices(config: TrainConfig, envs: list, wanted: int | None = None,
                  log=None, split: str = "test") -> list[int]:
    """The first ``wanted`` (default ``eval_tasks``) task indices of a held-out pool, or
    all of its distinct tasks when it has fewer (each is then used once, and ``log``
    says how many)."""
    wanted = config.eval_tasks if wanted is None else wanted
    counter = getattr(envs[0], "distinct_tasks", None)
    total = counter(wanted) if counter is not None else task_count(envs)
    n = wanted if total is None else min(wanted, total)
    if n < wanted and log is not None:
        log(f"{split} split: {n} distinct tasks (asked for {wanted}); each is used once")
    warning = getattr(envs[0], "held_out_warning", lambda: None)()
    if warning and log is not None:
        log(f"warning: {warning}")
    return list(range(n))


def held_out(config: TrainConfig, token_counter=None, split: str = "test", wanted=None,
             log=None) -> tuple[list, list[int]]:
    """The run's held-out env pool and task indices (the same for every algorithm):
    the ``test`` split, read only by the evaluations before and after training, or the
    ``validation`` split that the evaluations during training read. ``token_counter``:
    the policy's token count, for the team cost (when it is on)."""
    envs = env_pool(env_factory(config, split, token_counter), 256,
                    config.seed + (1 if split == "test" else 2))
    return envs, eval_indices(config, envs, wanted, log, split)


def evaluate_start(config: TrainConfig, log=print, engine: RolloutEngine | None = None,
                   progress: str = "") -> dict[str, Any]:
    """The "before" evaluation of ``train`` on its own, so that runs that share a start
    (the harness: every algorithm of one env, workflow and seed) can share it too.
    ``engine``: one already built on the starting policy (so a caller that also uses it
    for other evaluations loads the model once). ``progress``: a label for its progress
    bar (none when empty)."""
    if engine is None:
        engine = engine_for(config, prepare_policy(config, Path(config.out), log)[0])
    test_envs, indices = held_out(config, engine.policy.count_tokens)
    return evaluate(engine, test_envs, indices, config.eval_k, tag="before",
                    votes=True, progress=progress)   # as TrainingRun's own "before"
