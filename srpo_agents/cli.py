"""The ``srpo`` command: train, evaluate, sample and list teams of LLM agents.

    srpo envs
    srpo train --quick --env SRPO-Countdown-v0 --out runs/try
    srpo train --env SRPO-Math-v0 --workflow solve_verify --algo srpo \\
               --model smollm2-135m-instruct --steps 20 --group-size 8 --out runs/demo
    srpo eval --checkpoint runs/demo --k 16
    srpo eval --checkpoint runs/demo --benchmarks aime24,amc23,math500,gsm8k
    srpo rollout --checkpoint runs/demo --tasks 8 --group-size 4 --out episodes.jsonl
    srpo plot runs/a runs/b --metric accuracy --out curves.png
    srpo serve-retriever --corpus corpus.jsonl --backend bm25 --port 8000
    srpo fetch-data --benchmarks gsm8k,math500     # then srpo eval --benchmarks gsm8k,math500

Every ``TrainConfig`` field is a ``train`` flag, and so is every option of the tiny model
(``srpo_agents.tiny.TinyConfig``, a group of their own in ``--help``; ``--model tiny``
only). ``train --config run.yaml`` (or ``.json``) reads a run file: the same names as keys
(a run's own ``config.json`` is one), under the flags typed on the command line
(``srpo train --config runs/x/config.json --seed 1`` repeats run x with seed 1).
``train --quick`` is a preset for trying things out (``QUICK``: 2 steps of small groups
and short answers, on the default model unless ``--model`` is typed; with ``--model
tiny``, also ``QUICK_TINY``'s short warm start); a run file's values and typed flags
override its values.

``eval`` and ``rollout`` take a run directory (its ``policy/``, or its ``policy-<role>/``
folders after ``--per-role-policies``), a saved model folder or a Hugging Face model
name. On a run directory they play the episodes the run played: its recorded settings
(env, workflow, n_agents, difficulty, max_new_tokens, prompts, datasets, costs,
temperature, seed...) apply, and only the flags typed on the command line override them
(``NOT_INHERITED`` lists what comes from the flags regardless: the machine's settings).
On a model folder or name the flags and their defaults apply.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import functools
import inspect
import json
import os
import re
import sys
import textwrap
import typing
from pathlib import Path

from srpo_agents.config import REMOVED_SETTINGS, SECTIONS, TrainConfig

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

NOT_INHERITED = frozenset({"model", "out", "resume", "device", "dtype", "backend",
                           "data_parallel", "rollout_workers", "ray_address", "ray_ranks",
                           "tensorboard", "report_to"})
"""Recorded settings that ``eval`` and ``rollout`` do not take from a run directory: the
weights come from its policy folder, and the rest say where and on what hardware the run
went, not which episodes it played (a run trained with vLLM on a GPU is evaluated on the
CPU with the default flags; ``--backend vllm`` asks for vLLM again)."""


def _field_type(config_type, field: dataclasses.Field):
    hints = typing.get_type_hints(config_type)
    return hints[field.name]


@functools.lru_cache(maxsize=4)
def field_docs(config_type=TrainConfig) -> dict[str, str]:
    """Each field's docstring (the string under it), for ``--help``; a config made of
    sections (``TrainConfig``) has its fields' docstrings in each section's class."""
    docs = {}
    for owner in reversed(config_type.__mro__):
        if not dataclasses.is_dataclass(owner):
            continue
        tree = ast.parse(textwrap.dedent(inspect.getsource(owner)))
        body = tree.body[0].body
        for node, after in zip(body, body[1:], strict=False):
            if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                    and isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
                    and isinstance(after.value.value, str)):
                docs[node.target.id] = " ".join(after.value.value.split())
    return docs


LIST_FIELDS = ("difficulty", "warmstart_first_roles", "warmstart_focus_roles", "lora_targets",
               "report_to")


def add_config_flags(parser, skip: set[str], config_type=TrainConfig) -> None:
    """A flag per field of ``config_type`` (``TrainConfig`` or a model source's options)
    on ``parser``, but those in ``skip``. ``TrainConfig``'s flags go in one argument group
    per section (``config.SECTIONS``), titled by its docstring."""
    if config_type is TrainConfig:
        for section in SECTIONS:
            title = section.__name__.removesuffix("Config").lower()
            group = parser.add_argument_group(title, section.__doc__.splitlines()[0])
            add_config_flags(group, skip, section)
        return
    for field in dataclasses.fields(config_type):
        if field.name in skip:
            continue
        flag = "--" + field.name.replace("_", "-")
        kind = _field_type(config_type, field)
        default = (field.default if field.default is not dataclasses.MISSING
                   else field.default_factory())
        # "%" would be read as a format directive by argparse
        help_text = field_docs(config_type).get(field.name, "").replace("%", "%%")
        if kind is bool:
            parser.add_argument(flag, action="store_true", default=default,
                                help=f"{help_text} (default: {'on' if default else 'off'})")
        elif field.name in LIST_FIELDS:
            shown = ("the env's own" if default is None
                     else " ".join(map(str, default)) or "none")
            parser.add_argument(flag, type=int if field.name == "difficulty" else str,
                                nargs="+", default=None if default is None else list(default),
                                help=f"{help_text} (default: {shown})")
        elif field.name in ("extra_env_kwargs", "role_sampling"):
            parser.add_argument(flag, type=json.loads, default=default,
                                help=f"{help_text} (default: {json.dumps(default)})")
        elif kind in (float | None, int | None):
            shown = "the env's own" if field.name in ("n_agents", "max_turns") else "unset"
            parser.add_argument(flag, type=typing.get_args(kind)[0], default=default,
                                help=f"{help_text} (default: {shown})")
        else:
            base = {int: int, float: float}.get(kind, str)
            shown = "%(default)s" if default != "" else '""'
            parser.add_argument(flag, type=base, default=default,
                                help=f"{help_text} (default: {shown})".lstrip())


def config_from_args(args: argparse.Namespace, **overrides) -> TrainConfig:
    """The ``TrainConfig`` of ``srpo train``'s flags; the model source's own flags (the
    tiny model's group) become its ``model_options``. A typed flag of a source that is
    not ``--model``'s is an error that says whose it is."""
    from srpo_agents.models.registry import model_source, plugins

    values = {f.name: getattr(args, f.name) for f in dataclasses.fields(TrainConfig)
              if hasattr(args, f.name) and f.name != "model_options"}
    values.update(overrides)
    model = values.get("model", TrainConfig.model)
    typed = _typed(args)
    for name in plugins():
        option_type = model_source(name).options
        options = {f.name for f in dataclasses.fields(option_type) if hasattr(args, f.name)}
        if name == model:
            values.setdefault("model_options", {n: getattr(args, n) for n in options})
            continue
        stray = sorted(options & typed) if typed is not None else []
        if stray:
            raise ValueError(f"--{stray[0].replace('_', '-')} is an option of --model "
                             f"{name}, not of --model {model}")
    return TrainConfig(**values)


def typed_flags(argv: list[str]) -> set[str]:
    """The destinations of the flags typed in ``argv``, told apart from argparse's
    defaults by parsing again with every default suppressed (a flag typed with its
    default value counts as typed)."""
    parser = build_parser()
    _suppress_defaults(parser)
    return set(vars(parser.parse_args(argv))) - {"run", "command"}


def _suppress_defaults(parser: argparse.ArgumentParser) -> None:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                _suppress_defaults(sub)
        else:
            action.default = argparse.SUPPRESS


def _typed(args: argparse.Namespace) -> set[str] | None:
    """The typed flags (``main`` records them); None when unknown: then every flag
    counts as typed, as before run settings were read."""
    return getattr(args, "typed_flags", None)


RUN_DIR_ONLY = ("out", "resume")
"""Keys of a run's own ``config.json`` that a new run does not take from it: it writes
its own folder (``--out`` to choose one) and starts afresh (``--resume`` to continue)."""


def read_run_file(path: str | Path) -> dict:
    """The settings of a run file (JSON, or YAML by its suffix): ``TrainConfig`` field
    names, ``model_options``, and the model source's options by their flag names. An
    unknown key is an error that names it and the closest valid one. In a run folder's
    own ``config.json`` the keys of ``RUN_DIR_ONLY`` are left out (and it says so)."""
    from srpo_agents.models.registry import model_source, plugins
    from srpo_envs.spelling import closest_match

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"--config {path}: no such file")
    text = path.read_text(encoding="utf-8")
    try:
        if path.suffix in (".yaml", ".yml"):
            import yaml

            values = yaml.safe_load(text)
        else:
            values = json.loads(text)
    except Exception as err:  # noqa: BLE001 (a parser's own error type, whichever it is)
        raise ValueError(f"--config {path}: not valid {path.suffix.lstrip('.') or 'JSON'} "
                         f"({err})") from None
    if not isinstance(values, dict):
        raise ValueError(f"--config {path}: expected a mapping of settings, got "
                         f"{type(values).__name__}")
    valid = {f.name for f in dataclasses.fields(TrainConfig)}
    valid |= {f.name for name in plugins() for f in dataclasses.fields(model_source(name).options)}
    for key in values:
        if key in REMOVED_SETTINGS and key not in valid:
            raise ValueError(f"--config {path}: setting {key!r} = {values[key]!r} was "
                             f"removed: {REMOVED_SETTINGS[key]}")
        if key not in valid:
            close = closest_match(str(key), sorted(valid), cutoff=0.6)
            raise ValueError(f"--config {path}: unknown setting {key!r}"
                             + (f"; did you mean {close!r}?" if close else ""))
    if (path.parent / "metrics.jsonl").exists() or (path.parent / "checkpoints").is_dir():
        left = [k for k in RUN_DIR_ONLY if k in values]
        for key in left:
            values.pop(key)
        if left:
            print(f"--config {path}: a run folder's own config; not taken from it: "
                  f"{', '.join(left)}", file=sys.stderr)
    return values


def apply_run_file(args: argparse.Namespace, values: dict) -> None:
    """Set the run file's values on ``args`` where no flag was typed (the model source's
    options come from its ``model_options`` or from flat keys)."""
    typed = _typed(args) or set()
    values = dict(values)
    options = values.pop("model_options", None) or {}
    for key, value in {**options, **values}.items():
        if key not in typed:
            setattr(args, key, list(value) if isinstance(value, tuple) else value)
    args.file_keys = set(values) | set(options)


def apply_quick(args: argparse.Namespace) -> list[str]:
    """Set the ``QUICK`` values (and ``QUICK_TINY``'s with ``--model tiny``) that neither
    the command line nor the run file set; returns those set."""
    typed = (_typed(args) or set()) | getattr(args, "file_keys", set())
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

    typed = _typed(args)
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
        whose = ("typed" if "model" in (_typed(args) or set()) | getattr(args, "file_keys", set())
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


def format_table(before: dict, after: dict | None = None, title: str = "") -> str:
    """The results as a markdown table (one column, or before and after), under
    ``title``: what was evaluated (``eval_title``)."""
    k = before["k"]
    rows = [(f"avg@{k}", "avg_at_k"), (f"pass@{k}", "pass_at_k"),
            ("readable answers (\\boxed{})", "boxed_rate"),
            ("accuracy of the readable answers", "boxed_accuracy"),
            ("right answer written anywhere", "answer_anywhere_rate"),
            ("answers cut off at the token cap", "cut_off_rate"),
            ("tokens per task", "tokens_per_task"), ("tool calls per task", "tool_calls_per_task")]
    if "em" in before:
        rows += [("EM", "em"), ("F1", "f1")]
    head = "| metric | before | after |\n|---|---:|---:|" if after else "| metric | value |\n|---|---:|"
    lines = [title, ""] if title else []
    lines.append(head)
    results = (before, after) if after else (before,)
    for label, key in rows:
        if any(key not in result for result in results):
            continue
        cells = []
        for result in results:
            value = result.get(key)
            err = result.get(f"{key}_stderr")
            cells.append(f"{value:.3f} ± {err:.3f}" if err is not None
                         else f"{value:.0%}" if key.endswith("_rate") else f"{value:.2f}")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def eval_title(config: TrainConfig, tasks: int, k: int, model: str) -> str:
    return (f"{model} on {config.env} {config.workflow}: {tasks} held-out tasks x k={k}, "
            f"max {config.max_new_tokens} new tokens an output")


CUT_OFF_WARNING = 0.5
"""The share of outputs cut off by the token cap above which the table says so."""


def cut_off_note(result: dict, max_new_tokens: int) -> str:
    """A line for a table whose answers were mostly cut off by ``--max-new-tokens``, so
    that its zeros explain themselves; "" otherwise."""
    share = result.get("cut_off_rate", 0.0)
    if share < CUT_OFF_WARNING:
        return ""
    return (f"note: {share:.0%} of the outputs hit --max-new-tokens {max_new_tokens} before "
            f"they ended; a cut-off answer seldom reaches its final answer, so scores near 0 "
            f"here say more about the cap than the model (a larger --max-new-tokens lets "
            f"them finish, and takes longer)")


def _check_positive(**values) -> None:
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
    typed = _typed(args)
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
    from srpo_agents.running.train import make_engine

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
    return config, make_engine(config, policy, role_policies)


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
    _check_positive(tasks=tasks, k=k)
    return tasks, k


def cmd_eval(args: argparse.Namespace) -> int:
    from srpo_agents.models.policy import resolve_device
    from srpo_agents.running.evaluate import evaluate
    from srpo_agents.running.train import held_out

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


def cmd_rollout(args: argparse.Namespace) -> int:
    from srpo_agents.rollout.envs import env_factory
    from srpo_agents.rollout.files import write_rollouts
    from srpo_agents.running.train import eval_pool

    _check_positive(tasks=args.tasks)
    config, engine = load_engine(args)
    split = "test" if args.held_out else "train"
    make = env_factory(config, split, engine.policy.count_tokens)
    envs = eval_pool(make, args.tasks * config.group_size, config.seed)
    options = [{"task_index": t, "episode_id": f"t{t}-g{g}"}
               for t in range(args.tasks) for g in range(config.group_size)]
    rollouts = engine.run(envs, options)
    rows = write_rollouts(rollouts, args.out)
    print(f"wrote {len(rollouts)} episodes ({rows} transitions) to {args.out}")
    return 0


def cmd_plot(args: argparse.Namespace) -> int:
    from srpo_agents.running.plots import plot_runs

    out = plot_runs(args.runs, args.out, metric=args.metric, labels=args.labels or None)
    print(f"wrote {out}")
    return 0


def cmd_serve_retriever(args: argparse.Namespace) -> int:
    from srpo_envs.retrieval.server import serve

    serve(args.corpus, backend=args.backend, host=args.host, port=args.port,
          cache_dir=args.cache_dir or None, max_queries=args.max_queries,
          max_topk=args.max_topk)
    return 0


def cmd_envs(args: argparse.Namespace) -> int:
    from srpo_envs import registry

    if args.describe:
        print(describe_env(registry.get(args.describe)))
        return 0
    for spec in registry.specs():
        print(f"{spec.name}: {spec.description}" if spec.description else spec.name)
        for workflow in spec.workflows:
            print(f"    {workflow}: roles {', '.join(spec.roles(workflow))}")
    return 0


def describe_env(spec) -> str:
    """``srpo envs --describe ID``: an env's workflows and roles, what ``srpo train``'s
    flags set in it, and its constructor's arguments with their defaults."""
    from srpo_envs.registry import _resolve

    lines = [spec.name + (f": {spec.description}" if spec.description else ""), "",
             "workflows (--workflow) and their roles:"]
    lines += [f"    {w}: {', '.join(spec.roles(w))}" for w in spec.workflows]
    flags = [(spec.agents_argument, "--n-agents"), (spec.turns_argument, "--max-turns"),
             (spec.levels_argument, "--difficulty")]
    lines += ["", "srpo train flags it reads (untyped, the env's own default): " + ", ".join(
        f"{flag} -> {argument} (default {spec.default_for(argument)!r})"
        for argument, flag in flags if argument)
        + ("; --retriever, --corpus, --cost-per-tool-call (it calls a tool)"
           if spec.tool_calls else "")]
    if spec.benchmarks:
        lines.append(f"benchmarks (srpo eval --benchmarks): {', '.join(spec.benchmarks)}")
    source = _resolve(spec.config_class or spec.entry_point, f"{spec.name}.config_class")
    if dataclasses.is_dataclass(source):
        arguments = [(f.name, f.default if f.default is not dataclasses.MISSING
                      else f.default_factory() if f.default_factory is not dataclasses.MISSING
                      else "(required)") for f in dataclasses.fields(source)]
    else:
        try:
            arguments = [(p.name, p.default if p.default is not p.empty else "(required)")
                         for p in inspect.signature(source).parameters.values()
                         if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
        except (TypeError, ValueError):
            arguments = []
    if arguments:
        lines += ["", "constructor arguments (defaults; --extra-env-kwargs sets any):"]
        lines += [f"    {name} = {value!r}" for name, value in arguments]
    sets = spec.named_prompt_sets()
    if sets:
        lines += ["", "named prompt sets (--extra-env-kwargs '{\"prompts\": \"NAME\"}'; a set "
                  "replaces the templates of the roles it names):"]
        for name, templates in sets.items():
            lines.append(f"    {name}:" + ("" if templates else " the built-in templates"))
            lines += [f"        {role}: {template!r}" for role, template in templates.items()]
    return "\n".join(lines)


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


class Parser(argparse.ArgumentParser):
    """argparse that reads ``--lr -1e-5`` as a flag and its value. argparse takes a
    word starting with "-" for a value only when it matches its negative-number pattern,
    which (before Python 3.13) has no exponent: ``-1e-5`` was a flag, and the error was
    53 lines of usage instead of the value's own check."""

    NEGATIVE_NUMBER = re.compile(r"^-(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$|^-inf$")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._negative_number_matcher = self.NEGATIVE_NUMBER


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="srpo", description=__doc__,
                    formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
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
    add_config_flags(ro, skip=set(ev_skip) - {"group_size", "dataset"})
    ro.set_defaults(run=cmd_rollout)
    ls = commands.add_parser("envs", help="list the registered envs with their workflows and "
                                          "roles (built-in and plugins)")
    ls.add_argument("--describe", default="", metavar="ID",
                    help="one env in full: workflows, roles, the flags it reads, its "
                         "constructor's arguments and defaults")
    ls.set_defaults(run=cmd_envs)
    pl = commands.add_parser("plot", help="redraw learning curves of run directories, "
                                          "overlaid in one figure")
    pl.add_argument("runs", nargs="+", help="run directories (each with metrics.jsonl)")
    pl.add_argument("--out", default="learning_curves.png",
                    help="PNG file to write (default: %(default)s)")
    pl.add_argument("--metric", default="accuracy",
                    help="metrics.jsonl key to draw per step, e.g. reward, mean_set_size, "
                         "route_mean_k (default: %(default)s)")
    pl.add_argument("--labels", nargs="*", default=[],
                    help="one legend name per run (default: the directories' names)")
    pl.set_defaults(run=cmd_plot)
    sr = commands.add_parser("serve-retriever",
                             help="serve a corpus over HTTP with Search-R1's /retrieve "
                                  "protocol (needs the server extra)")
    sr.add_argument("--corpus", required=True, help="JSONL corpus (id, title, text)")
    sr.add_argument("--backend", default="bm25", choices=["bm25", "rank_bm25", "dense"],
                    help="retriever backend (default: %(default)s)")
    sr.add_argument("--host", default="127.0.0.1",
                    help="address to bind (default: %(default)s, this machine only)")
    sr.add_argument("--port", type=int, default=8000, help="port (default: %(default)s)")
    sr.add_argument("--cache-dir", default="",
                    help="index cache (default: $SRPO_CACHE_DIR or ~/.cache/srpo)")
    sr.add_argument("--max-queries", type=int, default=1024,
                    help="most queries per request (default: %(default)s)")
    sr.add_argument("--max-topk", type=int, default=100,
                    help="largest topk a request may ask (default: %(default)s)")
    sr.set_defaults(run=cmd_serve_retriever)
    from srpo_agents.running import fetch_data

    fetch_data.add_parser(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser().parse_args(argv)
    args.typed_flags = typed_flags(argv)
    args.argv = argv  # what a launcher's ranks run again
    try:
        return args.run(args)
    except (ValueError, FileNotFoundError, ImportError) as err:
        print(f"srpo: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
