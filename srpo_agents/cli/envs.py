"""``srpo envs``: the registered envs, their workflows and roles; ``--describe`` one in full."""

from __future__ import annotations

import argparse
import dataclasses
import inspect


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


def add_parser(commands) -> None:
    """``srpo envs`` under ``commands``."""
    ls = commands.add_parser("envs", help="list the registered envs with their workflows and "
                                          "roles (built-in and plugins)")
    ls.add_argument("--describe", default="", metavar="ID",
                    help="one env in full: workflows, roles, the flags it reads, its "
                         "constructor's arguments and defaults")
    ls.set_defaults(run=cmd_envs)
