"""SRPO-Math-v0 (PettingZoo thin versioned module). See ``srpo_envs.envs.math_env``."""

from pettingzoo.utils.conversions import parallel_to_aec

from srpo_envs.envs.math_env import (
    DEFAULT_PROMPTS,
    WORKFLOWS,
    MathEnv,
    MathEnvConfig,
    parallel_env,
)
from srpo_envs.gym_view import SetwiseGymEnv
from srpo_envs.registry import RunSettings

raw_env = MathEnv

# Short role prompts for the tiny character-level policy, whose every prompt character
# is a token it must attend to.
COMPACT_PROMPTS = {
    "solver": "{question}\n",
    "solver_retry": "{question}\nWas: {previous}\nCheck: {feedback}\n",
    "verifier": "{question}\n{solution}\nVerdict: ",
    # No question and only the solvers' final answers: the tiny aggregator chooses among
    # its solvers' answers (a short prompt it learns to read reliably), so the team's
    # answer comes from its solvers and their credit is real.
    "aggregator": "{answers}\nFinal: ",
    "router": "{question}\nRoute: ",
}


def run_kwargs(settings: RunSettings, kwargs: dict) -> dict:
    """A training run's constructor arguments (``EnvSpec.kwargs_function``): the tiny
    policy's replies are bounded by its token budget (one character per token)."""
    if settings.compact:
        kwargs["max_output_chars"] = max(64, 4 * settings.max_new_tokens)
    return kwargs


def env(**kwargs):
    """The AEC form, converted by PettingZoo from the parallel env."""
    return parallel_to_aec(parallel_env(**kwargs))


def gym_env(**kwargs) -> SetwiseGymEnv:
    """The setwise Gymnasium view (entry point of ``gym.make("SRPO-Math-v0")``)."""
    render_mode = kwargs.pop("render_mode", None)
    return SetwiseGymEnv(parallel_env(render_mode=render_mode, **kwargs))


__all__ = ["COMPACT_PROMPTS", "DEFAULT_PROMPTS", "WORKFLOWS", "MathEnv", "MathEnvConfig", "env", "gym_env",
           "parallel_env", "raw_env", "run_kwargs"]
