"""One training run's state and its stages, so that ``train.train`` reads as its loop.

``TrainingRun.open`` sets a run up: seeds, the starting policy (from its model source),
the train, test and validation env pools, per-role adapters or policies, the rollout
engine (this process or Ray workers), one learner per policy, and, with ``resume``, the
latest checkpoint (weights, optimizers, random generators, the step to continue from).
Then per step: ``step`` (rollouts -> action units -> advantages -> update, and the
step's metrics; with ``max_staleness`` N >= 1 the rollouts of step s + N are generated
in a process of their own while step s updates: ``_async_rollouts``), ``validate`` (the validation split, every ``eval_every`` steps),
``record`` (``metrics.jsonl``, TensorBoard, the progress bar) and ``save`` (an atomic
checkpoint). ``finish`` evaluates on the test split and writes ``summary.json`` and the
plots.
"""

from __future__ import annotations

import copy
import dataclasses
import random
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from srpo_agents import faults
from srpo_agents.config import TrainConfig
from srpo_agents.files import write_json_atomic
from srpo_agents.learning.learner import Learner
from srpo_agents.learning.objective import ADVANTAGE_ESTIMATORS, ALGORITHMS
from srpo_agents.models.policy import Policy
from srpo_agents.models.registry import check_model, model_source, prepare_policy
from srpo_agents.rollout.engine import engine_for
from srpo_agents.rollout.envs import check_data, env_factory, env_pool
from srpo_agents.running.checkpoint import SHARED, WholeCheckpoints
from srpo_agents.running.eval_process import eval_helpers
from srpo_agents.running.evaluate import evaluate, held_out, task_count
from srpo_agents.running.metrics_log import (
    append_json_line,
    read_metrics_rows,
    time_breakdown,
    write_json_lines_atomic,
)
from srpo_agents.running.plan import estimate, estimate_line, plan_line
from srpo_agents.running.plots import plot_curve
from srpo_agents.running.progress import bar, duration
from srpo_agents.running.routing_stats import plot_routing
from srpo_agents.running.step import learn, step_metrics, train_step
from srpo_agents.running.verdicts import task_difference


def step_line(row: dict[str, Any], steps: int, elapsed: float, done: int) -> str:
    """The log's line for one step: its reward, accuracy, KL, clip fraction and seconds,
    and the time left at this invocation's pace so far (``done`` steps in ``elapsed``)."""
    eta = duration(elapsed / max(done, 1) * (steps - row["step"] - 1))
    return (f"step {row['step'] + 1}/{steps}: reward {row['reward']:.3f}, accuracy "
            f"{row['accuracy']:.3f}, kl {row.get('approx_kl', 0.0):.4f}, clip "
            f"{row.get('clip_fraction', 0.0):.3f}, {row['seconds']:.1f} s; ETA {eta}")


def _quiet(*_: Any) -> None:
    """The log of data-parallel ranks other than 0."""


def _all_gather_rollouts(rollouts: list) -> list:
    """Every rank's episodes, on every rank, in rank order (Transitions and token rows)."""
    from srpo_agents.rollout.files import rollout_rows, rollouts_from_rows

    mine = [row for rollout in rollouts for row in rollout_rows(rollout)]
    gathered: list = [None] * torch.distributed.get_world_size()
    torch.distributed.all_gather_object(gathered, mine)
    return rollouts_from_rows((row, f"rank {r}") for r, rows in enumerate(gathered)
                              for row in rows)


@dataclasses.dataclass
class TrainingRun:
    config: TrainConfig
    log: Any
    run_dir: Path
    started: float
    rank: int
    world: int
    warm: dict
    algorithm: Any
    estimator: Any
    train_envs: list
    test: tuple[list, list[int]]          # (envs, task indices)
    validation: tuple[list, list[int]]
    engine: Any                           # evaluations (and training, without Ray)
    rollout: Any                          # what plays the training episodes
    policies: dict[str, Policy]
    learners: dict[str, Learner]
    generators: dict[str, Any]
    task_rng: random.Random
    before: dict | None = None
    start_step: int = 0
    updates_total: int = 0
    eval_seconds: float = 0.0             # the before and after evaluations
    estimate: dict | None = None          # plan.estimate, made after the "before" one
    # seconds the run spent before this invocation, up to the checkpoint it resumed from
    # (work redone after a kill is not counted twice)
    wall_earlier: float = 0.0
    board: Any = None
    # asynchronous runs (max_staleness >= 1): the rollout process, the batches it made
    # that no step has used yet (by step), the next step to submit, the update intervals
    # (to measure the overlap) and the process's sampler states of a resumed run
    producer: Any = None
    produced: dict = dataclasses.field(default_factory=dict)
    next_submit: int = 0
    update_intervals: list = dataclasses.field(default_factory=list)
    resumed_samplers: dict | None = None
    loop_started: float = 0.0             # when this invocation's first step began
    lost_counted: int = 0                 # Ray episodes lost, as far as reported
    root: Path | None = None              # rank 0's folder (the run's), on every rank
    helpers: Any = None                   # eval_processes: the evaluations' helpers

    @property
    def sharded(self) -> bool:
        """The learner on FSDP2: checkpoints through ``sharded_checkpoint``."""
        return any(learner.sharded for learner in self.learners.values())

    def checkpoints(self):
        """Where the run saves and resumes: whole weights, or sharded ones (FSDP2)."""
        if self.sharded:
            from srpo_agents.running.sharded_checkpoint import ShardedCheckpoints

            return ShardedCheckpoints(self.root, self.run_dir, self.policies[SHARED],
                                      self.learners[SHARED].optimizer, self.generators)
        return WholeCheckpoints(self.run_dir, self.policies,
                                {n: lrn.optimizer for n, lrn in self.learners.items()},
                                self.generators)

    @property
    def metrics_path(self) -> Path:
        return self.run_dir / "metrics.jsonl"

    @classmethod
    def open(cls, config: TrainConfig, log=print, before: dict | None = None) -> TrainingRun:
        check_data(config)
        check_model(config.model)  # a bad --model fails in seconds, before the run folder
        rank, world, root = 0, 1, Path(config.out)
        if config.data_parallel:
            from srpo_agents.learning.learner import init_data_parallel

            rank, world = init_data_parallel()
            if rank:  # every rank keeps its own files; rank 0's are the run's
                options = model_source(config.model).rank_options(config)
                config = dataclasses.replace(config, model_options=options,
                                             out=str(Path(config.out) / f"rank-{rank}"))
                log = _quiet
        run_dir = Path(config.out)
        run_dir.mkdir(parents=True, exist_ok=True)
        # the run file of this run: ``srpo train --config <out>/config.json`` repeats it
        write_json_atomic(run_dir / "config.json", config.to_dict())
        started = time.monotonic()
        random.seed(config.sampling_seed)
        np.random.seed(config.sampling_seed)
        torch.manual_seed(config.sampling_seed)
        if rank:
            torch.distributed.barrier()  # rank 0 builds (or finds) the warm start first
        policy, warm = prepare_policy(config, run_dir, log)
        log(plan_line(config, next(policy.model.parameters()).device.type))
        if config.dtype.startswith("pure-"):
            log(f"dtype {config.dtype}: the weights and the AdamW state are 16-bit, so most "
                f"small updates round away (metrics.jsonl's update_to_weight shows how "
                f"much moved); --dtype {config.dtype.removeprefix('pure-')} keeps float32 "
                f"master weights")
        if config.data_parallel and not rank:
            torch.distributed.barrier()
        algorithm = ALGORITHMS[config.algo]
        estimator = ADVANTAGE_ESTIMATORS[config.advantage or algorithm.advantage]
        train_envs = env_pool(env_factory(config, "train", policy.count_tokens),
                               config.tasks_per_step * config.group_size, config.sampling_seed)
        test = held_out(config, policy.count_tokens, log=log)
        validation = ([], [])
        if config.eval_every:  # the curve during training reads validation tasks, never test
            validation = held_out(config, policy.count_tokens, "validation",
                                  config.curve_tasks or config.eval_tasks, log)
        roles = sorted(set(train_envs[0].roles.values()))
        if config.per_role_adapters:  # one frozen base, one LoRA adapter per role
            from srpo_agents.models.adapters import attach_role_adapters

            policy = attach_role_adapters(policy, roles, rank=config.lora_rank,
                                          alpha=config.lora_alpha, targets=config.lora_targets)
        role_policies = {}
        if config.per_role_policies:
            role_policies = {role: policy.copy_with(copy.deepcopy(policy.model),
                                                    f"{policy.name}#{role}") for role in roles}
        engine = engine_for(config, policy, role_policies)
        rollout = engine
        if config.rollout_workers:
            from srpo_agents.rollout.ray_engine import RayRolloutEngine

            rollout = RayRolloutEngine(config, policy, config.rollout_workers,
                                       address=config.ray_address)
        policies = role_policies or {SHARED: policy}
        settings = config.learner()
        learners = {name: Learner(p, algorithm, settings, seed=config.sampling_seed)
                    for name, p in policies.items()}
        task_rng = random.Random(config.sampling_seed)
        generators = {"task_rng": task_rng, **engine.sampler_generators(),
                      **{f"learner_rng:{name}": lrn.rng for name, lrn in learners.items()}}
        helpers = eval_helpers(config, policy, role_policies)
        run = cls(config, log, run_dir, started, rank, world, warm, algorithm, estimator,
                  train_envs, test, validation, engine, rollout, policies, learners,
                  generators, task_rng, before, root=root, helpers=helpers)
        run._resume_or_start()
        return run

    def _resume_or_start(self) -> None:
        config, log = self.config, self.log
        # a sharded run: every rank takes part, checkpoint or not
        payload = self.checkpoints().load(log) if config.resume else None
        if payload is not None:
            self.start_step = payload["step"]
            self.before = payload["extra"].get("before") or self.before
            self.estimate = payload["extra"].get("estimate")
            self._restore_async(payload["extra"].get("async"))
            kept = [row for row in read_metrics_rows(self.metrics_path)
                    if row["step"] < self.start_step]
            # a checkpoint from before wall_s was kept: its steps' own seconds at least
            self.wall_earlier = payload["extra"].get(
                "wall_s", sum(row.get("seconds", 0.0) for row in kept))
            self.eval_seconds = payload["extra"].get("eval_seconds", 0.0)
            self.engine.policy_version = self.rollout.policy_version = self.start_step
            # rows of the steps to be replayed go, and so does a line torn by a kill
            write_json_lines_atomic(self.metrics_path, kept)
            log(f"resumed from {payload['folder']} at step {self.start_step}")
            if self.helpers is not None:  # they hold the starting weights: send these
                self.helpers.version = -1
        elif self.metrics_path.exists():
            self.metrics_path.unlink()
        if self.before is None:
            played: list = []
            self.before = self._test("before", keep=played)
            self._estimate(played)
        if self.start_step:
            rows = read_metrics_rows(self.metrics_path)
            self.updates_total = rows[-1].get("updates_total", 0) if rows else 0
        if config.report_to:
            from srpo_agents.running.trackers import Trackers

            self.board = Trackers(config.report_to, self.run_dir, config.to_dict(),
                                  resume=bool(self.start_step), log=log)
            if not self.start_step:
                self.board.evaluation("before", self.before, 0)

    def _estimate(self, played: list) -> None:
        """The time to go (``plan.estimate``), measured on the "before" evaluation that
        just ran; under data parallelism its probe would be a collective of one rank,
        so none is made there."""
        if self.world > 1 or not played:
            return
        # a vLLM engine gives the learner its GPU memory before an update (train_step
        # does the same); the next rollout takes it back
        getattr(self.engine, "rest", lambda: None)()
        name = SHARED if SHARED in self.learners else next(iter(self.learners))
        self.estimate = estimate(self.config, self.eval_seconds, played,
                                 self.learners[name], self.algorithm)
        self.log(estimate_line(self.estimate, self.config.steps - self.start_step))

    def _evaluate(self, tag: str, envs: list, indices: list[int], keep: list | None = None,
                  split: str = "validation") -> tuple[dict, float]:
        tick = time.monotonic()
        # a bar for the test evaluations before and after (the train bar covers the rest)
        label = f"held-out {tag}" if tag in ("before", "after") else ""
        if self.helpers is not None:  # they get the weights when an update moved them
            self.helpers.follow(self.policies, self.updates_total)
        # each episode's vote too: a majority vote of the trained policy at equal tokens
        result = evaluate(self.engine, envs, indices, self.config.eval_k, tag=tag,
                          progress=label, votes=True, keep=keep, helpers=self.helpers,
                          split=split)
        return result, time.monotonic() - tick

    def _test(self, tag: str, keep: list | None = None) -> dict:
        result, spent = self._evaluate(tag, *self.test, keep=keep, split="test")
        self.eval_seconds += spent
        k = self.config.eval_k
        self.log(f"{tag}: avg@{k} {result['avg_at_k']:.3f} (+-{result['avg_at_k_stderr']:.3f}), "
                 f"pass@{k} {result['pass_at_k']:.3f}")
        return result

    def progress(self):
        self.loop_started = time.monotonic()
        return bar(self.config.steps, "srpo train", "step", self.start_step,
                   range(self.start_step, self.config.steps))

    def memory_peak_gb(self) -> float:
        """The run's peak memory so far, GiB: the accelerator's allocations on CUDA, else
        the process's resident set."""
        device = next(iter(self.policies.values())).model.device
        if device.type == "cuda":
            return torch.cuda.max_memory_allocated(device) / 2**30
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux

    def _options(self, step: int) -> list[dict]:
        """Step ``step``'s episodes: freshly drawn tasks, each ``group_size`` times."""
        config = self.config
        tasks = [self.task_rng.randrange(task_count(self.train_envs) or 2**31)
                 for _ in range(config.tasks_per_step)]
        return [{"task_index": t, "episode_id": f"s{step}-t{i}-g{g}"}
                for i, t in enumerate(tasks) for g in range(config.group_size)]

    def step(self, step: int) -> dict[str, Any]:
        """One RL step (``train.train_step``) on freshly drawn tasks; the step's metrics."""
        config, rollout = self.config, self.rollout
        faults.at_step(step)
        tick = time.monotonic()
        if config.max_staleness:
            rollouts, stats, update = self._async_step(step)
            self.updates_total += update.get("updates", 0)
            row = step_metrics(rollouts, stats, update, step, time.monotonic() - tick)
            row["updates_total"] = self.updates_total
            return row
        options = self._options(step)
        lost_before = getattr(rollout, "lost_episodes", 0)
        gather = None
        if self.world > 1:  # this rank plays its whole tasks; every rank then has all
            options = [o for n, o in enumerate(options)
                       if (n // config.group_size) % self.world == self.rank]
            gather = _all_gather_rollouts
        rollouts, stats, update = train_step(rollout, self.train_envs[:len(options)], options,
                                             self.algorithm, self.estimator, self.learners,
                                             config.dynamic_sampling, gather)
        if rollout is not self.engine:  # the evaluations' engine follows the new weights
            self.engine.policy_version = rollout.policy_version
            update.update(episodes_lost=rollout.lost_episodes - lost_before,
                          worker_restarts=rollout.worker_restarts)
        self.updates_total += update.get("updates", 0)
        row = step_metrics(rollouts, stats, update, step, time.monotonic() - tick)
        row["updates_total"] = self.updates_total
        return row

    def _async_step(self, step: int) -> tuple[list, Any, dict[str, Any]]:
        """Step ``step`` of an asynchronous run: keep the rollout process N batches ahead
        (each generated with the weights of its submission), take this step's batch,
        drop what is more than N versions old, update."""
        config, version = self.config, self.engine.policy_version
        if self.producer is None:
            self._start_producer()
        while self.next_submit <= min(step + config.max_staleness, config.steps - 1):
            self.producer.submit(self.next_submit, self._options(self.next_submit), version,
                                 self.policies)
            self.next_submit += 1
        waited = time.monotonic()
        while step not in self.produced:
            batch = self.producer.collect()
            self.produced[batch.step] = batch
        waited = time.monotonic() - waited
        batch = self.produced.pop(step)
        rollouts = batch.rollouts()
        start = time.monotonic()
        stats, update = learn(rollouts, self.algorithm, self.estimator,
                              self.learners, config.dynamic_sampling, version,
                              config.max_staleness)
        self.update_intervals = [*self.update_intervals[-config.max_staleness:],
                                 (start, time.monotonic())]
        self.engine.policy_version = version + 1
        if self.rollout is not self.engine:  # lost since the last step's count
            update.update(episodes_lost=self.rollout.lost_episodes - self.lost_counted,
                          worker_restarts=self.rollout.worker_restarts)
            self.lost_counted = self.rollout.lost_episodes
        first, last = batch.interval
        overlap = sum(max(0.0, min(last, b) - max(first, a)) for a, b in self.update_intervals)
        update.update({f"{k}_seconds": v for k, v in batch.seconds.items()},
                      rollout_wait_seconds=waited, overlap_seconds=overlap,
                      generated_with_version=batch.version)
        return rollouts, stats, update

    def _start_producer(self) -> None:
        from srpo_agents.rollout.process import RolloutProcess

        if self.rollout is not self.engine:  # the Ray workers play the batches
            from srpo_agents.rollout.ray_engine import RayProducer

            self.producer = RayProducer(self.rollout)
        else:
            self.producer = RolloutProcess(self.config, self.engine.policy,
                                           self.engine.role_policies, len(self.train_envs),
                                           self.engine.policy_version, self.resumed_samplers)
        self.next_submit = max(self.next_submit, self.start_step + len(self.produced))

    def _drain(self) -> dict | None:
        """An asynchronous run's state for a checkpoint: every submitted batch, waited
        for (so none is lost or made twice on resume), and the process's samplers."""
        if self.producer is None and not self.produced:
            return None
        while self.producer is not None and self.producer.in_flight:
            batch = self.producer.collect()
            self.produced[batch.step] = batch
        latest = max(self.produced.values(), key=lambda b: b.step, default=None)
        return {"batches": [self.produced[s].to_dict() for s in sorted(self.produced)],
                "next_submit": self.next_submit,
                "samplers": latest.samplers if latest else self.resumed_samplers}

    def _restore_async(self, state: dict | None) -> None:
        if not state:
            return
        from srpo_agents.rollout.process import Batch

        self.produced = {b["step"]: Batch.from_dict(b) for b in state["batches"]}
        self.next_submit = state["next_submit"]
        self.resumed_samplers = state["samplers"]

    def validates_after(self, step: int) -> bool:
        every = self.config.eval_every
        return bool(every) and (step + 1) % every == 0 and step + 1 < self.config.steps

    def validate(self, step: int) -> dict[str, Any]:
        mid, spent = self._evaluate(f"s{step}", *self.validation)
        return {"eval_avg_at_k": mid["avg_at_k"], "eval_avg_at_k_stderr": mid["avg_at_k_stderr"],
                "eval_pass_at_k": mid["pass_at_k"], "eval_tasks": mid["tasks"],
                "eval_split": "validation", "eval_seconds": spent}

    def record(self, row: dict[str, Any], bar) -> None:
        append_json_line(self.metrics_path, row)
        if self.board is not None:
            self.board.row(row)
        line = step_line(row, self.config.steps, time.monotonic() - self.loop_started,
                         row["step"] + 1 - self.start_step)
        (bar.write if not bar.disable else self.log)(line)
        bar.set_postfix(acc=f"{row['accuracy']:.2f}", upd=self.updates_total,
                        mixed=f"{row['mixed_group_fraction']:.2f}",
                        ent=f"{row.get('entropy', 0.0):.2f}",
                        kl=f"{row.get('approx_kl', 0.0):.3f}",
                        clip=f"{row.get('clip_fraction', 0.0):.2f}",
                        tok=f"{row['tokens_per_task']:.0f}",
                        calls=f"{row['tool_calls_per_task']:.1f}")

    def saves_after(self, step: int) -> bool:
        # The last step is saved before the final evaluation, so a longer run resumed
        # from it draws exactly the random numbers an uninterrupted run would.
        every = self.config.save_every
        return bool(every and (step + 1) % every == 0) or step + 1 == self.config.steps

    def wall(self) -> float:
        """The run's seconds so far, across the invocations it resumed through."""
        return self.wall_earlier + time.monotonic() - self.started

    def save(self, step: int) -> None:
        extra = {"before": self.before, "estimate": self.estimate, "wall_s": self.wall(),
                 "eval_seconds": self.eval_seconds}
        if self.config.max_staleness:
            extra["async"] = self._drain()
        self.checkpoints().save(step + 1, self.config.to_dict(), extra)

    def finish(self) -> dict[str, Any]:
        """The test evaluation after training; ``summary.json``, the curve and plots."""
        config, log = self.config, self.log
        faults.at_step(None)
        if self.rollout is not self.engine:
            self.rollout.shutdown()
        if self.producer is not None:
            self.producer.shutdown()
            self.producer = None
        after = self._test("after")
        if self.helpers is not None:
            self.helpers.shutdown()
            self.helpers = None
        if self.board is not None:
            self.board.evaluation("after", after, config.steps)
            self.board.close()
        difference = task_difference(self.before, after)
        k = config.eval_k
        log(f"after - before (paired over {difference['tasks']} tasks): avg@{k} "
            f"{difference['avg_at_k']:+.3f} +- {difference['avg_at_k_stderr']:.3f} "
            f"({difference['avg_at_k_z']:+.1f} SE), pass@{k} "
            f"{difference['pass_at_k']:+.3f} +- {difference['pass_at_k_stderr']:.3f}")
        wall = self.wall()
        summary = {"config": config.to_dict(), "warm_start": self.warm, "before": self.before,
                   "estimate": self.estimate,
                   "after": after, "difference": difference,
                   "time_breakdown": time_breakdown(self.metrics_path, self.warm,
                                                    self.eval_seconds, wall),
                   "wall_time_s": wall, "memory_peak_gb": self.memory_peak_gb()}
        write_json_atomic(self.run_dir / "summary.json", summary)
        title = f"{config.env} {config.workflow} {config.algo}"
        try:
            plot_curve(self.metrics_path, self.run_dir / "learning_curve.png", title,
                       self.before, after, config.steps)
            plot_routing(read_metrics_rows(self.metrics_path), self.run_dir / "routing.png",
                         f"{title}: routing")
        except ImportError:
            log("matplotlib is not installed: no learning_curve.png")
        return summary
