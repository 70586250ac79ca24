"""Rollouts on Ray actors (``srpo train --rollout-workers N``; extra ``ray``).

Each worker is a Ray actor that owns its env instances and a generation backend (the
run's ``RolloutEngine``). Every training step the learner sends each worker whole tasks
(all G episodes of a task go to one worker, so an advantage group is never split). When
the weights changed, they go to the workers once per update by a broadcast over a
process group of the learner and the workers (``srpo_agents.rollout.weight_sync``:
gloo, or NCCL where all hold a GPU; ``--weight-sync collective``), or through the
object store (``ray.put`` of the state dict; ``--weight-sync object_store``, and always
in asynchronous runs, whose workers may be busy with earlier batches). A worker takes
``--rollout-worker-gpus`` GPUs and then generates on one. Workers return the episodes' Transitions
with their token rows (``srpo_agents.rollout.files`` rows), and the learner forms events
from them as from in-process rollouts, so batching stays event-atomic.

Failures: a worker that dies or does not answer within ``step_timeout`` seconds is
killed and replaced with the current weights. Its episodes of that step are dropped
whole and counted (``lost_episodes``, ``worker_restarts``), never half-used. With
several submissions in flight (asynchronous SRPO), each loses the dead worker's
episodes, and the worker is replaced once.

``--ray-address`` joins an existing cluster (``ray start --head`` on one machine, ``ray
start --address=HEAD:6379`` on the others). Without it a local Ray instance is started.
With 0 workers nothing of Ray is imported.

Determinism: one worker, seeded as the in-process engine and given the same episodes in
the same order, samples exactly what the in-process engine would. With several workers
each samples from its own generator (seed + worker index) over its own batch, so the
samples differ from an in-process run's while following the same distribution. The
workers' generator states are not in checkpoints, so ``--resume`` with workers is not
bit-exact.
"""

from __future__ import annotations

import copy
import os
import time
from typing import Any

from srpo_agents.rollout.files import rollout_rows, rollouts_from_rows
from srpo_agents.rollout.process import cpu_copy


class _Worker:
    """One rollout worker (wrapped as a Ray actor by ``RayRolloutEngine``)."""

    def __init__(self, index: int, config: dict, policy, pool_size: int):
        import torch

        from srpo_agents import faults
        from srpo_agents.config import TrainConfig
        from srpo_agents.rollout.engine import engine_for
        from srpo_agents.rollout.envs import env_factory

        torch.set_num_threads(1)
        faults.scope = f"worker{index}:"
        self.config = TrainConfig(**config)
        if self.config.rollout_worker_gpus and torch.cuda.is_available():
            from srpo_agents.models.policy import place

            policy = place(policy, "cuda", self.config.dtype)  # the GPU Ray gave it
        self.policy = policy
        self.weights = None  # this worker's member of the weight group, once joined
        self.engine = engine_for(self.config, policy, seed_offset=index)
        make = env_factory(self.config, "train", policy.count_tokens)
        self.envs = [make(self.config.sampling_seed * 1_000_003 + index * 100_003 + i)
                     for i in range(pool_size)]

    def run(self, version: int, step: int, weights, options: list[dict]):
        from srpo_agents import faults

        if weights is not None:
            self.policy.model.load_state_dict(weights)
        self.engine.policy_version = version
        faults.at_step(step)
        while len(self.envs) < len(options):  # a replacement may get a larger share
            self.envs.append(copy.deepcopy(self.envs[0]))
        spent = dict(self.engine.seconds)
        rollouts = self.engine.run(self.envs[:len(options)], options)
        rows = [row for rollout in rollouts for row in rollout_rows(rollout)]
        return rows, {k: self.engine.seconds[k] - spent[k] for k in spent}

    def join_weights(self, host: str, port: int, rank: int, world: int, generation: int,
                     device: str, dtype: str) -> None:
        """Join generation ``generation`` of the learner's weight group."""
        import torch

        from srpo_agents.rollout.weight_sync import WeightGroup

        store = self.weights.store if self.weights is not None else None
        self.weights = WeightGroup(host, port, rank, world, generation, device, store=store)
        self.wire_dtype = getattr(torch, dtype)

    def receive_weights(self) -> None:
        self.weights.receive(self.policy.model, self.wire_dtype)

    def load_weights(self, weights) -> None:
        self.policy.model.load_state_dict(weights)

    def weights_digest(self) -> list[float]:
        """Each tensor's sum in float64, in state-dict order (to compare copies)."""
        return [float(t.double().sum()) for t in self.policy.model.state_dict().values()]

    def node_id(self) -> str:
        import ray

        return ray.get_runtime_context().get_node_id()


class RayRolloutEngine:
    """The ``RolloutEngine`` interface ``train_step`` uses (``run``, ``seconds``,
    ``policy_version``), played by ``workers`` Ray actors."""

    def __init__(self, config, policy, workers: int, *, address: str = "",
                 worker_cpus: float = 0.5, step_timeout: float = 600.0, spread: bool = False):
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        import ray

        if workers < 1:
            raise ValueError(f"rollout_workers={workers!r}: expected >= 1 (0 runs rollouts "
                             f"in process)")
        if not ray.is_initialized():
            ray.init(address=address or None, include_dashboard=False, log_to_driver=False,
                     configure_logging=False)
        self._ray = ray
        self.config = config
        self.policy = policy
        self.policy_version = 0
        self.seconds = {"generation": 0.0, "env": 0.0}
        self.lost_episodes = 0
        self.worker_restarts = 0
        self.step_timeout = step_timeout
        options = {"num_cpus": worker_cpus, "max_restarts": 0}
        if config.rollout_worker_gpus:
            options["num_gpus"] = config.rollout_worker_gpus
        if spread:
            options["scheduling_strategy"] = "SPREAD"
        self._actor = ray.remote(**options)(_Worker)
        self._config = config.to_dict()
        self._pool = config.tasks_per_step * config.group_size // workers + config.group_size
        self._policy_ref = ray.put(cpu_copy(policy))
        self.workers = [self._spawn(i) for i in range(workers)]
        self._seen = [0] * workers  # the weights version each worker holds
        self._weights: tuple[int, Any] | None = None
        # a broadcast needs every worker free, so asynchronous runs keep the object store
        self.collective = config.weight_sync == "collective" and not config.max_staleness
        self.sync_seconds, self.sync_bytes = 0.0, 0
        self._group = None
        if self.collective:
            self._connect()

    def _spawn(self, index: int):
        return self._actor.remote(index, self._config, self._policy_ref, self._pool)

    def _wire(self) -> tuple[str, str]:
        """(device, dtype) of the weight group: NCCL on the learner's GPU when every
        worker holds one, else gloo on the CPU; the dtype the workers compute in (bf16
        from float32 masters on GPUs)."""
        model = self.policy.model
        first = next(model.parameters())
        gpus = first.device.type == "cuda" and self.config.rollout_worker_gpus > 0
        dtype = self.policy.compute_dtype if gpus and self.policy.compute_dtype else first.dtype
        return (str(first.device) if gpus else "cpu"), str(dtype).removeprefix("torch.")

    def _connect(self) -> None:
        """A new generation of the weight group: every worker joins, then the learner."""
        from srpo_agents.rollout.weight_sync import WeightGroup, free_port

        if self._group is None:
            self._host = self._ray.util.get_node_ip_address()
            self._port, self._generation, store = free_port(), 0, None
        else:
            self._generation, store = self._generation + 1, self._group.store
        device, dtype = self._wire()
        world = len(self.workers) + 1
        joined = [w.join_weights.remote(self._host, self._port, i + 1, world,
                                        self._generation, device, dtype)
                  for i, w in enumerate(self.workers)]
        self._group = WeightGroup(self._host, self._port, 0, world, self._generation, device,
                                  timeout_s=self.step_timeout, store=store)
        self._ray.get(joined, timeout=self.step_timeout)

    def push_weights(self) -> None:
        """The learner's weights to every worker now (the collective path): each worker
        waits for them in ``receive_weights`` while this process broadcasts. A worker
        that died meanwhile fails the broadcast (at ``step_timeout`` at the latest): the
        dead ones are replaced, every worker joins a new group, and it is sent again."""
        try:
            self._push()
        except (RuntimeError, self._ray.exceptions.RayError):
            dead = [i for i, w in enumerate(self.workers) if not self._answers(w)]
            for i in dead:
                self._replace(i)  # which joins everyone to a new group
            if not dead:
                self._connect()
            self._push()

    def _answers(self, worker) -> bool:
        try:
            self._ray.get(worker.node_id.remote(), timeout=30)
            return True
        except self._ray.exceptions.RayError:
            return False

    def _push(self) -> None:
        import torch

        tick = time.monotonic()
        received = [w.receive_weights.remote() for w in self.workers]
        self.sync_bytes += self._group.send(self.policy.model,
                                            getattr(torch, self._wire()[1]))
        self._ray.get(received, timeout=self.step_timeout)
        self._seen = [self.policy_version] * len(self.workers)
        self.sync_seconds += time.monotonic() - tick

    def _weights_ref(self):
        if self._weights is None or self._weights[0] != self.policy_version:
            state = {k: v.detach().cpu() for k, v in self.policy.model.state_dict().items()}
            self._weights = (self.policy_version, self._ray.put(state))
        return self._weights[1]

    def run(self, envs, options: list[dict]) -> list:
        """Play ``options`` (``envs`` is ignored: the workers own theirs). Episodes of a
        worker that fails are dropped whole and counted."""
        return self.collect(self.submit(options))

    def submit(self, options: list[dict]) -> tuple:
        """Send ``options`` to the workers (whole tasks each) with the weights of
        ``policy_version`` to those that have not seen them; returns what ``collect``
        takes. Several submissions may be in flight (asynchronous SRPO): a worker plays
        its calls in order."""
        from srpo_agents import faults

        tasks: dict[Any, list[dict]] = {}
        for option in options:
            tasks.setdefault(option.get("task_index"), []).append(option)
        shares: list[list[dict]] = [[] for _ in self.workers]
        for i, group in enumerate(tasks.values()):
            shares[i % len(self.workers)].extend(group)
        stale = any(seen != self.policy_version for seen in self._seen)
        if self.collective and stale:
            self.push_weights()
        weights = self._weights_ref() if self.policy_version and not self.collective else None
        futures = {}
        for i, share in enumerate(shares):
            if share:
                send = weights if self._seen[i] != self.policy_version else None
                futures[i] = self.workers[i].run.remote(self.policy_version, faults.step,
                                                        send, share)
                self._seen[i] = self.policy_version
        actors = {i: self.workers[i] for i in futures}
        return futures, actors, shares, options, time.monotonic() + self.step_timeout

    def collect(self, submitted: tuple) -> list:
        """The episodes of one ``submit``, in its options' order."""
        ray = self._ray
        futures, actors, shares, options, deadline = submitted
        rows_by_worker: dict[int, list[dict]] = {}
        for i, future in futures.items():
            try:
                rows, seconds = ray.get(future, timeout=max(1.0, deadline - time.monotonic()))
            except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError,
                    ray.exceptions.RayTaskError):
                # several submissions may have been in flight on the failed actor: the
                # first failure replaces it, the later ones only count their episodes
                if self.workers[i] is actors[i]:
                    self._replace(i)
                self.lost_episodes += len(shares[i])
                continue
            rows_by_worker[i] = rows
            for key, value in seconds.items():
                self.seconds[key] = self.seconds.get(key, 0.0) + value
        rollouts = rollouts_from_rows(
            (row, f"worker {i}") for i in sorted(rows_by_worker) for row in rows_by_worker[i])
        order = {option["episode_id"]: n for n, option in enumerate(options)}
        return sorted(rollouts, key=lambda r: order.get(r.episode_id, len(order)))

    def _replace(self, index: int) -> None:
        self._ray.kill(self.workers[index], no_restart=True)
        self.workers[index] = self._spawn(index)
        self._seen[index] = 0  # the new worker holds the starting weights (version 0)
        self.worker_restarts += 1
        if self.collective:  # the group lost a member: all join a new one
            self._connect()

    def node_ids(self) -> list[str]:
        return self._ray.get([w.node_id.remote() for w in self.workers])

    def shutdown(self) -> None:
        for worker in self.workers:
            self._ray.kill(worker, no_restart=True)
        self.workers = []


class RayProducer:
    """The ``RolloutProcess`` interface (``submit``, ``collect``, ``in_flight``,
    ``shutdown``) on Ray workers, for asynchronous SRPO with ``rollout_workers``: each
    submission carries the weights of its version, and the workers play the
    submissions in order. The workers' samplers are not in checkpoints (as in the
    synchronous case), so a resumed run uses each saved batch once but does not
    draw bit for bit what an uninterrupted one would."""

    def __init__(self, engine: RayRolloutEngine):
        from collections import deque

        self.engine = engine
        self.version = engine.policy_version
        self.in_flight: deque[int] = deque()
        self._submitted: deque[tuple] = deque()

    def submit(self, step: int, options: list[dict], version: int, policies=None) -> None:
        self.engine.policy_version = version
        self._submitted.append((step, version, time.monotonic(), dict(self.engine.seconds),
                                self.engine.submit(options)))
        self.version = version
        self.in_flight.append(step)

    def collect(self):
        from srpo_agents.rollout.process import Batch

        step, version, start, spent, submitted = self._submitted.popleft()
        self.in_flight.popleft()
        rollouts = self.engine.collect(submitted)
        rows = [row for rollout in rollouts for row in rollout_rows(rollout)]
        seconds = {k: self.engine.seconds[k] - spent.get(k, 0.0) for k in self.engine.seconds}
        return Batch(step, version, rows, seconds, (start, time.monotonic()), {})

    def shutdown(self) -> None:
        """The workers belong to the engine, which the run shuts down."""
