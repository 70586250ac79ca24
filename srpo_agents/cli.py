"""The ``srpo`` command: ``srpo train`` and ``srpo eval``.

    srpo train --env SRPO-Math-v0 --workflow parallel --n-agents 3 --algo srpo \\
               --model tiny --steps 20 --group-size 8 --out runs/demo
    srpo eval --checkpoint runs/demo --env SRPO-Math-v0 --workflow parallel --k 16
    srpo eval --checkpoint runs/demo --env SRPO-Math-v0 --benchmarks aime24,amc23,math500,gsm8k

Every ``TrainConfig`` field is a ``train`` flag. ``eval`` takes a run directory (its
``policy/``, or its ``policy-<role>/`` folders after ``--per-role-policies``), a saved
model folder or a Hugging Face model name.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import typing
from pathlib import Path

from srpo_agents.config import TrainConfig


def _field_type(config_type, field: dataclasses.Field):
    hints = typing.get_type_hints(config_type)
    return hints[field.name]


def add_config_flags(parser: argparse.ArgumentParser, skip: set[str]) -> None:
    for field in dataclasses.fields(TrainConfig):
        if field.name in skip:
            continue
        flag = "--" + field.name.replace("_", "-")
        kind = _field_type(TrainConfig, field)
        default = (field.default if field.default is not dataclasses.MISSING
                   else field.default_factory())
        if kind is bool:
            parser.add_argument(flag, action="store_true", default=default)
        elif field.name == "difficulty":
            parser.add_argument(flag, type=int, nargs="+", default=list(default))
        elif field.name == "extra_env_kwargs":
            parser.add_argument(flag, type=json.loads, default=default,
                                help="JSON object of extra env constructor arguments")
        else:
            base = {int: int, float: float}.get(kind, str)
            parser.add_argument(flag, type=base, default=default)


def config_from_args(args: argparse.Namespace, **overrides) -> TrainConfig:
    values = {f.name: getattr(args, f.name) for f in dataclasses.fields(TrainConfig)
              if hasattr(args, f.name)}
    values.update(overrides)
    return TrainConfig(**values)


def cmd_train(args: argparse.Namespace) -> int:
    from srpo_agents.train import train

    summary = train(config_from_args(args))
    print(format_table(summary["before"], summary["after"]))
    print(f"run directory: {summary['config']['out']}")
    return 0


def format_table(before: dict, after: dict | None = None) -> str:
    k = before["k"]
    rows = [(f"avg@{k}", "avg_at_k"), (f"pass@{k}", "pass_at_k"),
            ("tokens per task", "tokens_per_task"), ("tool calls per task", "tool_calls_per_task")]
    if "em" in before:
        rows += [("EM", "em"), ("F1", "f1")]
    head = "| metric | before | after |\n|---|---:|---:|" if after else "| metric | value |\n|---|---:|"
    lines = [head]
    for label, key in rows:
        cells = []
        for result in (before, after) if after else (before,):
            value = result.get(key)
            err = result.get(f"{key}_stderr")
            cells.append(f"{value:.3f} ± {err:.3f}" if err is not None else f"{value:.2f}")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def cmd_eval(args: argparse.Namespace) -> int:
    from srpo_agents.evaluate import evaluate
    from srpo_agents.policy import load_policy
    from srpo_agents.train import held_out, make_engine

    source = Path(args.checkpoint)
    role_dirs = sorted(source.glob("policy-*")) if source.is_dir() else []
    if (source / "policy").is_dir():
        model_path = source / "policy"
    elif role_dirs:  # a run with per-role policies
        model_path = role_dirs[0]
    else:
        model_path = source
    location = str(model_path) if model_path.exists() else args.checkpoint
    tiny = (model_path / "tokenizer.json").is_file() and _is_tiny(model_path)
    config = config_from_args(args, model="tiny" if tiny else location,
                              eval_tasks=args.tasks, eval_k=args.k)
    policy = load_policy(location, device=config.device)
    role_policies = {d.name.removeprefix("policy-"): load_policy(str(d), device=config.device)
                     for d in role_dirs if not (source / "policy").is_dir()}
    engine = make_engine(config, policy, role_policies)
    if args.benchmarks:
        from srpo_agents.benchmark_sets import (
            evaluate_benchmarks,
            format_benchmark_table,
            macro_average,
        )

        results = evaluate_benchmarks(engine, config, args.benchmarks, args.k, args.tasks,
                                      args.data_dir or None,
                                      log=lambda line: print(line, file=sys.stderr))
        print(format_benchmark_table(results))
        output = {"benchmarks": results, "macro_average": macro_average(results)}
    else:
        output = evaluate(engine, *held_out(config), args.k, tag="cli")
        print(format_table(output))
    if args.json:
        Path(args.json).write_text(json.dumps(output, indent=2))
    return 0


def _is_tiny(model_path: Path) -> bool:
    config = json.loads((model_path / "config.json").read_text()) if (
        model_path / "config.json").is_file() else {}
    return config.get("vocab_size", 10**6) < 1000


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="srpo", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    train = commands.add_parser("train", help="train a team with SRPO or a baseline")
    add_config_flags(train, skip=set())
    train.set_defaults(run=cmd_train)
    ev = commands.add_parser("eval", help="avg@k, pass@k, EM/F1, tokens, tool calls")
    ev.add_argument("--checkpoint", required=True,
                    help="run directory, saved model folder or Hugging Face model name")
    ev.add_argument("--k", type=int, default=16)
    ev.add_argument("--tasks", type=int, default=500)
    ev.add_argument("--json", default="", help="also write the result to this file")
    ev.add_argument("--benchmarks", default="",
                    help="comma-separated benchmark names (math: aime24, amc23, math500, "
                         "gsm8k; search: nq, triviaqa, popqa, hotpotqa, 2wiki, musique, "
                         "bamboogle), 'all', or JSONL paths: one table row each")
    ev.add_argument("--data-dir", default="",
                    help="folder holding math/ and search/ (default: $SRPO_DATA_DIR, else "
                         "../shared/data)")
    add_config_flags(ev, skip={"model", "steps", "eval_tasks", "eval_k", "out", "resume",
                               "lr", "epochs", "minibatch_units", "eps_low", "eps_high",
                               "beta", "max_grad_norm", "save_every", "eval_every",
                               "warmstart_minutes", "warmstart_target", "warmstart_steps",
                               "warmstart_skill", "warmstart_decay", "dynamic_sampling", "group_size",
                               "tasks_per_step", "algo", "microbatch_rows", "advantage",
                               "per_role_policies", "warmstart_dir"})
    ev.set_defaults(run=cmd_eval)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except (ValueError, FileNotFoundError) as err:
        print(f"srpo: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
