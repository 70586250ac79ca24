"""SRPO-Search-v0 (PettingZoo thin versioned module). See ``srpo_envs.envs.search_env``."""

from pettingzoo.utils.conversions import parallel_to_aec

from srpo_envs.envs.search_env import (
    DEFAULT_PROMPTS,
    SearchEnv,
    SearchEnvConfig,
    parallel_env,
)
from srpo_envs.gym_view import SetwiseGymEnv
from srpo_envs.registry import RunSettings

raw_env = SearchEnv

# Short role prompts for the tiny character-level policy. The history first and the
# question last: in every round the question (whose last word, in the compact world, is
# the name to search for) ends the prompt, so the name sits at one fixed distance before
# the reply in every round (whether that makes the copy come sooner is not settled:
# benchmarks/results/search_track.md).
COMPACT_PROMPTS = {
    "agent": "{history}\nQ: {question}\n",
    "searcher": "{history}\nSearch for: {question}\n",
    "aggregator": "{history}\nQ: {question}\nAnswer or search: ",
    "answerer": "{history}\nQ: {question}\nAnswer: ",
    "verifier": "{history}\nProposed: {answer}\nQ: {question}\nVerdict: ",
    "router": "{history}\nQ: {question}\nSearchers: ",
}


def run_kwargs(settings: RunSettings, kwargs: dict) -> dict:
    """A training run's constructor arguments (``EnvSpec.kwargs_function``): the
    retriever and corpus, and for the tiny policy a world it can read."""
    kwargs["retriever"] = settings.retriever
    if settings.corpus:
        kwargs["corpus"] = settings.corpus
    if settings.compact and not settings.dataset:
        # Short names and one-sentence facts: a world the byte-level policy can read.
        kwargs["world"] = "compact"
    return kwargs


def env(**kwargs):
    """The AEC form, converted by PettingZoo from the parallel env."""
    return parallel_to_aec(parallel_env(**kwargs))


def gym_env(**kwargs) -> SetwiseGymEnv:
    """The setwise Gymnasium view (entry point of ``gym.make("SRPO-Search-v0")``)."""
    render_mode = kwargs.pop("render_mode", None)
    return SetwiseGymEnv(parallel_env(render_mode=render_mode, **kwargs))


__all__ = ["COMPACT_PROMPTS", "DEFAULT_PROMPTS", "SearchEnv", "SearchEnvConfig", "env", "gym_env",
           "parallel_env", "raw_env", "run_kwargs"]
