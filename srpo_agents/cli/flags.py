"""Flags from ``TrainConfig``'s fields, and run files: how a command line becomes a config."""

from __future__ import annotations

import argparse
import ast
import dataclasses
import functools
import inspect
import json
import sys
import textwrap
import typing
from pathlib import Path

from srpo_agents.config import REMOVED_SETTINGS, SECTIONS, TrainConfig

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
        if kind is bool:  # a setting that is on by default is turned off by --no-...
            action = argparse.BooleanOptionalAction if default else "store_true"
            parser.add_argument(flag, action=action, default=default,
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
    typed = typed_names(args)
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


def typed_names(args: argparse.Namespace) -> set[str] | None:
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
    typed = typed_names(args) or set()
    values = dict(values)
    options = values.pop("model_options", None) or {}
    for key, value in {**options, **values}.items():
        if key not in typed:
            setattr(args, key, list(value) if isinstance(value, tuple) else value)
    args.file_keys = set(values) | set(options)
