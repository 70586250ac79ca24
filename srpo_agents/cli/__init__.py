"""The ``srpo`` command: train, evaluate, sample and list teams of LLM agents.

    srpo envs
    srpo train --quick --env SRPO-Countdown-v0 --out runs/try
    srpo train --env SRPO-Math-v0 --workflow solve_verify --algo srpo \
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
import re
import sys

from srpo_agents.cli import envs, evaluate, plot, rollout, serve, train
from srpo_agents.running import fetch_data


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
    for command in (train, evaluate, rollout, envs, plot, serve, fetch_data):
        command.add_parser(commands)
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

