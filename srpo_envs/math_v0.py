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

raw_env = MathEnv


def env(**kwargs):
    """The AEC form, converted by PettingZoo from the parallel env."""
    return parallel_to_aec(parallel_env(**kwargs))


def gym_env(**kwargs) -> SetwiseGymEnv:
    """The setwise Gymnasium view (entry point of ``gym.make("SRPO-Math-v0")``)."""
    render_mode = kwargs.pop("render_mode", None)
    return SetwiseGymEnv(parallel_env(render_mode=render_mode, **kwargs))


__all__ = ["DEFAULT_PROMPTS", "WORKFLOWS", "MathEnv", "MathEnvConfig", "env", "gym_env",
           "parallel_env", "raw_env"]
