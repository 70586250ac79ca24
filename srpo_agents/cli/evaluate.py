"""``srpo eval``: a run directory's recorded settings under the typed flags, and the evaluation."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

from srpo_agents.cli.flags import NOT_INHERITED, add_config_flags, typed_names
from srpo_agents.cli.tables import cut_off_note, eval_title, format_table
from srpo_agents.config import TrainConfig


def check_positive(**values) -> None:
    for name, value in values.items():
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"--{name.replace('_', '-')}={value!r}: expected an int >= 1")


def recorded_config(run_dir: Path) -> tuple[dict, Path] | None:
    """(config, the file it came from) that a run directory recorded: its newest
    checkpoint's (written at every save and at the last step), else its summary.json
    (a run of 0 steps); None for a folder that holds neither (a bare model)."""
    from srpo_agents.running.checkpoint import CheckpointError, checkpoint_dirs, read_state

    for folder in checkpoint_dirs(run_dir):
        try:
            payload, _ = read_state(folder)
            return dict(payload["config"]), folder / "state.json"
        except (CheckpointError, KeyError, TypeError):
            continue  # a torn checkpoint: the older one recorded the same settings
    summary = run_dir / "summary.json"
    if summary.is_file():
        try:
            return dict(json.loads(summary.read_text(encoding="utf-8"))["config"]), summary
        except (ValueError, KeyError, TypeError) as err:
            raise ValueError(f"{summary}: not a run summary with a 'config' ({err})") from None
    return None


def sampling_config(args: argparse.Namespace, recorded: tuple[dict, Path] | None,
                    **overrides) -> TrainConfig:
    """The config of an ``eval`` or ``rollout``: the run's recorded settings (less
    ``NOT_INHERITED``), then every flag typed on the command line, then ``overrides``;
    a setting neither recorded nor typed takes its flag's default."""
    names = {f.name for f in dataclasses.fields(TrainConfig)} - {"out"}
    values = {}
    if recorded is not None:
        values = {k: v for k, v in recorded[0].items() if k in names - NOT_INHERITED}
    typed = typed_names(args)
    flags = {n for n in names if hasattr(args, n)}
    given = flags if typed is None else flags & typed
    values.update({n: getattr(args, n) for n in flags if n in given or n not in values})
    values.update(overrides)
    try:
        config = TrainConfig(**values, training=False)
    except (ValueError, FileNotFoundError) as err:
        came = [n for n in values if recorded and n in recorded[0] and n not in given
                and str(err).startswith(f"{n}=")]
        if not came:
            raise
        raise type(err)(f"{err} (recorded in {recorded[1]}; --{came[0].replace('_', '-')} "
                        f"overrides it)") from None
    if recorded is not None:
        typed_over = sorted(n for n in given if n in recorded[0]
                            and recorded[0][n] != _jsonable(getattr(config, n)))
        print(f"settings of the run recorded in {recorded[1]}"
              + (f"; overridden by {', '.join('--' + n.replace('_', '-') for n in typed_over)}"
                 if typed_over else ""), file=sys.stderr)
    return config


def _jsonable(value):
    return json.loads(json.dumps(value))


def load_engine(args: argparse.Namespace, **overrides):
    """The config and rollout engine of ``--checkpoint``: a run directory's recorded
    settings with the typed flags over them (``sampling_config``), or the flags alone."""
    from srpo_agents.models.policy import load_policy, precision_kwargs, resolve_device
    from srpo_agents.rollout.engine import engine_for

    source = Path(args.checkpoint)
    role_dirs = sorted(source.glob("policy-*")) if source.is_dir() else []
    if (source / "policy").is_dir():
        model_path = source / "policy"
    elif role_dirs:  # a run with per-role policies
        model_path = role_dirs[0]
    else:
        model_path = source
    location = str(model_path) if model_path.exists() else args.checkpoint
    if not model_path.exists():  # a mistyped run folder or name: one line, at once
        from srpo_agents.models.sources import ModelSourceError, resolve_model

        try:
            resolve_model(location)
        except ModelSourceError as error:  # the flag here is --checkpoint
            raise ModelSourceError(str(error).replace("--model", "--checkpoint", 1)) from None
    recorded = recorded_config(source) if source.is_dir() else None
    config = sampling_config(args, recorded, model=_source_name(model_path, location),
                             **overrides)
    device = resolve_device(config.device)
    precision = precision_kwargs(config.dtype, device)
    policy = load_policy(location, device=device, **precision)
    role_policies = {d.name.removeprefix("policy-"): load_policy(str(d), device=device,
                                                                 **precision)
                     for d in role_dirs if not (source / "policy").is_dir()}
    return config, engine_for(config, policy, role_policies)


EVAL_SIZES = {"cpu": (50, 2), "accelerator": (500, 4)}
"""``srpo eval``'s default (tasks, k) by machine. On 2 CPU cores the default model plays
an episode in 1 to 7 s (docs/training.md), so 100 episodes take minutes; 500 tasks is
the size of the project's paired comparisons, for a GPU or a long run."""


EVAL_CHUNK = 16
"""Episodes ``srpo eval`` plays at once on the CPU."""


def eval_sizes(args: argparse.Namespace, device: str) -> tuple[int, int]:
    """(tasks, k) of ``srpo eval``: the typed flags, else ``EVAL_SIZES`` for the device."""
    tasks, k = EVAL_SIZES["cpu" if device == "cpu" else "accelerator"]
    tasks = tasks if args.tasks is None else args.tasks
    k = k if args.k is None else args.k
    check_positive(tasks=tasks, k=k)
    return tasks, k


def cmd_eval(args: argparse.Namespace) -> int:
    from srpo_agents.models.policy import resolve_device
    from srpo_agents.running.evaluate import evaluate, held_out

    device = resolve_device(args.device)
    tasks, k = eval_sizes(args, device)
    config, engine = load_engine(args, eval_tasks=tasks, eval_k=k)
    sized = args.tasks is not None or args.k is not None
    print(f"srpo eval: {eval_title(config, tasks, k, args.checkpoint)} = {tasks * k} "
          f"episodes per set on {device}"
          + ("" if sized else f" (the defaults for {device}: --tasks and --k change them)"),
          file=sys.stderr, flush=True)
    # small chunks on the CPU so that the progress (and its ETA) moves every few episodes
    chunk = EVAL_CHUNK if device == "cpu" else None
    if args.benchmarks:
        from srpo_agents.running.benchmark_sets import (
            evaluate_benchmarks,
            format_benchmark_table,
            macro_average,
        )

        results = evaluate_benchmarks(engine, config, args.benchmarks, k, tasks,
                                      args.data_dir or None,
                                      log=lambda line: print(line, file=sys.stderr),
                                      chunk_size=chunk)
        print(eval_title(config, tasks, k, args.checkpoint) + "\n")
        print(format_benchmark_table(results))
        output = {"benchmarks": results, "macro_average": macro_average(results)}
    else:
        output = evaluate(engine, *held_out(config), k, tag="cli", progress="srpo eval",
                          chunk_size=chunk)
        print(format_table(output, title=eval_title(config, output["tasks"], k,
                                                    args.checkpoint)))
        note = cut_off_note(output, config.max_new_tokens)
        if note:
            print(note)
    if args.json:
        Path(args.json).write_text(json.dumps(output, indent=2))
    return 0


def _source_name(model_path: Path, location: str) -> str:
    """The ``--model`` of a saved folder: a plug-in's name when the folder holds one of
    its models (the tiny model), else the folder or name itself."""
    from srpo_agents.models.registry import model_source, plugins

    if model_path.is_dir():
        for name in plugins():
            if model_source(name).owns(model_path):
                return name
    return location


def eval_skipped_flags() -> set[str]:
    """``TrainConfig`` fields that are not ``srpo eval`` flags: the whole update (the
    algorithm's and the learner's sections, but the temperature, which samples), the
    run's files, trackers and training-time evaluations, the model's training layout,
    Ray, and the training file (eval reads the test split). A run directory's recorded
    values still apply to them."""
    from srpo_agents.config import AlgorithmConfig, LearnerConfig

    update = {f.name for section in (AlgorithmConfig, LearnerConfig)
              for f in dataclasses.fields(section)} - {"temperature"}
    return update | {"model", "model_options", "per_role_policies", "per_role_adapters",
                     "lora_rank", "lora_alpha", "lora_targets", "eval_tasks", "eval_k",
                     "eval_every", "curve_tasks", "out", "resume", "save_every",
                     "tensorboard", "report_to", "rollout_workers", "ray_address",
                     "ray_ranks", "dataset"}


def add_parser(commands) -> None:
    """``srpo eval`` under ``commands``."""
    ev = commands.add_parser("eval", help="avg@k, pass@k, EM/F1, tokens, tool calls")
    ev.add_argument("--checkpoint", required=True,
                    help="run directory, saved model folder, .gguf file, known source "
                         "(smollm2-135m-instruct) or Hugging Face model name")
    ev.add_argument("--k", type=int, default=None,
                    help="episodes per task: avg@k and pass@k (default: "
                         f"{EVAL_SIZES['cpu'][1]} on the CPU, "
                         f"{EVAL_SIZES['accelerator'][1]} on a GPU)")
    ev.add_argument("--tasks", type=int, default=None,
                    help="held-out tasks, per benchmark with --benchmarks (default: "
                         f"{EVAL_SIZES['cpu'][0]} on the CPU, "
                         f"{EVAL_SIZES['accelerator'][0]} on a GPU; 500 for a paired "
                         "comparison)")
    ev.add_argument("--json", default="", help="also write the result to this file")
    ev.add_argument("--benchmarks", default="",
                    help="comma-separated benchmark names (math: aime24, amc23, math500, "
                         "gsm8k; search: nq, triviaqa, popqa, hotpotqa, 2wiki, musique, "
                         "bamboogle), 'all', or JSONL paths: one table row each")
    ev.add_argument("--data-dir", default="",
                    help="folder holding math/ and search/ (default: $SRPO_DATA_DIR, else the "
                         "first of $SRPO_CACHE_DIR/data or ~/.cache/srpo/data, where srpo "
                         "fetch-data writes, and ../shared/data that holds the file)")
    ev_skip = eval_skipped_flags()
    # eval reads the test split: the training file (--dataset) plays no part there
    add_config_flags(ev, skip=ev_skip)
    ev.set_defaults(run=cmd_eval)
