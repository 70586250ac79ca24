"""srpo_envs: multi-agent LLM environments whose every state transition is tagged with
the outputs it consumed (``Transition``). Imports no torch.

Importing this package registers the built-in envs (``SRPO-Math-v0``,
``SRPO-Search-v0``, ``SRPO-Countdown-v0``) and every installed plugin's (entry-point group ``srpo.envs``) in
``srpo_envs.registry`` and with Gymnasium, through string entry points: ``gym.make``
imports an env only when it is made. ``gym.register_envs(srpo_envs)`` is the Gymnasium
1.x way to say so; ``gym.make("srpo_envs:SRPO-Math-v0")`` imports and makes in one.
"""

from srpo_envs.registry import EnvSpec, RunSettings, discover_plugins, register
from srpo_envs.transition import ConsumedOutput, Transition

__version__ = "0.1.0"

_MATH_BENCHMARKS = {
    "aime24": ("math/aime24.jsonl", None),
    "amc23": ("math/amc23.jsonl", None),
    "math500": ("math/math500.jsonl", None),
    "gsm8k": ("math/gsm8k_test.jsonl", None),
}
_SEARCH_BENCHMARKS = {
    "nq": ("search/nq_open_test.jsonl", None),
    "triviaqa": ("search/triviaqa_512.jsonl", None),
    "popqa": ("search/popqa_512.jsonl", None),
    "hotpotqa": ("search/hotpotqa_dev_500.jsonl", "search/hotpotqa_dev_corpus.jsonl"),
    "2wiki": ("search/2wikimultihopqa_dev_512.jsonl", None),
    "musique": ("search/musique_dev_512.jsonl", None),
    "bamboogle": ("search/bamboogle.jsonl", None),
}

BUILTIN_SPECS = (
    EnvSpec(
        name="SRPO-Math-v0", entry_point="srpo_envs.math_v0:parallel_env",
        workflows=("single", "solve_verify", "parallel", "routed"),
        description="math solve-and-verify: solvers, verifier, aggregator, router",
        agents_argument="n_solvers", turns_argument="max_rounds",
        levels_argument="difficulty", compact_prompts="srpo_envs.math_v0:COMPACT_PROMPTS",
        prompt_sets="srpo_envs.envs.math_env:PROMPT_SETS",
        kwargs_function="srpo_envs.math_v0:run_kwargs",
        config_class="srpo_envs.envs.math_env:MathEnvConfig",
        reference_team="srpo_envs.scripted:ScriptedMathTeam",
        benchmarks=_MATH_BENCHMARKS),
    EnvSpec(
        name="SRPO-Search-v0", entry_point="srpo_envs.search_v0:parallel_env",
        workflows=("single", "parallel", "search_answer_verify", "routed"),
        description="multi-turn search QA over a corpus: searchers, answerer, verifier, "
                    "aggregator, router",
        agents_argument="n_searchers", turns_argument="max_turns",
        compact_prompts="srpo_envs.search_v0:COMPACT_PROMPTS",
        compact_kwargs={"top_k": 2, "max_passage_chars": 160},
        kwargs_function="srpo_envs.search_v0:run_kwargs",
        config_class="srpo_envs.envs.search_env:SearchEnvConfig",
        reference_team="srpo_envs.scripted:search_reference_team",
        shared_attributes=("retriever",), tool_calls=True, benchmarks=_SEARCH_BENCHMARKS),
    # Built with srpo_envs.describe and the generic EnvSpec.kwargs: the tutorial's env
    # (docs/new-environment.md), registered as a plugin would be.
    EnvSpec(
        name="SRPO-Countdown-v0", entry_point="srpo_envs.countdown_v0:parallel_env",
        workflows=("single", "parallel"),
        description="Countdown: reach a target from given numbers with + - * /; solvers "
                    "(proposers), aggregator",
        agents_argument="n_proposers", levels_argument="levels",
        compact_prompts="srpo_envs.countdown_v0:COMPACT_PROMPTS",
        reference_team="srpo_envs.scripted:ScriptedCountdownTeam",
        config_class="srpo_envs.envs.countdown_env:CountdownConfig"),
)


def register_envs() -> None:
    """Register the built-in envs and discover installed plugins (idempotent)."""
    for spec in BUILTIN_SPECS:
        register(spec)
    discover_plugins()


register_envs()

__all__ = ["ConsumedOutput", "EnvSpec", "RunSettings", "Transition", "register",
           "register_envs"]
