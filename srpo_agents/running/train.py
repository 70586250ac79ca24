"""``srpo train``: rollouts -> Transitions -> action units -> SRPO update, with held-out
evaluation before and after, ``metrics.jsonl`` per step, ``summary.json`` at the end, a
learning-curve PNG and atomic checkpoints that ``--resume`` continues exactly.

Each step draws ``tasks_per_step`` training tasks, runs ``group_size`` episodes of each
(all agents of all episodes batched by the rollout engine), forms units with the
algorithm's rule, computes group-relative advantages and updates the shared policy
(``step.train_step``; the learning tests drive it on their own envs). ``train`` below
is the whole loop; ``training_run.TrainingRun`` holds the run's state and its stages.

Every step's row in ``metrics.jsonl`` (and the progress bar) carries the diagnostics that
tell whether learning can happen: optimizer updates so far (``updates_total``), the
fraction of tasks whose episodes got mixed returns (``mixed_group_fraction``: only those
carry a non-zero advantage), the mean token entropy of the sampled responses
(``entropy``), the approximate KL to the behaviour policy (``approx_kl``) and the clip
fraction, plus the seconds spent in generation, env steps and the update.
``summary.json`` adds the paired after-minus-before difference (``difference``) and the
run's time by phase (``time_breakdown``).
"""

from __future__ import annotations

from typing import Any

from srpo_agents.config import TrainConfig
from srpo_agents.running.training_run import TrainingRun


def train(config: TrainConfig, log=print, before: dict[str, Any] | None = None
          ) -> dict[str, Any]:
    """Train and evaluate one run. ``before``: the starting policy's held-out result when
    it was already measured (``evaluate_start``); the run then skips that evaluation, so
    its sampling starts from the seed's first random number."""
    run = TrainingRun.open(config, log, before)  # policy, envs, learners; resumes; "before"
    bar = run.progress()
    for step in bar:
        row = run.step(step)                     # rollouts -> units -> advantages -> update
        if run.validates_after(step):
            row.update(run.validate(step))       # the validation split, never test
        run.record(row, bar)                     # metrics.jsonl, TensorBoard, the bar
        if run.saves_after(step):
            run.save(step)                       # an atomic checkpoint
    return run.finish()                          # "after" on test; summary.json; plots
