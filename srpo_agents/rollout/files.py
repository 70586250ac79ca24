"""Sampled episodes as JSON Lines, for other trainers (``srpo rollout --out FILE``).

One row per ``Transition``, in episode order::

    {"transition": Transition.to_dict(),
     "samples": {agent_id: {"role", "prompt_ids", "response_ids", "logprobs",
                            "finished", "text", "policy_version", "temperature"}}}

``transition.consumed`` is the event's active set (the outputs it took in); ``samples``
holds the token ids and behaviour log-probs behind each of them (and behind a due agent
that was dropped, as the learner drops such events whole). ``read_rollouts`` turns the
file back into the ``Rollout`` records the learner trains on.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path

from srpo_agents.rollout.engine import Rollout, Sample
from srpo_envs import Transition

_SAMPLE_FIELDS = ("role", "prompt_ids", "response_ids", "logprobs", "finished", "text",
                  "policy_version", "temperature")
_OPTIONAL_FIELDS = ("temperature",)  # absent from files written before it was recorded


def rollout_rows(rollout: Rollout) -> Iterable[dict]:
    for transition in rollout.transitions:
        samples = {agent: {name: getattr(sample, name) for name in _SAMPLE_FIELDS}
                   for (step, agent), sample in rollout.samples.items()
                   if step == transition.step_index}
        yield {"transition": transition.to_dict(), "samples": samples}


def write_rollouts(rollouts: Iterable[Rollout], path: str | Path) -> int:
    """Write every transition of ``rollouts`` to ``path`` (atomically: a temporary file
    renamed into place); returns the number of rows."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + ".tmp")
    rows = 0
    with temporary.open("w", encoding="utf-8") as handle:
        for rollout in rollouts:
            for row in rollout_rows(rollout):
                handle.write(json.dumps(row, ensure_ascii=False) + "\n")
                rows += 1
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)
    return rows


def rollouts_from_rows(rows: Iterable[tuple[dict, str]]) -> list[Rollout]:
    """The episodes of ``(row, where)`` pairs as ``rollout_rows`` wrote them, in order; a
    row that is not such a record is an error naming ``where``."""
    episodes: dict[str, Rollout] = {}
    for row, where in rows:
        try:
            transition = Transition.from_dict(row["transition"])
            samples = {agent: Sample(episode_id=transition.episode_id,
                                     step_index=transition.step_index, agent_id=agent,
                                     **{name: fields[name] for name in _SAMPLE_FIELDS
                                        if name in fields or name not in _OPTIONAL_FIELDS})
                       for agent, fields in row["samples"].items()}
        except (ValueError, KeyError, TypeError) as err:
            raise ValueError(f"{where}: not a rollout row ({err!r})") from None
        episode = episodes.setdefault(transition.episode_id, Rollout(
            episode_id=transition.episode_id, task_id=transition.task_id, transitions=[]))
        episode.transitions.append(transition)
        episode.samples.update({(transition.step_index, a): s for a, s in samples.items()})
    return list(episodes.values())


def read_rollouts(path: str | Path) -> list[Rollout]:
    """The episodes of a file written by ``write_rollouts``, in file order. A row that is
    not such a record is an error naming the file and line."""
    def rows():
        with Path(path).open(encoding="utf-8") as handle:
            for number, line in enumerate(handle, start=1):
                if line.strip():
                    try:
                        row = json.loads(line)
                    except ValueError as err:
                        raise ValueError(f"{path}:{number}: not a rollout row ({err!r})") \
                            from None
                    yield row, f"{path}:{number}"

    return rollouts_from_rows(rows())
