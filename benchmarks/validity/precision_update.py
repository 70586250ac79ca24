"""Precision of one update, on the CPU: how far an lr-1e-5 AdamW step moves the weights
under float32, mixed bfloat16 (float32 masters, bfloat16 compute) and pure bfloat16, and
what a bfloat16 sampler does to the first step's ratio with pi_old from the sampler or
from the learner (``--pi-old``).

    python benchmarks/validity/precision_update.py                  # tiny and SmolLM2-135M-Instruct

For each model: 4 tasks x G = 4 episodes of SRPO-Math-v0 ``single`` (level 1, 32 new
tokens) are sampled once in float32; each precision then takes one SRPO update (lr 1e-5,
advantages alternating +1 / -1 so every unit pushes) on that same batch, from the same
starting weights. For pi_old, a bfloat16 copy of the model samples the batch (as
``--dtype pure-bfloat16`` or vLLM in bfloat16 would) and a float32 learner takes one
update with each choice. Writes ``benchmarks/results/precision_update.md`` and ``.json``.
"""

from __future__ import annotations

import argparse
import copy
import json
import tempfile
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[1] / "results"
PRECISIONS = ("float32", "bfloat16", "pure-bfloat16")


def tiny_model(folder: str) -> str:
    from srpo_agents.tiny import build_tiny_policy
    from srpo_envs import math_v0

    env = math_v0.parallel_env(workflow="parallel", seed=0)
    texts = [env.task(i).question + env.task(i).solution for i in range(300)]
    build_tiny_policy(texts, folder, hidden_size=64, num_layers=2, num_heads=2, seed=0)
    return folder


def sample(policy, seed: int = 0):
    """The batch: 4 tasks x 4 episodes, as SRPO units with alternating advantages."""
    import numpy as np
    import torch

    from srpo_agents.config import TrainConfig
    from srpo_agents.learning.events import build_units
    from srpo_agents.rollout.engine import RolloutEngine
    from srpo_agents.rollout.envs import env_factory

    torch.manual_seed(seed)
    make = env_factory(TrainConfig(model="x", env="SRPO-Math-v0", workflow="single",
                                   difficulty=(1,)), "train")
    envs = [make(i) for i in range(16)]
    engine = RolloutEngine(policy, max_new_tokens=32, seed=seed)
    rollouts = engine.run(envs, [{"task_index": t, "episode_id": f"t{t}-g{g}"}
                                 for t in range(4) for g in range(4)])
    units, _ = build_units(rollouts, "set")
    return units, np.array([1.0 if i % 2 else -1.0 for i in range(len(units))])


def one_update(policy, units, advantages, pi_old: str = "auto") -> dict:
    from srpo_agents.learning.learner import Learner, LearnerConfig
    from srpo_agents.learning.objective import ALGORITHMS

    before = {n: p.detach().clone() for n, p in policy.model.named_parameters()}
    figures = Learner(policy, ALGORITHMS["srpo"],
                      LearnerConfig(lr=1e-5, pi_old=pi_old, microbatch_rows=8)
                      ).update(units, advantages)
    total = sum(p.numel() for p in policy.model.parameters())
    moved = sum(int((p.detach() != before[n]).sum())
                for n, p in policy.model.named_parameters())
    return {"update_to_weight": figures["update_to_weight"], "moved_share": moved / total,
            "first_epoch_max_abs_log_ratio": figures["first_epoch_max_abs_log_ratio"],
            "clip_fraction": figures["clip_fraction"], "mismatch_kl": figures["mismatch_kl"],
            "behaviour_weight_mean": figures.get("behaviour_weight_mean")}


def measure(model: str) -> dict:
    import torch

    from srpo_agents.models.policy import Policy, load_policy, place

    base = load_policy(model)
    units, advantages = sample(base)
    start = copy.deepcopy(base.model.state_dict())
    by_precision = {}
    for dtype in PRECISIONS:
        policy = load_policy(model)
        policy.model.load_state_dict(start)
        place(policy, "cpu", dtype)
        by_precision[dtype] = one_update(policy, units, advantages, pi_old="sampler")
    sampler = Policy(copy.deepcopy(base.model).to(torch.bfloat16), base.tokenizer, "bf16")
    bf16_units, bf16_advantages = sample(sampler)
    by_pi_old = {}
    for pi_old in ("sampler", "learner"):
        policy = load_policy(model)
        policy.model.load_state_dict(start)
        by_pi_old[pi_old] = one_update(policy, bf16_units, bf16_advantages, pi_old)
    return {"precision": by_precision, "pi_old_with_a_bf16_sampler": by_pi_old,
            "rows": len(units), "parameters": sum(p.numel() for p in base.model.parameters())}


def report(results: dict) -> str:
    lines = ["# Precision of one update (CPU)", "",
             "`python benchmarks/validity/precision_update.py`: one SRPO update at lr 1e-5 on one "
             "batch of 4 tasks x G = 4 (SRPO-Math-v0 single, level 1, 32 new tokens), "
             "from the same starting weights.", "",
             "## The update's size by precision (a float32-sampled batch)", "",
             "| model | dtype | update_to_weight | weights moved |", "|---|---|---:|---:|"]
    for model, result in results.items():
        for dtype, row in result["precision"].items():
            lines.append(f"| {model} | {dtype} | {row['update_to_weight']:.3e} | "
                         f"{row['moved_share']:.2%} |")
    lines += ["", "## pi_old when a bfloat16 copy sampled the batch (float32 learner)", "",
              "| model | pi_old | first step max abs log ratio | clip fraction | mismatch_kl "
              "| behaviour weight mean |", "|---|---|---:|---:|---:|---:|"]
    for model, result in results.items():
        for pi_old, row in result["pi_old_with_a_bf16_sampler"].items():
            weight = row["behaviour_weight_mean"]
            lines.append(f"| {model} | {pi_old} | {row['first_epoch_max_abs_log_ratio']:.3g} | "
                         f"{row['clip_fraction']:.3f} | {row['mismatch_kl']:.3g} | "
                         + ("-" if weight is None else f"{weight:.4f}") + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["tiny", "smollm2-135m-instruct"])
    args = parser.parse_args()
    results = {}
    with tempfile.TemporaryDirectory() as scratch:
        for model in args.models:
            path = tiny_model(scratch) if model == "tiny" else model
            results[model] = measure(path)
            print(model, json.dumps(results[model], indent=1))
    (RESULTS / "precision_update.json").write_text(json.dumps(results, indent=1) + "\n")
    (RESULTS / "precision_update.md").write_text(report(results))
    print(report(results))


if __name__ == "__main__":
    main()
