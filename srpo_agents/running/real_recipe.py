"""The real-model recipe (issue 50): SmolLM2-135M-Instruct as a solve-verify math team
that SRPO trains on two CPU cores.

Where it comes from (each step in ``docs/results.md``):

- **the setting**: the base model on candidate settings (``benchmarks/results/
  real_model_candidates.md``); its rule chose level-0 math with the math env's one-example
  prompt set ``example-v1`` at temperature 0.7, where the model is right on about 19% of
  validation tasks and 69% of groups of 8 disagree (SRPO's advantages need them to);
- **the update** (lr, full or LoRA): the pilot on seed 10, its rule fixed before it ran
  (``benchmarks/results/real_model_pilot_v2.md``);
- **the runs** on seeds 0, 1 and 2 (``benchmarks/results/real_model_learns.md``), which
  ``make demo-real`` repeats for one seed.
"""

from __future__ import annotations

import json
from pathlib import Path

from srpo_agents.config import TrainConfig, same_settings
from srpo_agents.running.checkpoint import has_checkpoint
from srpo_agents.running.train import train
from srpo_envs.envs.math_env import PROMPT_SETS

MODEL = "smollm2-135m-instruct"
PROMPTS = "example-v1"

SETTING = dict(model=MODEL, env="SRPO-Math-v0", difficulty=(0,), max_turns=1,
               temperature=0.7, max_new_tokens=128,
               # The set's text itself, not its name: a run's recorded config then holds
               # the prompts it was trained with.
               extra_env_kwargs={"prompts": PROMPT_SETS[PROMPTS]})
"""The candidates' choice (``srpo_bench.real_model.chosen``), one agent's form."""

TEAM = "solve_verify"
BATCH = dict(tasks_per_step=4, group_size=8, epochs=1, microbatch_rows=8, save_every=2)
"""4 tasks x G = 8 a step, one epoch; micro-batches of 8 rows bound the update's memory."""


def real_config(seed: int, out: str, **changes) -> TrainConfig:
    """The recipe's run for ``seed``: the setting, the batch, then ``changes`` (workflow,
    algo, lr, steps, evaluations...)."""
    return TrainConfig(**{**SETTING, **BATCH, "seed": seed, "out": str(out), **changes})


def run_one(config: TrainConfig, log=print) -> dict:
    """The run's summary: read back when finished with these settings, resumed from its
    checkpoint when one is there, else run (a run spans sessions by running it again)."""
    summary = Path(config.out) / "summary.json"
    if summary.is_file():
        stored = json.loads(summary.read_text())
        if same_settings(stored["config"], config, ignore=("out", "resume")):
            return stored
    resume = has_checkpoint(Path(config.out))
    return train(TrainConfig(**{**config.to_dict(), "resume": resume}), log=log)

RUN = dict(lr=1e-5, steps=40, eval_tasks=500, eval_k=2, skip_zero_advantage=True)
"""PROVISIONAL until the pilot ends: the update the pilot chose and the steps that fit 2 hours."""
