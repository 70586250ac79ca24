"""From rollouts to action units: the learner's view of the environments' Transitions.

The learner reads the environments only through ``Transition`` records (and the
samples the rollout engine generated for them). Each transition is one event; its
``consumed`` outputs are the active set (SRPO.md, section 1). This module joins every
consumed output to the sample that produced it and forms the units the loss acts on:

- ``unit="set"``: one unit per event holding all its members (SRPO and its kappa
  variants); K = |consumed|.
- ``unit="output"``: one unit per consumed output (SRPO-singleton and the per-output
  baselines); K = 1.

An event with a missing member (a due agent the env did not get an output from, e.g. a
generation cut off at the token limit and withheld, or a consumed output with no sample)
is dropped whole and counted, never silently shrunk. Events without any member (none
was due) carry no action and are skipped.

The return credited to every unit of an episode is the episode outcome (the sum of its
transition rewards): SRPO's default, where all events of the G rollouts of a task form
one advantage group.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from srpo_agents.objective import UnitInfo
from srpo_agents.rollout import Rollout, Sample


@dataclass
class ActionUnit:
    info: UnitInfo
    members: list[Sample]

    @property
    def size(self) -> int:
        return len(self.members)


@dataclass
class UnitStats:
    events: int = 0
    events_dropped: int = 0
    set_sizes: int = 0

    @property
    def mean_set_size(self) -> float:
        kept = self.events - self.events_dropped
        return self.set_sizes / kept if kept else 0.0


def build_units(rollouts: Sequence[Rollout], unit: str = "set") -> tuple[list[ActionUnit], UnitStats]:
    if unit not in ("set", "output"):
        raise ValueError(f"unit={unit!r}: expected 'set' or 'output'")
    units: list[ActionUnit] = []
    stats = UnitStats()
    for rollout in rollouts:
        outcome = rollout.reward
        for t in rollout.transitions:
            if not t.expected_agents:
                continue
            stats.events += 1
            members = [rollout.samples.get((t.step_index, c.agent_id)) for c in t.consumed]
            if t.missing_agents or any(m is None for m in members):
                stats.events_dropped += 1
                continue
            stats.set_sizes += len(members)
            if unit == "set":
                info = UnitInfo(t.task_id, t.episode_id, t.event_type, t.step_index, "",
                                t.pre_state_id, outcome)
                units.append(ActionUnit(info, list(members)))
                continue
            for member in members:
                info = UnitInfo(t.task_id, t.episode_id, t.event_type, t.step_index,
                                member.agent_id, t.pre_state_id, outcome)
                units.append(ActionUnit(info, [member]))
    return units, stats


def event_atomic_batches(units: Sequence[ActionUnit], units_per_batch: int,
                         rng: random.Random) -> Iterator[list[ActionUnit]]:
    """Shuffled mini-batches of whole units: a unit's member rows never split."""
    if units_per_batch < 1:
        raise ValueError(f"units_per_batch={units_per_batch!r}: expected >= 1")
    order = list(range(len(units)))
    rng.shuffle(order)
    for start in range(0, len(order), units_per_batch):
        yield [units[i] for i in order[start:start + units_per_batch]]
