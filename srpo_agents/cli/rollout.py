"""``srpo rollout``: sample episodes and write them as Transition rows (JSONL)."""

from __future__ import annotations

import argparse

from srpo_agents.cli.evaluate import check_positive, eval_skipped_flags, load_engine
from srpo_agents.cli.flags import add_config_flags


def cmd_rollout(args: argparse.Namespace) -> int:
    from srpo_agents.rollout.envs import env_factory, env_pool
    from srpo_agents.rollout.files import write_rollouts

    check_positive(tasks=args.tasks)
    config, engine = load_engine(args)
    split = "test" if args.held_out else "train"
    make = env_factory(config, split, engine.policy.count_tokens)
    envs = env_pool(make, args.tasks * config.group_size, config.seed)
    options = [{"task_index": t, "episode_id": f"t{t}-g{g}"}
               for t in range(args.tasks) for g in range(config.group_size)]
    rollouts = engine.run(envs, options)
    rows = write_rollouts(rollouts, args.out)
    print(f"wrote {len(rollouts)} episodes ({rows} transitions) to {args.out}")
    return 0


def add_parser(commands) -> None:
    """``srpo rollout`` under ``commands``."""
    ro = commands.add_parser(
        "rollout", help="sample episodes and write them as Transition rows (JSONL) with "
                        "token ids and log-probs, for other trainers")
    ro.add_argument("--checkpoint", required=True,
                    help="run directory, saved model folder, .gguf file, known source "
                         "(smollm2-135m-instruct) or Hugging Face model name")
    ro.add_argument("--out", required=True, help="JSONL file to write (srpo_agents.rollout.files)")
    ro.add_argument("--tasks", type=int, default=8,
                    help="tasks to sample (task indices 0..tasks-1; default: %(default)s)")
    ro.add_argument("--held-out", action="store_true",
                    help="sample the env's held-out (test) tasks instead of its train tasks")
    # rollout samples the train split, or the test split with --held-out
    add_config_flags(ro, skip=eval_skipped_flags() - {"group_size", "dataset"})
    ro.set_defaults(run=cmd_rollout)
