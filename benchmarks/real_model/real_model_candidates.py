"""Where does SmolLM2-135M-Instruct have signal? (issue 50, item 1). The base model's
accuracy and the share of mixed groups (some of G = 8 episodes right, some wrong: the
only groups that carry a relative advantage) on candidate settings: math levels,
Countdown, one-hop search, each with its prompt and sampling temperature.

    python benchmarks/real_model/real_model_candidates.py [--tasks 64] [--only NAME ...]

Every candidate plays ``--tasks`` tasks of the **validation** split (never the test split,
which only a final evaluation reads) G = 8 times at its temperature, 128 new tokens an
agent, hf backend, float32, one process; finished candidates are read back from the JSON
(the command resumes). Per candidate: avg@8 (mean correctness), pass@8, the mixed-group
share, the readable share (math: a ``\\boxed{}`` answer; Countdown: an ``<answer>``
equation; search: an answer), accuracy among readable answers, tokens per task and the
share of responses cut off at the token limit. The rule for choosing, fixed before the
table: among the one-agent settings, one whose avg@8 is within 0.15-0.60 and, among
those, the largest mixed-group share (ties: the lower temperature, then the first
listed); the env's team workflow is then trained in that setting and weighed against
one agent (issue 50). The team's row shows the team's base in a setting like it.

Writes benchmarks/results/real_model_candidates.json and .md.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import torch

from srpo_agents.models.policy import load_policy
from srpo_agents.rollout.engine import engine_for
from srpo_agents.running.evaluate import episode_correct, held_out, run_tasks
from srpo_bench.real_model import CANDIDATES, MODEL, TOKENS, chosen, config_for

RESULTS = Path(__file__).resolve().parents[1] / "results"
GROUP = 8
def readable(info: dict, env: str) -> bool:
    """Whether the env could read an answer of the form its prompt asks for."""
    if env == "SRPO-Math-v0":
        return bool(info.get("boxed"))
    if env == "SRPO-Countdown-v0":
        return bool(info.get("equation"))
    return bool(info.get("final_answer"))


def measure(policy, settings: dict, tasks: int) -> dict:
    config = config_for(settings)
    engine = engine_for(config, policy)
    envs, indices = held_out(config, policy.count_tokens, split="validation", wanted=tasks)
    right: dict[int, int] = {}
    episodes, readable_n, right_readable, tokens, cut = 0, 0, 0, 0, 0
    start = time.monotonic()
    for task, _, _, rollout in run_tasks(engine, envs, indices, GROUP, "candidate",
                                         chunk_size=64):
        final = rollout.transitions[-1].info if rollout.transitions else {}
        ok, legible = episode_correct(rollout), readable(final, config.env)
        right[task] = right.get(task, 0) + ok
        episodes += 1
        readable_n += legible
        right_readable += ok and legible
        tokens += rollout.generated_tokens
        cut += any(not s.finished for s in rollout.samples.values())
    rates = [n / GROUP for n in right.values()]
    mean = sum(rates) / len(rates)
    return {"settings": {k: list(v) if isinstance(v, tuple) else v
                         for k, v in settings.items()},
            "prompt_version": "example-v1" if settings.get("prompts") else "default",
            "tasks": len(rates), "group": GROUP, "max_new_tokens": TOKENS,
            "avg_at_8": mean,
            "avg_at_8_se": math.sqrt(sum((r - mean) ** 2 for r in rates)
                                     / (len(rates) - 1) / len(rates)),
            "pass_at_8": sum(n > 0 for n in right.values()) / len(rates),
            "mixed_groups": sum(0 < n < GROUP for n in right.values()) / len(rates),
            "readable": readable_n / episodes,
            "accuracy_when_readable": right_readable / readable_n if readable_n else 0.0,
            "tokens_per_task": tokens / episodes, "cut_off": cut / episodes,
            "seconds": time.monotonic() - start}


def write_table(results: dict) -> None:
    lines = ["# Where SmolLM2-135M-Instruct has signal (issue 50)", "",
             "`python benchmarks/real_model/real_model_candidates.py`: the base model on each "
             "setting, "
             "the validation split, G = 8 episodes of each task at the setting's "
             f"temperature, {TOKENS} new tokens an agent, hf backend, float32, 2 CPU cores. "
             "avg@8 is the mean correctness (+- its standard error over tasks); mixed "
             "groups: tasks with some but not all of their 8 episodes right; readable: the "
             "answer in the form the prompt asks for. Prompt `example-v1`: the math roles' "
             "prompts with one worked example (`EXAMPLE` in `srpo_bench/real_model.py`). Seconds ran beside "
             "other work on the same cores.", "",
             "| setting | tasks | avg@8 | pass@8 | mixed groups | readable | accuracy "
             "when readable | tokens / task | cut off | seconds |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, r in results.items():
        lines.append(
            f"| {name} | {r['tasks']} | {r['avg_at_8']:.3f} +- {r['avg_at_8_se']:.3f} | "
            f"{r['pass_at_8']:.3f} | {r['mixed_groups']:.3f} | {r['readable']:.3f} | "
            f"{r['accuracy_when_readable']:.3f} | {r['tokens_per_task']:.0f} | "
            f"{r['cut_off']:.3f} | {r['seconds']:.0f} |")
    choice = chosen(results)
    lines += ["", f"Chosen by the rule (the docstring): {choice}." if choice else
              "No one-agent setting has avg@8 within 0.15-0.60: none is chosen."]
    (RESULTS / "real_model_candidates.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=64)
    parser.add_argument("--only", nargs="*", default=None, help="candidate names")
    args = parser.parse_args()
    path = RESULTS / "real_model_candidates.json"
    results = json.loads(path.read_text()) if path.exists() else {}
    policy = load_policy(MODEL, dtype=torch.float32)
    for name, settings in CANDIDATES.items():
        if name in results or (args.only and name not in args.only):
            continue
        torch.manual_seed(0)
        results[name] = measure(policy, settings, args.tasks)
        path.write_text(json.dumps(results, indent=1) + "\n")
        print(name, json.dumps(results[name]), flush=True)
    write_table({n: results[n] for n in CANDIDATES if n in results})


if __name__ == "__main__":
    main()
