"""The setwise Gymnasium view of an srpo environment: one gym step = one event.

Observation: ``{"due": MultiBinary(n_agents), "prompts": Dict(agent -> Text)}``. The
prompts of the agents due to act are their full prompts; the others are "". Action: a
dict of texts keyed by agent id; only the due agents' texts are read, so a caller may
pass just those. Reward: the event's team reward. ``info["transition"]`` is the event's
``Transition`` (its ``consumed`` is the active set). After the episode ends the
observation has no agent due.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from srpo_envs.event_env import EventEnv


class SetwiseGymEnv(gym.Env):
    metadata = {"render_modes": ["ansi"], "render_fps": 1}

    def __init__(self, parallel_env: EventEnv):
        self.parallel = parallel_env
        self.render_mode = parallel_env.render_mode
        self.agent_ids = list(parallel_env.possible_agents)
        self.observation_space = spaces.Dict({
            "due": spaces.MultiBinary(len(self.agent_ids)),
            "prompts": spaces.Dict({a: parallel_env.observation_space(a)
                                    for a in self.agent_ids}),
        })
        self.action_space = spaces.Dict({a: parallel_env.action_space(a)
                                         for a in self.agent_ids})

    def _observation(self, observations: dict[str, str]) -> dict[str, Any]:
        due = set(self.parallel.due_agents)
        return {
            "due": np.array([a in due for a in self.agent_ids], dtype=np.int8),
            "prompts": {a: observations.get(a, "") if a in due else ""
                        for a in self.agent_ids},
        }

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        observations, _ = self.parallel.reset(seed=seed, options=options)
        return self._observation(observations), {"due": list(self.parallel.due_agents)}

    def step(self, action: dict[str, Any]):
        due = self.parallel.due_agents
        if not isinstance(action, dict):
            raise TypeError(f"action must be a dict of agent id to text, got "
                            f"{type(action).__name__}")
        observations, _, _, _, _ = self.parallel.step(action)
        transition = self.parallel.last_transition
        assert transition is not None and set(transition.expected_agents) == set(due)
        info = {"transition": transition, "due": list(self.parallel.due_agents)}
        return (self._observation(observations), transition.reward, transition.terminated,
                transition.truncated, info)

    def render(self):
        return self.parallel.render()

    def close(self):
        self.parallel.close()
