"""SmolLM2-135M-Instruct's real-model settings (issue 50), shared by the benchmarks that
measure them: the candidate settings and their chooser
(``benchmarks/real_model_candidates.py``), the learning runs
(``benchmarks/real_model_learns.py``) and ``run_one``, which reads a finished run back,
resumes one from its checkpoint or runs it (``benchmarks/real_model_run.py`` too)."""

from __future__ import annotations

import json
from pathlib import Path

from srpo_agents.config import TrainConfig, same_settings
from srpo_agents.running.checkpoint import has_checkpoint
from srpo_agents.running.train import train

TOKENS = 128
MODEL = "smollm2-135m-instruct"

EXAMPLE_SOLVER = (
    "You are a math solver. Work out the answer in one short line and put it in "
    "\\boxed{}.\n\nExample problem: A shelf holds 6 cups and 5 more cups are put on it. "
    "How many cups are on the shelf?\nExample answer: 6 + 5 = 11, so the answer is "
    "\\boxed{11}.\n\nProblem: {question}\n")
EXAMPLE_VERIFIER = (
    "You are a math verifier. Check the solution to the problem. If its final answer is "
    "correct, reply VERDICT: ACCEPT. Otherwise reply VERDICT: REJECT and the corrected "
    "answer in \\boxed{}.\n\nExample: for the problem \"A shelf holds 6 cups and 5 more "
    "cups are put on it. How many cups are on the shelf?\" and the solution \"6 + 5 = 12, "
    "so the answer is \\boxed{12}.\" reply: VERDICT: REJECT. 6 + 5 = 11, so the answer is "
    "\\boxed{11}.\n\nProblem: {question}\n\nSolution:\n{solution}\n")
EXAMPLE = {"solver": EXAMPLE_SOLVER, "verifier": EXAMPLE_VERIFIER}

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


def run_one(config: TrainConfig) -> dict:
    """The run's summary: read back when finished, resumed from its checkpoint, or run."""
    summary = Path(config.out) / "summary.json"
    if summary.is_file():
        stored = json.loads(summary.read_text())
        if same_settings(stored["config"], config, ignore=("out", "resume")):
            return stored
    resume = has_checkpoint(Path(config.out))
    return train(TrainConfig(**{**config.to_dict(), "resume": resume}))
