"""The event loop shared by every srpo environment, as a PettingZoo ``ParallelEnv``.

One ``step`` is one *event*: the agents due to act send their texts, the environment
consumes them, emits one ``Transition`` and moves on. Agents that are not due are told
so in their observation and whatever they send is ignored (not in any consumed set).

Input rules (the same for every env built on this class, documented in each env):
- ``actions`` must be a mapping; a key that is not one of ``possible_agents`` raises
  ``ValueError`` and a value that is neither ``str`` nor ``None`` raises ``TypeError``.
  Both are checked before any state changes, so the env stays usable after the error.
- A due agent that is missing from ``actions`` or sends ``None`` is *missing*: it is left
  out of the consumed set, named in ``Transition.expected_agents`` and
  ``info["missing_agents"]``, and the env proceeds as if it had sent an empty text (the
  defined penalty: an empty answer is wrong). The learner drops such events whole.
- Texts longer than ``max_output_chars`` are clipped to it; the clipped text is what
  the env consumes, and ``info["clipped_agents"]`` names the agents.
- Stepping an episode that has ended raises ``RuntimeError`` (call ``reset``).

Every env built on this class may charge its team a cost (``srpo_envs.routing``: off by
default): the last transition's reward is the task reward minus the cost, and its info
reports ``task_reward``, ``cost``, ``team_tokens`` and ``team_tool_calls`` apart.

Subclasses implement ``_begin`` (state for a new task, first due prompts) and
``_consume`` (one event: read the due agents' texts, say what happened and who is due
next). They never see invalid input.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gymnasium import spaces
from pettingzoo import ParallelEnv

from srpo_envs.routing import TokenCounter, approx_tokens
from srpo_envs.text import CHARSET, clip, to_charset
from srpo_envs.transition import ConsumedOutput, Transition

WAIT_TEMPLATE = "You are {agent}. It is not your turn; any text you send now is ignored."


@dataclass
class EventOutcome:
    """What a subclass reports for one consumed event."""

    event_type: str
    reward: float = 0.0
    terminated: bool = False
    truncated: bool = False
    info: dict[str, Any] = field(default_factory=dict)
    next_prompts: dict[str, str] = field(default_factory=dict)


@functools.lru_cache(maxsize=64)
def _text_template(max_length: int) -> spaces.Text:
    # Building a Text space sorts ~60k characters (tens of ms) and a run may create
    # thousands of envs, so its read-only charset tables are built once per limit. This
    # template is never handed out, so it is never seeded or sampled.
    return spaces.Text(max_length, min_length=0, charset=CHARSET)


def text_space(max_length: int) -> spaces.Text:
    """A new Text space over CHARSET with a random generator of its own.

    Every agent of every env needs its own object: seeding one agent's space must not
    reseed another's (PettingZoo's seed tests seed each agent's space and compare two
    envs). The copy shares the template's charset tables, which nothing mutates, so it
    is cheap; its generator is created (or seeded) on first use."""
    return copy.copy(_text_template(max_length))


def state_id(*parts: str) -> str:
    digest = hashlib.sha1()
    for part in parts:
        digest.update(part.encode("utf-8", "surrogatepass"))
        digest.update(b"\x00")
    return digest.hexdigest()[:16]


class EventEnv(ParallelEnv):
    """Base class: subclasses set ``possible_agents``, ``roles`` and the two limits."""

    metadata: dict[str, Any] = {"render_modes": ["ansi"], "is_parallelizable": True}

    possible_agents: list[str]
    roles: dict[str, str]
    max_output_chars: int
    max_prompt_chars: int
    # The team's cost (srpo_envs.routing); subclasses set these from their config.
    cost_per_token: float = 0.0
    cost_per_tool_call: float = 0.0
    token_counter: TokenCounter | None = None

    def __init__(self, seed: int | None = None, render_mode: str | None = None):
        if render_mode not in (None, "ansi"):
            raise ValueError(f"render_mode={render_mode!r}: expected None or 'ansi'")
        self.render_mode = render_mode
        self._rng = random.Random(seed)
        # One space object per agent, made once: PettingZoo expects
        # env.action_space(a) is env.action_space(a), and seeding it seeds only it.
        self._observation_spaces = {a: text_space(self.max_prompt_chars)
                                    for a in self.possible_agents}
        self._action_spaces = {a: text_space(self.max_output_chars)
                               for a in self.possible_agents}
        self.agents: list[str] = []
        self._due: dict[str, str] = {}
        self._transitions: list[Transition] = []
        self._episode_id = ""
        self._task_id = ""
        self._done = True
        self._team_tokens = 0
        self._team_tool_calls = 0

    # -- PettingZoo API -------------------------------------------------------------
    def observation_space(self, agent: str) -> spaces.Text:
        return self._space(self._observation_spaces, agent)

    def action_space(self, agent: str) -> spaces.Text:
        return self._space(self._action_spaces, agent)

    def reset(self, seed: int | None = None, options: dict | None = None):
        """Start an episode.

        ``options`` may hold ``task_index`` (an index into the task source), ``task`` (a
        task object of the env's own type) and ``episode_id`` (overrides the id drawn
        from the seeded generator; useful when many envs share a seed). Other keys are
        ignored, as PettingZoo's API test expects.
        """
        if seed is not None:
            self._rng = random.Random(seed)
        options = dict(options or {})
        episode_id = options.get("episode_id") or f"ep-{self._rng.getrandbits(64):016x}"
        task = self._pick_task(options)
        self._episode_id = str(episode_id)
        self._task_id = self._begin(task)
        self._transitions = []
        self._team_tokens = 0
        self._team_tool_calls = 0
        self.agents = list(self.possible_agents)
        self._done = False
        self._due = self._fit_prompts(self._first_prompts)
        observations = self._observations()
        infos = {agent: {"due": agent in self._due} for agent in self.agents}
        return observations, infos

    def step(self, actions: Mapping[str, Any]):
        texts = self._validated(actions)
        due = self._due
        consumed, clipped, missing, seen = [], [], [], {}
        for agent in due:
            text = texts.get(agent)
            if text is None:
                missing.append(agent)
                seen[agent] = None
                continue
            if len(text) > self.max_output_chars:
                text = text[: self.max_output_chars]
                clipped.append(agent)
            seen[agent] = text
            consumed.append(ConsumedOutput(agent, self.roles[agent], due[agent], text))
        pre_state = state_id(self._task_id, *(f"{a}\x01{p}" for a, p in due.items()))
        outcome = self._consume(seen)
        info = dict(outcome.info)
        if missing:
            info["missing_agents"] = missing
        if clipped:
            info["clipped_agents"] = clipped
        reward = self._charge(consumed, outcome, info)
        transition = Transition(
            episode_id=self._episode_id, task_id=self._task_id,
            step_index=len(self._transitions), event_type=outcome.event_type,
            pre_state_id=pre_state, consumed=tuple(consumed), expected_agents=tuple(due),
            reward=reward, terminated=outcome.terminated,
            truncated=outcome.truncated, info=info,
        )
        self._transitions.append(transition)
        self._done = outcome.terminated or outcome.truncated
        self._due = {} if self._done else self._fit_prompts(outcome.next_prompts)
        if self._done:
            observations = {agent: "" for agent in self.agents}
        else:
            observations = self._observations()
        rewards = {agent: transition.reward for agent in self.agents}
        terminations = {agent: transition.terminated for agent in self.agents}
        truncations = {agent: transition.truncated for agent in self.agents}
        infos = {agent: {"transition": transition, "due": agent in self._due}
                 for agent in self.agents}
        if self._done:
            self.agents = []
        return observations, rewards, terminations, truncations, infos

    def render(self) -> str | None:
        if self.render_mode != "ansi":
            return None
        if not self._transitions:
            return "(no event yet)"
        last = self._transitions[-1]
        lines = [f"[{last.episode_id} step {last.step_index} {last.event_type}] "
                 f"reward={last.reward} terminated={last.terminated}"]
        lines += [f"  {c.agent_id} ({c.role}): {c.text[:200]!r}" for c in last.consumed]
        return "\n".join(lines)

    def close(self) -> None:
        return None

    # -- srpo additions -------------------------------------------------------------
    @property
    def due_agents(self) -> tuple[str, ...]:
        """The agents whose texts the next ``step`` will consume."""
        return tuple(self._due)

    @property
    def transitions(self) -> tuple[Transition, ...]:
        """Every transition of the current episode, in order."""
        return tuple(self._transitions)

    @property
    def last_transition(self) -> Transition | None:
        return self._transitions[-1] if self._transitions else None

    # -- helpers --------------------------------------------------------------------
    def _space(self, spaces_by_agent: dict[str, spaces.Text], agent: str) -> spaces.Text:
        try:
            return spaces_by_agent[agent]
        except KeyError:
            raise KeyError(f"unknown agent {agent!r}; expected one of "
                           f"{self.possible_agents}") from None

    def _charge(self, consumed: list[ConsumedOutput], outcome: EventOutcome,
                info: dict[str, Any]) -> float:
        """This event's reward: at the last event, the task reward minus the team's cost
        (reported apart in ``info``)."""
        count = self.token_counter or approx_tokens
        self._team_tokens += sum(count(c.text) for c in consumed)
        self._team_tool_calls += int(info.get("tool_calls", 0) or 0)
        if not (outcome.terminated or outcome.truncated):
            return float(outcome.reward)
        cost = (self.cost_per_token * self._team_tokens
                + self.cost_per_tool_call * self._team_tool_calls)
        info.update(task_reward=float(outcome.reward), cost=float(cost),
                    team_tokens=self._team_tokens, team_tool_calls=self._team_tool_calls)
        return float(outcome.reward) - float(cost)

    def _validated(self, actions: Mapping[str, Any]) -> dict[str, str | None]:
        if self._done:
            raise RuntimeError("step() called on an episode that has ended; call reset()")
        if not isinstance(actions, Mapping):
            raise TypeError(f"actions must be a mapping of agent id to text, got "
                            f"{type(actions).__name__}")
        for agent, text in actions.items():
            if agent not in self.possible_agents:
                raise ValueError(f"actions has unknown agent key {agent!r}; expected keys "
                                 f"from {self.possible_agents}")
            if text is not None and not isinstance(text, str):
                raise TypeError(f"actions[{agent!r}] is a {type(text).__name__}; expected "
                                f"str (or None for no output)")
        return dict(actions)

    def _fit_prompts(self, prompts: Mapping[str, str]) -> dict[str, str]:
        # Subclasses bound their templates; this is the guarantee the spaces rely on.
        return {a: clip(to_charset(p), self.max_prompt_chars) for a, p in prompts.items()}

    def _observations(self) -> dict[str, str]:
        return {agent: self._due.get(agent) or clip(WAIT_TEMPLATE.format(agent=agent),
                                                    self.max_prompt_chars)
                for agent in self.agents}

    # -- for subclasses -------------------------------------------------------------
    _first_prompts: dict[str, str]

    def _pick_task(self, options: Mapping[str, Any]) -> Any:
        raise NotImplementedError

    def _begin(self, task: Any) -> str:
        """Set up state for ``task``, set ``self._first_prompts``; return the task id."""
        raise NotImplementedError

    def _consume(self, texts: Mapping[str, str | None]) -> EventOutcome:
        """Consume the due agents' texts (``None`` = missing) and report the event."""
        raise NotImplementedError
