"""``srpo train``: its flags, ``--quick``, the machine's evaluation sizes, and the run."""

from __future__ import annotations

import argparse
import os
import sys

from srpo_agents.cli.flags import (
    add_config_flags,
    apply_run_file,
    config_from_args,
    read_run_file,
    typed_names,
)
from srpo_agents.cli.tables import cut_off_note, eval_title, format_table

QUICK: dict[str, object] = {
    "steps": 2, "tasks_per_step": 2, "group_size": 2, "eval_tasks": 4, "eval_k": 2,
    "max_new_tokens": 16,
}
"""``srpo train --quick``: the values it sets (a flag given with it wins)."""


QUICK_TINY: dict[str, object] = {
    "warmstart_steps": 2, "warmstart_target": 1.0, "warmstart_episodes": 200,
    "warmstart_eval_tasks": 4, "warmstart_batch_size": 16,
}
"""What ``--quick`` adds with ``--model tiny``: the warm start imitates 200 reference
episodes (a full run's 20000 alone take a minute on the search env), checks 4 validation
tasks and steps on batches of 16 (a batch of 64 long search prompts is several seconds a
step). Measured: 10 s on Math, 12 s on Countdown, 37 s on Search (2 busy CPU cores)."""


def apply_quick(args: argparse.Namespace) -> list[str]:
    """Set the ``QUICK`` values (and ``QUICK_TINY``'s with ``--model tiny``) that neither
    the command line nor the run file set; returns those set."""
    typed = (typed_names(args) or set()) | getattr(args, "file_keys", set())
    preset = {**QUICK, **(QUICK_TINY if args.model == "tiny" else {})}
    applied = [name for name in preset if name not in typed]
    for name in applied:
        setattr(args, name, preset[name])
    return applied


def apply_train_eval_sizes(args: argparse.Namespace) -> str:
    """``srpo train``'s held-out sizes for the machine (``plan.TRAIN_EVAL_SIZES``) when
    neither ``--eval-tasks`` nor ``--eval-k`` is typed or in the run file (nor set by
    ``--quick``); returns the machine's name when it set them, else ""."""
    from srpo_agents.models.policy import resolve_device
    from srpo_agents.running.plan import TRAIN_EVAL_SIZES

    typed = typed_names(args)
    given = (set(QUICK) if args.quick else set()) | getattr(args, "file_keys", set())
    if typed is None or {"eval_tasks", "eval_k"} & (typed | given):
        return ""
    machine = "cpu" if resolve_device(args.device) == "cpu" else "accelerator"
    args.eval_tasks, args.eval_k = TRAIN_EVAL_SIZES[machine]
    return machine


def cmd_train(args: argparse.Namespace) -> int:
    from srpo_agents.running.train import train

    if args.config:
        apply_run_file(args, read_run_file(args.config))
    if args.quick:
        applied = apply_quick(args)
        preset = set(QUICK) | (set(QUICK_TINY) if args.model == "tiny" else set())
        typed = sorted(preset - set(applied))
        whose = ("typed" if "model" in (typed_names(args) or set()) | getattr(args, "file_keys", set())
                 else "the default; --model tiny for the test-scale model")
        print(f"--quick: model {args.model} ({whose}); "
              + ", ".join(f"{n}={getattr(args, n)}" for n in applied)
              + (f" (typed flags kept: {typed})" if typed else ""), file=sys.stderr)
    sized = apply_train_eval_sizes(args)
    config = config_from_args(args)
    if sized:
        from srpo_agents.models.registry import check_model

        check_model(config.model)  # a bad --model is the one line printed, as without
        print(f"held-out {config.eval_tasks} tasks x k={config.eval_k} before and after: "
              f"{sized}'s defaults (--eval-tasks and --eval-k change them)", file=sys.stderr)
    if config.ray_ranks and "RANK" not in os.environ:  # the launcher; its ranks have RANK
        from srpo_agents.running.ray_ranks import launch

        return launch(args.argv, config.ray_ranks, config.device, config.ray_address,
                      log=lambda line: print(line, file=sys.stderr))
    summary = train(config)
    after = summary["after"]
    print(format_table(summary["before"], after,
                       eval_title(config, after["tasks"], after["k"], config.model)))
    note = cut_off_note(after, config.max_new_tokens)
    if note:
        print(note)
    print(f"run directory: {summary['config']['out']}")
    if config.data_parallel:  # every rank's files are written: leave without teardown
        from srpo_agents.models.sharding import end_rank

        end_rank()
    return 0


def add_parser(commands) -> None:
    """``srpo train`` under ``commands`` (the ``srpo`` parser's subparsers)."""
    train = commands.add_parser("train", help="train a team with SRPO or a baseline")
    train.add_argument("--config", default="",
                       help="a run file (YAML or JSON) of settings by their names (a run's "
                            "own config.json is one); flags typed here override it")
    train.add_argument("--quick", action="store_true",
                       help="a preset for trying things out: about a minute on 2 CPU "
                            "cores with the default model (52 s measured once it is cached, "
                            "70 s the first time, which fetches and converts it): "
                            + ", ".join(f"{n}={v}" for n, v in QUICK.items())
                            + "; flags given with it override its values")
    add_config_flags(train, skip={"model_options"})
    from srpo_agents.tiny.config import TinyConfig

    tiny = train.add_argument_group(
        "tiny model (--model tiny only)",
        "The test-scale model (srpo_agents.tiny): a 1M-parameter byte-level model built "
        "here and taught by a supervised warm start, so that tests and CPU benchmarks run "
        "in minutes. A run records these in model_options.")
    add_config_flags(tiny, skip=set(), config_type=TinyConfig)
    train.set_defaults(run=cmd_train)
