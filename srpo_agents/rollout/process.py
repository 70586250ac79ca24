"""Training rollouts in a process of their own, so that generation overlaps the update
(asynchronous SRPO, ``max_staleness`` >= 1; the hf or the vLLM backend).

The learner ``submit``s a step's episodes with the weights it holds then; the process
plays them with its own copy of the policy (and of the per-role policies or adapters)
and its own env pool (the learner's seeds, so the same envs), one batch after another in
submission order; ``collect`` returns the oldest batch not yet collected. Weights go to
the process only when they changed since it last got them: the trainable tensors,
through shared memory.

What comes back is what the learner needs to resume exactly: the episodes as rollout
rows (``srpo_agents.rollout.files``; JSON, so a checkpoint can hold a batch not yet
used), the generation and env seconds, the wall-clock interval of the generation (to
measure the overlap with the update) and the state of the process's samplers after the
batch (so a resumed process draws what an uninterrupted one would).

The process uses one torch thread and the learner keeps all of its own: on 2 cores,
giving the process a core of its own (the learner on one thread) made a step 1.50x the
synchronous one, sharing them 1.15x (the demo's setting; the learner's update is most of
a step and slows more from losing a thread than from sharing one). A fault in the process
(an exception, a kill) surfaces in ``collect`` as a ``RuntimeError`` naming it; a
learner that dies takes the process with it (the pipe closes and it exits).
"""

from __future__ import annotations

import copy
import time
import traceback
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from srpo_agents.rollout.files import rollout_rows, rollouts_from_rows

STOP = "stop"


@dataclass
class Batch:
    """One submitted step's episodes, as the process produced them."""

    step: int
    version: int
    rows: list[dict]
    seconds: dict[str, float]
    interval: tuple[float, float]  # time.monotonic() at the start and end of the batch
    samplers: dict[str, list[int]]

    def rollouts(self) -> list:
        return rollouts_from_rows((row, f"rollout batch of step {self.step}")
                                  for row in self.rows)

    def to_dict(self) -> dict[str, Any]:
        return {"step": self.step, "version": self.version, "rows": self.rows,
                "seconds": self.seconds, "interval": list(self.interval),
                "samplers": self.samplers}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Batch:
        return cls(data["step"], data["version"], data["rows"], data["seconds"],
                   tuple(data["interval"]), data["samplers"])


def trainable_tensors(policies: dict[str, Any]) -> dict[str, dict[str, torch.Tensor]]:
    """Copies of what an update changes, by policy name (all parameters of a full model;
    the adapters of a model with role adapters)."""
    return {name: {key: value.detach().to("cpu", copy=True)
                   for key, value in policy.model.named_parameters() if value.requires_grad}
            for name, policy in policies.items()}


class RolloutProcess:
    """The ``submit``/``collect`` side of asynchronous training, in a spawned process.

    Args:
        config: the run's ``TrainConfig``.
        policy, role_policies: what the run's ``RolloutEngine`` plays; the process plays
            a copy of each, which holds the weights of version ``version``.
        pool_size: envs in the process's pool (episodes of one step).
        samplers: the sampler states to start from (a resumed run's), or None.

    ``submit``'s ``policies`` are the learners' (``{SHARED: policy}`` or ``{role:
    policy}``): a role's weights go to the copy of that role's policy, the shared ones
    to the copy of ``policy``.
    """

    def __init__(self, config, policy, role_policies: dict[str, Any], pool_size: int,
                 version: int, samplers: dict[str, list[int]] | None = None):
        context = torch.multiprocessing.get_context("spawn")
        self._conn, child = context.Pipe()
        self._process = context.Process(
            target=_serve, args=(child, config.to_dict(), cpu_copy(policy),
                                 {role: cpu_copy(p) for role, p in role_policies.items()},
                                 pool_size, samplers),
            daemon=True, name="srpo-rollout")
        self._process.start()
        child.close()
        self.version = version       # the weights the process holds
        self.in_flight: deque[int] = deque()

    def submit(self, step: int, options: list[dict], version: int,
               policies: dict[str, Any]) -> None:
        weights = trainable_tensors(policies) if version != self.version else None
        self._send(("run", step, version, weights, options))
        self.version = version
        self.in_flight.append(step)

    def collect(self) -> Batch:
        """The oldest submitted batch (waits for it)."""
        if not self.in_flight:
            raise RuntimeError("collect() with no batch submitted")
        try:
            message = self._conn.recv()
        except (EOFError, ConnectionError):
            self._process.join(timeout=5)
            raise RuntimeError(f"the rollout process died (exit code "
                               f"{self._process.exitcode}) while playing the batch of step "
                               f"{self.in_flight[0]}") from None
        if message[0] == "error":
            raise RuntimeError(f"the rollout process failed on the batch of step "
                               f"{self.in_flight[0]}:\n{message[1]}")
        batch = Batch.from_dict(message[1])
        expected = self.in_flight.popleft()
        if batch.step != expected:
            raise RuntimeError(f"rollout process answered step {batch.step}, expected "
                               f"{expected}")
        return batch

    def _send(self, message) -> None:
        try:
            self._conn.send(message)
        except (BrokenPipeError, ConnectionError, EOFError):
            raise RuntimeError(f"the rollout process is gone (exit code "
                               f"{self._process.exitcode})") from None

    def shutdown(self) -> None:
        if self._process.is_alive():
            try:
                self._conn.send((STOP,))
            except (BrokenPipeError, ConnectionError, EOFError):
                pass
            self._process.join(timeout=30)
            if self._process.is_alive():
                self._process.kill()
        self._conn.close()


def cpu_copy(policy):
    """A copy of ``policy`` on the CPU, to send to a spawned process."""
    return policy.copy_with(copy.deepcopy(policy.model).to("cpu"))


def load_weights(weights: dict[str, dict[str, torch.Tensor]], policy,
                 role_policies: dict[str, Any]) -> None:
    """``trainable_tensors``' copies into a process's policies: a role's into that
    role's policy, the shared ones into ``policy``."""
    for name, tensors in weights.items():
        target = role_policies.get(name, policy)
        loaded = target.model.load_state_dict(tensors, strict=False)
        if loaded.unexpected_keys:
            raise KeyError(f"weights of {name!r} the process's copy lacks: "
                           f"{loaded.unexpected_keys[:3]}")


def _serve(conn, config: dict, policy, role_policies: dict[str, Any], pool_size: int,
           samplers: dict[str, list[int]] | None) -> None:
    """The process: build the engine and the env pool, then play batches until told to
    stop or the learner's end of the pipe closes."""
    from srpo_agents import faults
    from srpo_agents.config import TrainConfig
    from srpo_agents.rollout.engine import engine_for
    from srpo_agents.rollout.envs import env_factory, env_pool

    torch.set_num_threads(1)
    faults.scope = "rollout:"
    try:
        config = TrainConfig(**config)
        if config.rollout_device:  # a device of its own (a second GPU), else the CPU
            from srpo_agents.models.policy import place

            for copy_ in (policy, *role_policies.values()):
                place(copy_, config.rollout_device, config.dtype)
        engine = engine_for(config, policy, role_policies)
        for name, generator in engine.sampler_generators().items():
            if samplers and name in samplers:
                generator.set_state(torch.tensor(samplers[name], dtype=torch.uint8))
        envs = env_pool(env_factory(config, "train", policy.count_tokens), pool_size,
                        config.sampling_seed)
    except Exception:
        conn.send(("error", traceback.format_exc()))
        return

    def play(message) -> tuple:
        _, step, version, weights, options = message
        if weights is not None:
            load_weights(weights, policy, role_policies)
        engine.policy_version = version
        faults.at_step(step)
        start, spent = time.monotonic(), dict(engine.seconds)
        while len(envs) < len(options):
            envs.append(copy.deepcopy(envs[0]))
        rollouts = engine.run(envs[:len(options)], options)
        rows = [row for rollout in rollouts for row in rollout_rows(rollout)]
        batch = Batch(step, version, rows,
                      {k: engine.seconds[k] - spent[k] for k in spent},
                      (start, time.monotonic()),
                      {name: g.get_state().tolist()
                       for name, g in engine.sampler_generators().items()})
        return ("batch", batch.to_dict())

    answer(conn, play)


def answer(conn, handle: Callable[[tuple], tuple]) -> None:
    """A spawned process's loop: ``handle`` each message and send back what it returns,
    until told to stop (``STOP``) or the other end of the pipe closes; an exception in
    ``handle`` is sent back as ``("error", traceback)`` and ends the loop."""
    while True:
        try:
            message = conn.recv()
        except (EOFError, ConnectionError):
            return  # the other end is gone
        if message[0] == STOP:
            return
        try:
            conn.send(handle(message))
        except Exception:
            conn.send(("error", traceback.format_exc()))
            return
