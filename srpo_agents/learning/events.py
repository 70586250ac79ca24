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

Once the advantages are computed, a ``UnitBatch`` (units, one advantage each) is what the
learner updates on: it cuts the batch into mini-batches of whole episodes
(``minibatches``), those into micro-batches of whole units, and a micro-batch gives the loss its rows
(``samples``), each row's unit (``unit_index``) and each unit's size K.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from srpo_agents.learning.objective import UnitInfo
from srpo_agents.rollout.engine import Rollout, Sample


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


@dataclass
class UnitBatch:
    """Action units with one advantage each: an update's batch, or a mini- or micro-batch
    of it. Its rows are the units' member samples, unit by unit."""
    units: list[ActionUnit]
    advantages: np.ndarray

    def __post_init__(self) -> None:
        self.advantages = np.asarray(self.advantages, dtype=np.float64)
        if self.advantages.shape != (len(self.units),):
            raise ValueError(f"advantages: shape {self.advantages.shape} for "
                             f"{len(self.units)} units; expected one advantage per unit")

    def __len__(self) -> int:
        return len(self.units)

    def subset(self, index: Sequence[int]) -> UnitBatch:
        index = list(index)
        return UnitBatch([self.units[i] for i in index], self.advantages[index])

    def minibatches(self, episodes_per_batch: int, rng: random.Random, by: str = "episode"
                    ) -> Iterator[UnitBatch]:
        """Mini-batches of whole episodes: the episodes in a shuffled order, cut every
        ``episodes_per_batch``, each mini-batch every unit of its episodes (so every unit
        whole, every event's members together). ``by`` "task": the tasks in a shuffled
        order instead, each task's episodes side by side (in their first-appearance
        order), so a mini-batch holds whole groups where the sizes allow and their rows
        share the task's prompts.

        Sized in episodes, never in units: a unit is a set under SRPO but one output under
        the per-output baselines, so a count of units gave a K = 3 team's baselines twice
        SRPO's optimizer steps on the same batch (issue 60). By episodes, every algorithm
        takes the same steps on the same episodes: the shuffle sees only the episodes'
        order of first appearance, which the unit forms share."""
        if episodes_per_batch < 1:
            raise ValueError(f"episodes_per_batch={episodes_per_batch!r}: expected >= 1")
        by_episode: dict[str, list[int]] = {}
        tasks: dict[Any, list[str]] = {}
        for i, unit in enumerate(self.units):
            if unit.info.episode_id not in by_episode:
                tasks.setdefault(unit.info.task_id, []).append(unit.info.episode_id)
            by_episode.setdefault(unit.info.episode_id, []).append(i)
        if by == "task":
            order = list(tasks)
            rng.shuffle(order)
            episodes = [episode for task in order for episode in tasks[task]]
        else:
            episodes = list(by_episode)
            rng.shuffle(episodes)
        for start in range(0, len(episodes), episodes_per_batch):
            yield self.subset([i for episode in episodes[start:start + episodes_per_batch]
                               for i in by_episode[episode]])

    @property
    def episodes(self) -> int:
        """Distinct episodes among the units."""
        return len({u.info.episode_id for u in self.units})

    @property
    def samples(self) -> list:
        return [m for u in self.units for m in u.members]

    @property
    def unit_index(self) -> list[int]:
        """Each row's unit, 0-based within this batch."""
        return [i for i, u in enumerate(self.units) for _ in u.members]

    @property
    def unit_sizes(self) -> list[float]:
        return [float(u.size) for u in self.units]

    @property
    def response_tokens(self) -> int:
        return sum(len(m.response_ids) for u in self.units for m in u.members)

    def ages(self, version: int) -> list[int]:
        """Each unit's age at learner version ``version``: updates since its oldest member
        was sampled (a set is as stale as its stalest output)."""
        return [version - min(m.policy_version for m in u.members) for u in self.units]

    def fresh(self, version: int, max_staleness: int) -> tuple[UnitBatch, dict]:
        """The units at most ``max_staleness`` versions old (the others are dropped whole)
        and the figures of the step: ``staleness_hist`` (units by age, 0 up to the oldest),
        ``staleness_mean`` and ``sets_dropped_stale``."""
        ages = self.ages(version)
        keep = [i for i, age in enumerate(ages) if age <= max_staleness]
        counts = np.bincount(ages, minlength=1).tolist() if ages else [0]
        figures = {"staleness_hist": counts,
                   "staleness_mean": float(np.mean(ages)) if ages else 0.0,
                   "sets_dropped_stale": len(ages) - len(keep)}
        return self.subset(keep), figures
