"""What a training run will do on this machine, and about how long it will take.

``srpo train`` prints the plan as it opens the run and the estimate before its first
step. The estimate is measured, not looked up: sampling runs at the rate of the run's own
"before" evaluation (seconds an episode, on this machine, this model and these prompts),
and the update at the rate of a timed forward and backward of two micro-batches built
from that evaluation's episodes (no optimizer step: the weights and the AdamW state are
left as they were). A run's ``summary.json`` keeps the estimate beside its time breakdown, so
the two can be compared.
"""

from __future__ import annotations

import os
import random
import time
from typing import Any

import numpy as np

TRAIN_EVAL_SIZES = {"cpu": (200, 2), "accelerator": (200, 8)}
"""``srpo train``'s held-out (tasks, k) before and after, by machine, when neither flag is
set. On 2 CPU cores a SmolLM2 episode takes about a second, so 200 x 8 before and after
was most of an hour of evaluation; 200 x 2 keeps the tasks (the paired difference's
precision is mostly theirs) at a quarter of the episodes."""


def threads() -> int:
    import torch

    return torch.get_num_threads()


def plan_line(config, device: str) -> str:
    """The run's work in one line: training episodes, epochs and held-out evaluations."""
    episodes = config.steps * config.tasks_per_step * config.group_size
    line = (f"plan on {device}, {threads()} thread(s): {config.steps} steps x "
            f"{config.tasks_per_step} tasks x G={config.group_size} = {episodes} training "
            f"episodes, {config.epochs} epoch(s) each; held-out {config.eval_tasks} tasks x "
            f"k={config.eval_k} before and after")
    if config.eval_every:
        line += (f", validation every {config.eval_every} steps on "
                 f"{config.curve_tasks or config.eval_tasks} tasks")
    return line


def update_probe(learner, algorithm, rollouts: list) -> dict | None:
    """Seconds of the learner's forward and backward on two micro-batches' worth of
    ``rollouts``' units (advantage 1), cut into micro-batches as an update cuts them,
    and the rows they held; the gradients are dropped. None when there is nothing to
    time."""
    from srpo_agents.learning.events import UnitBatch, build_units

    units, _ = build_units(rollouts, algorithm.unit)
    picked, held = [], 0
    for unit in units:
        if held >= 2 * learner.config.microbatch_rows:
            break
        picked.append(unit)
        held += unit.size
    if not picked:
        return None
    model = learner.policy.model
    was_training = model.training
    model.train(learner.config.gradient_checkpointing)
    try:
        tick = time.monotonic()
        for micro in learner._microbatches(UnitBatch(picked, np.ones(len(picked)))):
            loss, _, _ = learner._loss(micro, with_entropy=False)
            loss.backward()
        seconds = time.monotonic() - tick
    finally:
        model.zero_grad(set_to_none=True)
        model.train(was_training)
        # rows it scored under a KL reference are cached by id(): these samples go, and
        # a new one could take an id
        learner._reference_cache = {}
    return {"seconds": seconds, "rows": held}


def estimate(config, before_seconds: float, rollouts: list, learner, algorithm
             ) -> dict[str, Any]:
    """The run's time to go, from the "before" evaluation's rate and an update probe."""
    episodes = max(1, len(rollouts))
    per_episode = before_seconds / episodes
    rows_per_episode = np.mean([len(r.samples) for r in rollouts]) if rollouts else 0.0
    step_episodes = config.tasks_per_step * config.group_size
    # the episodes as an update's mini-batches draw them: each task's together (as the
    # evaluation played them) with minibatch_by "task", else shuffled, whose rows seldom
    # share a prompt (a local generator: the run's random numbers are not touched)
    if learner.config.minibatch_by != "task":
        rollouts = random.Random(0).sample(rollouts, len(rollouts))
    probe = update_probe(learner, algorithm, rollouts)
    update = 0.0
    if probe:
        update = (step_episodes * rows_per_episode / probe["rows"] * probe["seconds"]
                  * config.epochs)
    sampling = step_episodes * per_episode
    validations = (config.steps - 1) // config.eval_every if config.eval_every else 0
    validation = validations * (config.curve_tasks or config.eval_tasks) * config.eval_k \
        * per_episode
    after = before_seconds
    total = config.steps * (sampling + update) + validation + after
    return {"seconds_per_episode": per_episode, "step_sampling_s": sampling,
            "step_update_s": update, "probe": probe, "validation_s": validation,
            "after_s": after, "total_s": total, "threads": threads(),
            "omp_num_threads": os.environ.get("OMP_NUM_THREADS")}


def estimate_line(result: dict, steps: int) -> str:
    """The estimate in one line, each part's source said."""
    from srpo_agents.running.progress import duration

    probe = result["probe"]
    step = result["step_sampling_s"] + result["step_update_s"]
    update = (f" + {result['step_update_s']:.1f} s of update (a forward and backward of "
              f"{probe['rows']} rows took {probe['seconds']:.2f} s)" if probe else "")
    parts = [f"{steps} steps {duration(steps * step)}"]
    if result["validation_s"]:
        parts.append(f"validation {duration(result['validation_s'])}")
    parts.append(f"the 'after' evaluation {duration(result['after_s'])}")
    return (f"estimate: a step {result['step_sampling_s']:.1f} s of sampling (the 'before' "
            f"evaluation's {result['seconds_per_episode']:.2f} s an episode){update}; "
            f"{', '.join(parts)}: about {duration(result['total_s'])} to go")
