"""SRPO-Countdown-v0 (PettingZoo thin versioned module). See
``srpo_envs.envs.countdown_env``."""

from pettingzoo.utils.conversions import parallel_to_aec

from srpo_envs.envs.countdown_env import (
    DEFAULT_PROMPTS,
    WORKFLOWS,
    CountdownConfig,
    CountdownEnv,
    parallel_env,
)

raw_env = CountdownEnv

# Short role prompts for the tiny character-level policy: "3 5 2 to 16" and the reply.
COMPACT_PROMPTS = {
    "solver": "{numbers} to {target}\n",
    "aggregator": "{numbers} to {target}\n{proposals}\nFinal: ",
}


def env(**kwargs):
    """The AEC form, converted by PettingZoo from the parallel env."""
    return parallel_to_aec(parallel_env(**kwargs))


__all__ = ["COMPACT_PROMPTS", "DEFAULT_PROMPTS", "WORKFLOWS", "CountdownConfig",
           "CountdownEnv", "env", "parallel_env", "raw_env"]
