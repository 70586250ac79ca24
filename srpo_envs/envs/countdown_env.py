"""SRPO-Countdown-v0: reach a target number from given numbers with + - * /.

## Description
Countdown (TinyZero's task for small-model RL) is exact and verifiable: a reply is right
when its equation uses each given number exactly once and equals the target. It is built
with ``srpo_envs.describe`` (the tutorial ``docs/new-environment.md`` walks through this
file). Two workflows (``workflow=``):

- ``"single"``: one solver writes an equation in one event (K = 1).
- ``"parallel"`` (co-evolution): ``n_proposers`` proposers answer the same prompt in one
  event (K = n_proposers), then an aggregator reads the equations they proposed and
  writes the final one (K = 1).

## Observation, action
Text, as in every srpo env (``srpo_envs.event_env``). A reply's equation is inside its
last ``<answer>...</answer>``, else its last non-empty line; a trailing ``= value`` is
ignored. The checker (``srpo_envs.countdown_tasks``) parses it and never evaluates it as
Python.

## Rewards
``reward_correct`` for a right final equation, else ``reward_wrong``, at the last event.
Every graded event's info has ``correct``, ``equation``, ``valid`` and ``error``; the
proposers' event also ``member_correct`` (one per proposer). An optional ``cost_per_token``
is charged as in every srpo env.

## Arguments
See ``CountdownConfig``. ``dataset`` is a JSONL file of ``{"numbers": [...], "target": N}``
rows (``nums`` is accepted for ``numbers``, as in TinyZero's data); without it tasks come
from the seeded generator (``levels``).

## Version history
- v0: initial release.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from srpo_envs.countdown_tasks import (
    MAX_EQUATION_CHARS,
    CountdownTask,
    check_equation,
    check_levels,
    distinct_tasks,
    generate_task,
)
from srpo_envs.describe import DescribedEnv, TeamDescription
from srpo_envs.jsonl import read_jsonl
from srpo_envs.routing import TokenCounter
from srpo_envs.splits import SMALL_SPLIT, check_split, small_split
from srpo_envs.text import check_prompt_overrides, render

WORKFLOWS = ("single", "parallel")
DEFAULT_PROMPTS = {
    "solver": ("Using the numbers {numbers}, write an equation that equals {target}. Use "
               "each number exactly once, with + - * / and parentheses. Think briefly, then "
               "give the equation alone in <answer> </answer>, for example "
               "<answer>(1+2)*3</answer>.\n"),
    "aggregator": ("Proposers tried to write an equation that equals {target} from the "
                   "numbers {numbers}, each used exactly once:\n{proposals}\nCheck them and "
                   "give the best equation in <answer> </answer>.\n"),
}
REQUIRED_PLACEHOLDERS = {"solver": {"numbers", "target"}, "aggregator": {"proposals"}}


@dataclass
class CountdownConfig:
    """Arguments of SRPO-Countdown-v0; checked on construction."""

    workflow: str = "single"
    n_proposers: int = 3
    levels: tuple[int, ...] = (0,)
    split: str = "train"
    """Generator split: "train", "validation" or "test", disjoint by problem
    (``srpo_envs.splits``)."""
    task_seed: int = 0
    dataset: str | Path | None = None
    prompts: Mapping[str, str] = field(default_factory=dict)
    """Role templates by role (``solver``, also used by the proposers; ``aggregator``)."""
    max_output_chars: int = 512
    reward_correct: float = 1.0
    reward_wrong: float = 0.0
    cost_per_token: float = 0.0
    token_counter: TokenCounter | None = None

    def __post_init__(self) -> None:
        if self.workflow not in WORKFLOWS:
            raise ValueError(f"workflow={self.workflow!r}: expected one of {WORKFLOWS}")
        if not isinstance(self.n_proposers, int) or not 1 <= self.n_proposers <= 16:
            raise ValueError(f"n_proposers={self.n_proposers!r}: expected an int in 1..16")
        if not isinstance(self.max_output_chars, int) or not 16 <= self.max_output_chars <= 10**5:
            raise ValueError(f"max_output_chars={self.max_output_chars!r}: expected an int "
                             f"in 16..100000")
        self.levels = tuple(self.levels)
        check_levels(self.levels)
        check_split(self.split)
        check_prompt_overrides(self.prompts, DEFAULT_PROMPTS, REQUIRED_PLACEHOLDERS)


def load_tasks(path: str | Path) -> list[CountdownTask]:
    """Tasks of a JSONL file; a bad row is an error naming its file and line."""
    tasks = []
    for record, where, row in read_jsonl(path):
        numbers = record.get("numbers", record.get("nums")) if isinstance(record, dict) else None
        target = record.get("target") if isinstance(record, dict) else None
        if (not isinstance(numbers, list) or not numbers
                or not all(isinstance(n, int) and n >= 0 for n in numbers)):
            raise ValueError(f"{where}: 'numbers' must be a non-empty list of ints >= 0, got "
                             f"{numbers!r}")
        if not isinstance(target, int):
            raise ValueError(f"{where}: 'target' must be an int, got {target!r}")
        tasks.append(CountdownTask(task_id=str(record.get("id", f"{Path(path).stem}-{row}")),
                                   numbers=tuple(numbers), target=target, solution="",
                                   level=-1))
    if not tasks:
        raise ValueError(f"dataset={str(path)!r} has no rows")
    return tasks


@dataclass(frozen=True)
class State:
    """Where an episode stands: the task, its phase, the proposals and the verdict."""

    task: CountdownTask
    phase: str = "solve"  # solve -> (aggregate ->) done
    proposals: tuple[str, ...] = ()
    correct: bool = False


def describe(config: CountdownConfig) -> TeamDescription:
    """The Countdown team of ``config.workflow`` as a ``TeamDescription``."""
    templates = {**DEFAULT_PROMPTS, **config.prompts}
    if config.workflow == "single":
        agents = {"solver_0": "solver"}
    else:
        agents = {f"proposer_{i}": "solver" for i in range(config.n_proposers)}
        agents["aggregator_0"] = "aggregator"
    solvers = [a for a, role in agents.items() if role == "solver"]

    def values(task: CountdownTask) -> dict[str, str]:
        return {"numbers": " ".join(map(str, task.numbers)), "target": str(task.target)}

    def due(state: State) -> dict[str, str]:
        if state.phase == "solve":
            prompt = render(templates["solver"], values(state.task))
            return dict.fromkeys(solvers, prompt)
        if state.phase == "aggregate":
            proposals = "\n".join(f"P{i + 1}: {p[:MAX_EQUATION_CHARS]}"
                                  for i, p in enumerate(state.proposals))
            return {"aggregator_0": render(templates["aggregator"],
                                           {**values(state.task), "proposals": proposals})}
        return {}

    def transition(state: State, texts: Mapping[str, str]) -> tuple[State, str, dict]:
        task = state.task
        if state.phase == "solve":
            checks = [check_equation(texts[a], task.numbers, task.target) for a in solvers]
            info: dict[str, Any] = {"level": task.level}
            if config.workflow == "single":
                info.update(checks[0])
                return replace(state, phase="done", correct=checks[0]["correct"]), "solve", info
            info.update(member_correct=[c["correct"] for c in checks],
                        correct=any(c["correct"] for c in checks))
            return (replace(state, phase="aggregate",
                            proposals=tuple(c["equation"] for c in checks)), "propose", info)
        check = check_equation(texts["aggregator_0"], task.numbers, task.target)
        return replace(state, phase="done", correct=check["correct"]), "aggregate", check

    def reward(state: State) -> float:
        return config.reward_correct if state.correct else config.reward_wrong

    return TeamDescription(name="srpo_countdown_v0", agents=agents, start=State, due=due,
                           transition=transition, reward=reward,
                           max_output_chars=config.max_output_chars,
                           max_prompt_chars=8192, max_events=2)


class CountdownEnv(DescribedEnv):
    """SRPO-Countdown-v0 (see the module docstring)."""

    def __init__(self, seed: int | None = None, render_mode: str | None = None,
                 **kwargs: Any):
        self.config = CountdownConfig(**kwargs)
        dataset = load_tasks(self.config.dataset) if self.config.dataset else None
        if dataset is None:
            def tasks(index: int) -> CountdownTask:
                return generate_task(index, self.config.levels, self.config.task_seed,
                                     self.config.split)
        else:
            def tasks(index: int) -> CountdownTask:
                return dataset[index % len(dataset)]
        super().__init__(describe(self.config), tasks,
                         n_tasks=len(dataset) if dataset else None, seed=seed,
                         render_mode=render_mode, cost_per_token=self.config.cost_per_token,
                         token_counter=self.config.token_counter)
        self._dataset = dataset

    def held_out_warning(self) -> str | None:
        """Why a held-out score of this env's split says little (a generator level too
        small to split: ``splits.small_split``), or None."""
        if self._dataset is not None:
            return None
        return small_split("Countdown", self.config.levels, self.config.split,
                           self.distinct_tasks(SMALL_SPLIT))

    def distinct_tasks(self, limit: int) -> int:
        """Distinct tasks of this env's source, counted up to ``limit`` (level 0 has only
        about 35 test problems: an evaluation uses each once and says so)."""
        if self._dataset is not None:
            return min(limit, len(self._dataset))
        return distinct_tasks(limit, self.config.levels, self.config.task_seed,
                              self.config.split)


def parallel_env(**kwargs: Any) -> CountdownEnv:
    """The PettingZoo parallel env; keyword arguments as in ``CountdownConfig`` plus
    ``seed`` and ``render_mode``."""
    return CountdownEnv(**kwargs)
