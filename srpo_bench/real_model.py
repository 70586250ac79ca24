"""SmolLM2-135M-Instruct's real-model settings (issue 50), shared by the benchmarks that
measure them: the candidate settings and their chooser
(``benchmarks/real_model/real_model_candidates.py``), the learning runs
(``benchmarks/real_model/real_model_learns.py``); their runs go through
``srpo_agents.running.real_recipe.run_one``."""

from __future__ import annotations

from srpo_agents.config import TrainConfig
from srpo_envs.envs.math_env import PROMPT_SETS

TOKENS = 128
MODEL = "smollm2-135m-instruct"

# The one-example prompts: the math env's named set "example-v1" (its describe output).
EXAMPLE = PROMPT_SETS["example-v1"]

MATH = {"env": "SRPO-Math-v0", "max_turns": 1}
CANDIDATES: dict[str, dict] = {
    "math L0, default prompt, T 1.0": {**MATH, "difficulty": (0,), "temperature": 1.0},
    "math L1, default prompt, T 1.0": {**MATH, "difficulty": (1,), "temperature": 1.0},
    "math L0, example prompt, T 1.0": {**MATH, "difficulty": (0,), "temperature": 1.0,
                                       "prompts": "example"},
    "math L1, example prompt, T 1.0": {**MATH, "difficulty": (1,), "temperature": 1.0,
                                       "prompts": "example"},
    "math L0, example prompt, T 0.7": {**MATH, "difficulty": (0,), "temperature": 0.7,
                                       "prompts": "example"},
    "math L1, example prompt, T 0.7": {**MATH, "difficulty": (1,), "temperature": 0.7,
                                       "prompts": "example"},
    "math L2, example prompt, T 0.7": {**MATH, "difficulty": (2,), "temperature": 0.7,
                                       "prompts": "example"},
    "countdown L0, default prompt, T 1.0": {"env": "SRPO-Countdown-v0", "difficulty": (0,),
                                            "temperature": 1.0},
    "search 1-hop, default prompt, T 1.0": {"env": "SRPO-Search-v0", "difficulty": (1,),
                                            "temperature": 1.0, "max_turns": 2},
    "math L1 team (solve_verify), example prompts, T 0.7": {
        **MATH, "difficulty": (1,), "temperature": 0.7, "prompts": "example",
        "workflow": "solve_verify"},
}


def config_for(settings: dict) -> TrainConfig:
    settings = dict(settings)
    prompts = EXAMPLE if settings.pop("prompts", "") == "example" else {}
    extra = {"prompts": prompts} if prompts else {}
    if settings["env"] == "SRPO-Search-v0":
        extra["hops"] = settings.pop("difficulty")
    return TrainConfig(model=MODEL, workflow=settings.pop("workflow", "single"),
                       max_new_tokens=TOKENS, extra_env_kwargs=extra, seed=0, **settings)


def chosen(results: dict) -> str | None:
    """The rule: a one-agent setting with avg@8 in [0.15, 0.60], the most mixed groups."""
    fit = [name for name, r in results.items()
           if r["settings"].get("workflow", "single") == "single"
           and 0.15 <= r["avg_at_8"] <= 0.60]
    if not fit:
        return None
    return min(fit, key=lambda n: (-results[n]["mixed_groups"],
                                   results[n]["settings"]["temperature"],
                                   list(CANDIDATES).index(n)))
