"""Held-out evaluations shared with processes of their own (``eval_processes`` N >= 1).

On the CPU a tiny or small model's generation uses a second core better in a process of
its own than as a second torch thread: the demo's "before" evaluation took 35.3 s on two
threads and 25.6 s split with one helper of one thread (``benchmarks/results/
eval_processes.md``, 2 cores). Each helper process holds a copy of the run's policies
(one torch thread), the run's held-out env pools (the test and the validation split,
built as ``evaluate.held_out`` builds them: the same tasks), and a sampler of its own,
seeded apart from the run's.

``spread`` gives each helper its share of an evaluation's tasks (every (N+1)-th task),
with the weights of the run's policies when they changed since the helper last got them,
plays the first share in this process meanwhile, and returns every episode in task
order, so ``evaluate.summarize`` computes the figures one process would compute from
the same episodes. What differs from one process is which random numbers each episode
drew (as with another sampling seed); this process's sampler then draws fewer for the
evaluation, so the training episodes after it differ too.

A helper that fails (an exception, a kill) surfaces in ``spread`` as a ``RuntimeError``
naming it; a run that dies takes its helpers with it (the pipe closes and they exit).
"""

from __future__ import annotations

import traceback
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch

from srpo_agents.rollout.engine import Rollout
from srpo_agents.rollout.files import rollout_rows, rollouts_from_rows
from srpo_agents.rollout.process import (
    STOP,
    answer,
    cpu_copy,
    load_weights,
    trainable_tensors,
)

SEED_OFFSET = 7_919_000
"""Helper i samples with the run's sampling seed + SEED_OFFSET + i (the Ray rollout
workers take + their index: far below)."""


class EvalProcesses:
    """``count`` helper processes for the held-out evaluations of one run.

    Args:
        config: the run's ``TrainConfig``.
        policy, role_policies: what the run's evaluation engine plays; each helper plays
            a copy, with the weights they hold now (version ``version``).
        version: a number that changes whenever the weights do (the run's optimizer
            steps so far).
    """

    def __init__(self, config, policy, role_policies: dict[str, Any], count: int,
                 version: int = 0):
        if count < 1:
            raise ValueError(f"eval_processes={count!r}: expected >= 1 (0 evaluates in "
                             "this process alone)")
        context = torch.multiprocessing.get_context("spawn")
        shipped = cpu_copy(policy), {role: cpu_copy(p) for role, p in role_policies.items()}
        self._helpers = []
        for index in range(count):
            conn, child = context.Pipe()
            process = context.Process(target=_serve, daemon=True, name=f"srpo-eval-{index}",
                                      args=(child, config.to_dict(), *shipped, index))
            process.start()
            child.close()
            self._helpers.append((conn, process))
        self.version = version           # the weights the helpers hold
        self._policies: dict[str, Any] = {}
        self._wanted = version

    @property
    def count(self) -> int:
        return len(self._helpers)

    def follow(self, policies: dict[str, Any], version: int) -> None:
        """Evaluate ``policies``' weights (``{SHARED: policy}`` or ``{role: policy}``)
        from the next ``spread`` on: sent then, if ``version`` moved since they last were."""
        self._policies, self._wanted = policies, version

    def spread(self, play_here: Callable[[Sequence[int]], Iterable[tuple[int, int, Any]]],
               task_indices: Sequence[int], k: int, tag: str, split: str
               ) -> list[tuple[int, int, Any]]:
        """``k`` episodes of every task of ``task_indices`` on ``split``'s pool,
        as ``(task, sample, rollout)`` in task order: the helpers play every
        (count+1)-th task from the second on, ``play_here`` the rest meanwhile."""
        weights = None
        if self._wanted != self.version:
            weights = trainable_tensors(self._policies)
            self.version = self._wanted
        shares = [list(task_indices[i::self.count + 1]) for i in range(self.count + 1)]
        for (conn, process), share in zip(self._helpers, shares[1:], strict=True):
            self._send(conn, process, ("eval", weights, split, share, k, tag))
        threads = torch.get_num_threads()
        torch.set_num_threads(max(1, threads - self.count))  # the helpers hold the rest
        try:
            episodes = list(play_here(shares[0]))
        finally:
            torch.set_num_threads(threads)
        for conn, process in self._helpers:
            episodes += self._receive(conn, process, tag)
        order = {t: n for n, t in enumerate(task_indices)}
        return sorted(episodes, key=lambda episode: (order[episode[0]], episode[1]))

    @staticmethod
    def _send(conn, process, message) -> None:
        try:
            conn.send(message)
        except (BrokenPipeError, ConnectionError, EOFError):
            raise RuntimeError(f"evaluation helper {process.name} is gone (exit code "
                               f"{process.exitcode})") from None

    @staticmethod
    def _receive(conn, process, tag: str) -> list[tuple[int, int, Any]]:
        try:
            message = conn.recv()
        except (EOFError, ConnectionError):
            process.join(timeout=5)
            raise RuntimeError(f"evaluation helper {process.name} died (exit code "
                               f"{process.exitcode}) during evaluation {tag!r}") from None
        if message[0] == "error":
            raise RuntimeError(f"evaluation helper {process.name} failed during evaluation "
                               f"{tag!r}:\n{message[1]}")
        return [(t, j, _episode(header, rows, f"{process.name}, evaluation {tag!r}"))
                for t, j, header, rows in message[1]]

    def shutdown(self) -> None:
        for conn, process in self._helpers:
            if process.is_alive():
                try:
                    conn.send((STOP,))
                except (BrokenPipeError, ConnectionError, EOFError):
                    pass
                process.join(timeout=30)
                if process.is_alive():
                    process.kill()
            conn.close()
        self._helpers = []


def eval_helpers(config, policy, role_policies: dict[str, Any] | None = None
                 ) -> EvalProcesses | None:
    """``config.eval_processes`` helpers for ``policy`` (none when 0); refused on a GPU,
    where the helpers would copy the model to the CPU's cores."""
    if not config.eval_processes:
        return None
    device = next(policy.model.parameters()).device
    if device.type != "cpu":
        raise ValueError(f"eval_processes={config.eval_processes} on {device}: the helpers "
                         f"evaluate on the CPU's cores (expected 0 on a GPU)")
    return EvalProcesses(config, policy, role_policies or {}, config.eval_processes)


def _episode(header: tuple[str, str], rows: list[dict], where: str):
    """One episode back from its ``(episode_id, task_id)`` and its rows
    (``rollout_rows``; none for an episode without a transition)."""
    if not rows:
        return Rollout(episode_id=header[0], task_id=header[1], transitions=[])
    episodes = rollouts_from_rows((row, where) for row in rows)
    if len(episodes) != 1:
        raise RuntimeError(f"{where}: an episode came back as {len(episodes)} episodes")
    return episodes[0]


def _serve(conn, config: dict, policy, role_policies: dict[str, Any], index: int) -> None:
    """A helper: build its engine and held-out pools, then evaluate shares of tasks until
    told to stop or the run's end of the pipe closes."""
    from srpo_agents.config import TrainConfig
    from srpo_agents.rollout.engine import engine_for
    from srpo_agents.running.evaluate import held_out, run_tasks

    torch.set_num_threads(1)
    try:
        config = TrainConfig(**config)
        engine = engine_for(config, policy, role_policies, seed_offset=SEED_OFFSET + index)
        pools: dict[str, list] = {}  # built on first use: an env may load a corpus
    except Exception:
        conn.send(("error", traceback.format_exc()))
        return

    def evaluate_share(message) -> tuple:
        _, weights, split, share, k, tag = message
        if weights is not None:
            load_weights(weights, policy, role_policies)
        if split not in pools:
            pools[split] = held_out(config, policy.count_tokens, split)[0]
        return ("episodes", [(t, j, (rollout.episode_id, rollout.task_id),
                              list(rollout_rows(rollout)))
                             for t, j, _, rollout in run_tasks(engine, pools[split], share, k,
                                                               tag)])

    answer(conn, evaluate_share)
