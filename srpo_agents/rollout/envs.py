"""Building the environments a run trains and evaluates on.

The learner only ever reads ``Transition``s and observations; this module builds the
envs that give them, with the constructor arguments of the run's config
(``TrainConfig.env_kwargs``, through the env's registered ``EnvSpec``): any registered
env, built-in or plug-in, trains the same way. With ``compact_prompts`` (always for the
tiny character-level policy, where every prompt character is a token it must attend to)
the spec's compact prompts are used; otherwise each env's documented default prompts.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from srpo_envs.registry import get
from srpo_envs.routing import TokenCounter

if TYPE_CHECKING:
    from srpo_agents.config import TrainConfig


def env_factory(config: TrainConfig, split: str,
                token_counter: TokenCounter | None = None) -> Callable[[int], Any]:
    """A function seed -> a fresh PettingZoo parallel env of the run."""
    spec = get(config.env)
    kwargs = config.env_kwargs(split, token_counter)
    shared: dict[str, Any] = {}

    def make(seed: int):
        env = spec.make(seed=seed, **kwargs, **shared)
        # What the spec shares (the search env's retriever index) is built by the first
        # env and handed to every later env of the run.
        if not shared:
            shared.update({name: getattr(env, name) for name in spec.shared_attributes})
            for name in shared:
                kwargs.pop(name, None)
        return env

    return make


def env_pool(make_env: Callable[[int], Any], size: int, seed: int) -> list:
    """``size`` envs of ``make_env``, seeded from ``seed`` one by one (the training pool
    of a run, in this process or in a rollout process: the same seeds, the same envs)."""
    return [make_env(seed * 1_000_003 + i) for i in range(size)]


def check_data(config: TrainConfig) -> None:
    """Build one train and one held-out env before anything else, so a bad dataset row or
    corpus row (named by file and line) stops the run before its warm start."""
    for split in ("train", "test"):
        env_factory(config, split)(config.seed).close()
