"""Build an srpo environment from a plain description (``docs/new-environment.md``).

A ``TeamDescription`` says four things, as plain functions over a state of your own:

- ``agents``: agent id -> role (agents of one role share a prompt template and, in the
  learner, a policy role);
- ``due(state)``: the scheduler, ``{agent: prompt}`` for the agents that act at this
  state; an empty mapping ends the episode;
- ``transition(state, texts)``: consume the due agents' texts, return the next state,
  the event's type and its info;
- ``reward(state)``: the team reward of the final state.

``DescribedEnv`` turns it into a PettingZoo ``ParallelEnv`` on ``EventEnv``: every event
emits a ``Transition`` whose consumed set is exactly the due agents' outputs, so the
learner's active sets, the Gymnasium view, PettingZoo's ``parallel_api_test`` and the
input rules of ``srpo_envs.event_env`` (unknown keys, wrong types, missing agents,
over-long texts, stepping after the end) come for free.

Text safety: the texts handed to ``transition`` and every prompt ``due`` returns have
chat-template control tokens neutralized (``srpo_envs.text``), so a description may put
model output and dataset text into the next prompt as they are. A missing agent's text
is ``""`` (the defined penalty). An episode that runs ``max_events`` events without
ending is truncated and pays ``reward`` of the state it reached.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from srpo_envs.event_env import EventEnv, EventOutcome, state_id
from srpo_envs.routing import TokenCounter, check_cost
from srpo_envs.text import neutralize_control_tokens

Transition = Callable[[Any, Mapping[str, str]], tuple[Any, str, dict[str, Any]]]


@dataclass(frozen=True)
class TeamDescription:
    """A multi-agent environment as plain functions (see the module docstring)."""

    name: str
    """Short snake_case name (``metadata["name"]``)."""
    agents: Mapping[str, str]
    """Agent id -> role, in a fixed order."""
    start: Callable[[Any], Any]
    """task -> the initial state."""
    due: Callable[[Any], Mapping[str, str]]
    """state -> {agent: prompt} of the agents due now; empty ends the episode."""
    transition: Transition
    """(state, {agent: text}) -> (next state, event type, info)."""
    reward: Callable[[Any], float]
    """The team reward of the final state (paid at the last event; earlier events 0)."""
    max_output_chars: int = 1024
    max_prompt_chars: int = 4096
    max_events: int = 32

    def __post_init__(self) -> None:
        if not self.agents:
            raise ValueError(f"TeamDescription({self.name!r}).agents is empty: expected "
                             f"agent id -> role")
        for name in ("max_output_chars", "max_prompt_chars", "max_events"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"TeamDescription.{name}={value!r}: expected an int >= 1")


class DescribedEnv(EventEnv):
    """A PettingZoo parallel env from a ``TeamDescription`` and a task source.

    ``tasks(index)`` returns task ``index`` (a pure function, so every rollout of a task
    sees the same one); ``n_tasks`` bounds the indices drawn at random (None: 2**31, a
    generator). ``reset(options=...)`` takes ``task_index`` or ``task`` as every srpo env.
    A task's id is its ``task_id`` attribute if it has one, else a hash of its repr.
    """

    def __init__(self, description: TeamDescription, tasks: Callable[[int], Any],
                 n_tasks: int | None = None, *, seed: int | None = None,
                 render_mode: str | None = None, cost_per_token: float = 0.0,
                 token_counter: TokenCounter | None = None):
        if n_tasks is not None and (not isinstance(n_tasks, int) or n_tasks < 1):
            raise ValueError(f"n_tasks={n_tasks!r}: expected an int >= 1 or None")
        check_cost(cost_per_token, 0.0, token_counter)
        self.description = description
        self.metadata = {"name": description.name, "render_modes": ["ansi"],
                         "is_parallelizable": True}
        self.possible_agents = list(description.agents)
        self.roles = dict(description.agents)
        self.max_output_chars = description.max_output_chars
        self.max_prompt_chars = description.max_prompt_chars
        self.cost_per_token = float(cost_per_token)
        self.token_counter = token_counter
        self._tasks = tasks
        self._n_tasks = n_tasks
        self._state: Any = None
        self._task: Any = None
        super().__init__(seed=seed, render_mode=render_mode)

    @property
    def state(self) -> Any:
        """The description's state at this point of the episode."""
        return self._state

    @property
    def current_task(self) -> Any:
        return self._task

    def task(self, index: int) -> Any:
        return self._tasks(index)

    def _pick_task(self, options: Mapping[str, Any]) -> Any:
        if "task" in options:
            return options["task"]
        if "task_index" in options:
            index = options["task_index"]
            if not isinstance(index, int) or isinstance(index, bool) or index < 0:
                raise ValueError(f"options['task_index']={index!r}: expected an int >= 0")
            return self._tasks(index)
        return self._tasks(self._rng.randrange(self._n_tasks or 2**31))

    def _begin(self, task: Any) -> str:
        self._task = task
        self._state = self.description.start(task)
        self._events = 0
        self._first_prompts = self._due_prompts()
        if not self._first_prompts:
            raise ValueError(f"{self.description.name}: due(start(task)) is empty: the "
                             f"first state must have an agent due")
        task_id = getattr(task, "task_id", None)
        return str(task_id) if task_id else state_id(repr(task))

    def _due_prompts(self) -> dict[str, str]:
        prompts = dict(self.description.due(self._state))
        unknown = [a for a in prompts if a not in self.roles]
        if unknown:
            raise ValueError(f"{self.description.name}: due() named agents {unknown} that "
                             f"are not in agents {self.possible_agents}")
        return {a: neutralize_control_tokens(str(p)) for a, p in prompts.items()}

    def _consume(self, texts: Mapping[str, str | None]) -> EventOutcome:
        safe = {a: neutralize_control_tokens(t or "") for a, t in texts.items()}
        self._state, event_type, info = self.description.transition(self._state, safe)
        self._events += 1
        next_prompts = self._due_prompts()
        terminated = not next_prompts
        truncated = not terminated and self._events >= self.description.max_events
        done = terminated or truncated
        reward = float(self.description.reward(self._state)) if done else 0.0
        return EventOutcome(event_type=str(event_type), reward=reward, terminated=terminated,
                            truncated=truncated, info=dict(info or {}),
                            next_prompts={} if done else next_prompts)
