"""The record shared by the two sides of srpo: one environment state transition.

An environment is a sequence of *events*. At each event the team is in a shared
pre-state, some agents are due to act, and the environment consumes a set of their
outputs and moves on. ``Transition`` records one event; ``Transition.consumed`` is
exactly the *active set* of SRPO (../shared/SRPO.md, section 1): the minimal set of
freshly sampled outputs that this one transition consumed.

Deliberate choices:
- stdlib only, frozen, and JSON round-trippable (``to_dict``/``from_dict``) so that a
  learner in another process, or a log file, sees the same record; it also pickles and
  deep-copies (its read-only ``info`` is a ``FrozenMapping``), equal after the trip;
- ``expected_agents`` lists the agents that were due to act. When a due agent sent
  nothing (``None``, a lost worker) it is absent from ``consumed`` and the learner can
  drop the event whole instead of silently shrinking the set;
- ``prompt`` is the exact text the agent saw, so set probabilities are computed on the
  same conditioning the behaviour policy used.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ConsumedOutput:
    """One member of an active set: an agent's output that a transition took in."""

    agent_id: str
    role: str
    prompt: str
    text: str

    def to_dict(self) -> dict[str, str]:
        return {"agent_id": self.agent_id, "role": self.role, "prompt": self.prompt,
                "text": self.text}


class FrozenMapping(Mapping):
    """A read-only mapping (``Transition.info``) that, unlike ``MappingProxyType``,
    pickles and deep-copies, so a transition can cross processes (multiprocessing,
    Gymnasium's async vector env) and be copied. Equal to any mapping of equal items."""

    __slots__ = ("_items",)

    def __init__(self, items: Mapping[Any, Any] | None = None):
        object.__setattr__(self, "_items", dict(items or {}))

    def __getitem__(self, key: Any) -> Any:
        return self._items[key]

    def __iter__(self):
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __repr__(self) -> str:
        return f"FrozenMapping({self._items!r})"

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is read-only")

    def __reduce__(self):
        # Rebuilt from a plain dict of its (already frozen) items.
        return (type(self), (self._items,))


def _freeze(value: Any) -> Any:
    if isinstance(value, Mapping):
        return FrozenMapping({k: _freeze(v) for k, v in value.items()})
    if isinstance(value, list):
        return tuple(_freeze(v) for v in value)
    return value


def _thaw(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _thaw(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [_thaw(v) for v in value]
    return value


@dataclass(frozen=True)
class Transition:
    """One event of an episode.

    Fields:
        episode_id: unique id of the episode this event belongs to.
        task_id: id of the task (same for every rollout of one problem; the default
            advantage group of SRPO).
        step_index: 0-based index of the event within its episode.
        event_type: what kind of event this was ("solve", "verify", "aggregate", ...);
            lets a learner group advantages by (task, event type).
        pre_state_id: content hash of the shared pre-state; two rollouts that reach the
            same state (same task, same history) share it.
        consumed: the active set, in agent order. ``len(consumed)`` is K_e.
        expected_agents: the agents that were due to act at this event.
        reward: the team reward this event produced.
        terminated: the episode ended with an outcome.
        truncated: the episode was cut off (turn limit) without an outcome.
        info: anything else the env reports (``correct``, tool calls, ...), read-only.
    """

    episode_id: str
    task_id: str
    step_index: int
    event_type: str
    pre_state_id: str
    consumed: tuple[ConsumedOutput, ...]
    expected_agents: tuple[str, ...]
    reward: float
    terminated: bool
    truncated: bool
    info: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "consumed", tuple(self.consumed))
        object.__setattr__(self, "expected_agents", tuple(self.expected_agents))
        object.__setattr__(self, "info", _freeze(dict(self.info)))

    @property
    def set_size(self) -> int:
        """K_e: the number of outputs this transition consumed."""
        return len(self.consumed)

    @property
    def missing_agents(self) -> tuple[str, ...]:
        """Agents that were due to act but whose output was not consumed."""
        got = {c.agent_id for c in self.consumed}
        return tuple(a for a in self.expected_agents if a not in got)

    def to_dict(self) -> dict[str, Any]:
        return {
            "episode_id": self.episode_id,
            "task_id": self.task_id,
            "step_index": self.step_index,
            "event_type": self.event_type,
            "pre_state_id": self.pre_state_id,
            "consumed": [c.to_dict() for c in self.consumed],
            "expected_agents": list(self.expected_agents),
            "reward": self.reward,
            "terminated": self.terminated,
            "truncated": self.truncated,
            "info": _thaw(self.info),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Transition:
        fields = dict(data)
        fields["consumed"] = tuple(ConsumedOutput(**c) for c in fields["consumed"])
        return cls(**fields)
