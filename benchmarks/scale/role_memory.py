"""Weights plus AdamW state of a three-role team on a pretrained LLM: one full copy per
role (``--per-role-policies``) against one frozen base and a LoRA adapter per role
(``--per-role-adapters lora``, all linear layers), on SmolLM2-135M-Instruct (the pinned
``smollm2-135m-instruct`` source, float32 on the CPU).

    python benchmarks/scale/role_memory.py [--rank 8]

Each variant runs in a fresh process: it loads the model, plays 4 tasks x G = 2 episodes
of SRPO-Search-v0 ``search_answer_verify`` (searcher, answerer, verifier: three roles;
8 new tokens, the advantages drawn at random so every role's update does work), builds
the learners the trainer builds and runs one update, after which the optimizer state
exists. It reports what the learners hold (parameters and AdamW moments, read off their
tensors) and the process's peak resident memory (which adds the update's activations,
the sampler and the interpreter). Writes ``benchmarks/results/role_memory.md`` and
``.json``.
"""

from __future__ import annotations

import argparse
import copy
import json
import resource
import subprocess
import sys
from pathlib import Path

MODEL = "smollm2-135m-instruct"
SETTING = dict(env="SRPO-Search-v0", workflow="search_answer_verify", model=MODEL,
               max_new_tokens=8)


def measure(variant: str, rank: int) -> dict:
    import numpy as np
    import torch

    from srpo_agents.config import TrainConfig
    from srpo_agents.learning.events import UnitBatch, build_units
    from srpo_agents.learning.learner import Learner, LearnerConfig
    from srpo_agents.learning.objective import ALGORITHMS
    from srpo_agents.models.adapters import attach_role_adapters
    from srpo_agents.models.policy import load_policy
    from srpo_agents.rollout.engine import RolloutEngine
    from srpo_agents.rollout.envs import env_factory
    from srpo_agents.running.step import update_policies
    from srpo_bench.memory import optimizer_bytes, trainable, weights_bytes

    torch.manual_seed(0)
    config = TrainConfig(**SETTING)
    policy = load_policy(MODEL)
    make = env_factory(config, "train", policy.count_tokens)
    envs = [make(i) for i in range(8)]
    options = [{"task_index": t, "episode_id": f"t{t}-g{g}"} for t in range(4) for g in range(2)]
    rollouts = RolloutEngine(policy, max_new_tokens=8, seed=0).run(envs, options)
    units, _ = build_units(rollouts, "set")
    roles = sorted({u.members[0].role for u in units})
    advantages = np.random.default_rng(0).normal(size=len(units))
    settings = LearnerConfig(lr=1e-6, microbatch_rows=8)
    algorithm = ALGORITHMS["srpo"]
    if variant == "full":
        learners = {role: Learner(copy.deepcopy(policy), algorithm, settings) for role in roles}
        del policy
    else:
        adapters = attach_role_adapters(policy, roles, rank=rank, alpha=2 * rank)
        learners = {"shared": Learner(adapters, algorithm, settings)}
    update_policies(learners, UnitBatch(units, advantages))
    models = [learner.policy.model for learner in learners.values()]
    return {"variant": variant, "roles": roles, "rank": rank,
            "trainable": trainable(models), "weights_bytes": weights_bytes(models),
            "optimizer_bytes": optimizer_bytes(lrn.optimizer for lrn in learners.values()),
            "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}


def gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:,.1f} MiB"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rank", type=int, default=8)
    parser.add_argument("--variant", choices=["full", "lora"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.variant:  # the child process: one variant, its figures on stdout
        print(json.dumps(measure(args.variant, args.rank)))
        return
    from srpo_bench.machine import describe, write_results

    rows = {}
    for variant in ("full", "lora"):
        done = subprocess.run([sys.executable, __file__, "--variant", variant, "--rank",
                               str(args.rank)], capture_output=True, text=True, check=True,
                              cwd=Path(__file__).parent)
        rows[variant] = json.loads(done.stdout.strip().splitlines()[-1])
    full, lora = rows["full"], rows["lora"]
    held = {name: row["weights_bytes"] + row["optimizer_bytes"] for name, row in rows.items()}
    lines = ["# Three roles on a pretrained LLM: per-role copies against per-role LoRA", "",
             f"Command: `python benchmarks/scale/role_memory.py --rank {args.rank}`", "",
             f"Machine: {describe()}.", "",
             f"SmolLM2-135M-Instruct, float32; roles {', '.join(full['roles'])} "
             f"(SRPO-Search-v0 search_answer_verify); LoRA rank {args.rank} on every linear "
             "layer; after one update (AdamW).", "",
             "| | trainable parameters | weights | AdamW state | weights + AdamW | "
             "peak RSS of the process |", "|---|---:|---:|---:|---:|---:|"]
    for name, label in (("full", "per_role_policies (a copy per role)"),
                        ("lora", "per_role_adapters lora (one base)")):
        row = rows[name]
        lines.append(f"| {label} | {row['trainable']:,} | {gib(row['weights_bytes'])} | "
                     f"{gib(row['optimizer_bytes'])} | {gib(held[name])} | "
                     f"{gib(row['peak_rss_bytes'])} |")
    lines += ["", f"Weights and AdamW state: {held['full'] / held['lora']:.1f}x less with "
              f"adapters; peak RSS: {full['peak_rss_bytes'] / lora['peak_rss_bytes']:.1f}x."]
    write_results("role_memory", lines, rows)


if __name__ == "__main__":
    main()
