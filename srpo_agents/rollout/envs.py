"""Building the environments a run trains and evaluates on.

The learner only ever reads ``Transition``s and observations; this module is where a run
config becomes env constructor arguments, through the env's registered ``EnvSpec``
(``srpo_envs.registry``): any registered env, built-in or plugin, trains the same way.
With ``compact_prompts`` (always for the tiny character-level policy, where every prompt
character is a token it must attend to) the spec's compact prompts are used; otherwise
each env's documented default prompts.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from srpo_envs.registry import RunSettings, get
from srpo_envs.routing import TokenCounter

if TYPE_CHECKING:  # for the annotations only: config imports this module
    from srpo_agents.config import TrainConfig


def run_settings(config: TrainConfig, split: str,
                 token_counter: TokenCounter | None = None) -> RunSettings:
    return RunSettings(
        workflow=config.workflow, split=split, n_agents=config.n_agents,
        max_turns=config.max_turns,
        # Dataset files keep their own splits: the training file serves the validation
        # checks made during training; the test file is read by the final evaluation.
        dataset=config.dataset if split in ("train", "validation") else config.eval_dataset,
        compact=config.compact_prompts, max_new_tokens=config.max_new_tokens,
        difficulty=config.difficulty, corpus=config.corpus, retriever=config.retriever,
        cost_per_token=config.cost_per_token, cost_per_tool_call=config.cost_per_tool_call,
        token_counter=token_counter)


def env_kwargs(config: TrainConfig, split: str,
               token_counter: TokenCounter | None = None) -> dict[str, Any]:
    """Constructor arguments for the "train", "validation" or "test" env.
    ``token_counter``: counts a text's tokens for the team cost (the policy's tokenizer)."""
    kwargs = get(config.env).kwargs(run_settings(config, split, token_counter))
    kwargs.update(config.extra_env_kwargs)
    return kwargs


def env_factory(config: TrainConfig, split: str,
                token_counter: TokenCounter | None = None) -> Callable[[int], Any]:
    """A function seed -> a fresh PettingZoo parallel env of the run."""
    spec = get(config.env)
    kwargs = env_kwargs(config, split, token_counter)
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
