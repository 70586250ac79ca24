"""Building the environments a run trains and evaluates on.

The learner only ever reads ``Transition``s and observations; this module is where a run
config becomes env constructor arguments. With ``compact_prompts`` (always for the tiny
character-level policy, where every prompt character is a token it must attend to) the
role prompts are short (and the search env's generated world is its compact form);
otherwise each env's documented default prompts and world are used.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from srpo_agents.config import TrainConfig
from srpo_envs.routing import TokenCounter

TINY_MATH_PROMPTS = {
    "solver": "{question}\n",
    "solver_retry": "{question}\nWas: {previous}\nCheck: {feedback}\n",
    "verifier": "{question}\n{solution}\nVerdict: ",
    # No question and only the solvers' final answers: the tiny aggregator chooses among
    # its solvers' answers (a short prompt it learns to read reliably), so the team's
    # answer comes from its solvers and their credit is real.
    "aggregator": "{answers}\nFinal: ",
    "router": "{question}\nRoute: ",
}
# The history first and the question last: in every round the question (whose last
# word, in the compact world, is the name to search for) ends the prompt, so the name
# sits at one fixed distance before the reply in every round (whether that makes the
# copy come sooner is not settled: benchmarks/results/search_track.md).
TINY_SEARCH_PROMPTS = {
    "agent": "{history}\nQ: {question}\n",
    "searcher": "{history}\nSearch for: {question}\n",
    "aggregator": "{history}\nQ: {question}\nAnswer or search: ",
    "answerer": "{history}\nQ: {question}\nAnswer: ",
    "verifier": "{history}\nProposed: {answer}\nQ: {question}\nVerdict: ",
    "router": "{history}\nQ: {question}\nSearchers: ",
}


def env_kwargs(config: TrainConfig, split: str,
               token_counter: TokenCounter | None = None) -> dict[str, Any]:
    """Constructor arguments for the training ("train") or held-out ("test") env.
    ``token_counter``: counts a text's tokens for the team cost (the policy's tokenizer)."""
    tiny = config.compact_prompts
    dataset = config.dataset if split == "train" else config.eval_dataset
    kwargs: dict[str, Any] = {"workflow": config.workflow,
                              "cost_per_token": config.cost_per_token}
    if config.cost_per_token:
        kwargs["token_counter"] = token_counter
    if config.env == "SRPO-Math-v0":
        kwargs.update(n_solvers=config.n_agents, max_rounds=config.max_turns,
                      difficulty=config.difficulty, split=split)
        if tiny:
            kwargs["prompts"] = TINY_MATH_PROMPTS
            kwargs["max_output_chars"] = max(64, 4 * config.max_new_tokens)
    else:
        kwargs.update(n_searchers=config.n_agents, max_turns=config.max_turns, split=split,
                      retriever=config.retriever, cost_per_tool_call=config.cost_per_tool_call)
        if config.corpus:
            kwargs["corpus"] = config.corpus
        if tiny:
            kwargs.update(prompts=TINY_SEARCH_PROMPTS, top_k=2, max_passage_chars=160)
            if not dataset:
                # Short names and one-sentence facts: a world the byte-level policy can read.
                kwargs["world"] = "compact"
    if dataset:
        kwargs["dataset"] = dataset
    kwargs.update(config.extra_env_kwargs)
    return kwargs


def env_factory(config: TrainConfig, split: str,
                token_counter: TokenCounter | None = None) -> Callable[[int], Any]:
    """A function seed -> a fresh PettingZoo parallel env of the run."""
    kwargs = env_kwargs(config, split, token_counter)
    if config.env == "SRPO-Math-v0":
        from srpo_envs import math_v0 as module
    else:
        from srpo_envs import search_v0 as module
    shared: dict[str, Any] = {}

    def make(seed: int):
        env = module.parallel_env(seed=seed, **kwargs)
        # One retriever (index) serves every search env of the run.
        if config.env == "SRPO-Search-v0":
            shared.setdefault("retriever", env.retriever)
            kwargs["retriever"] = shared["retriever"]
        return env

    return make
