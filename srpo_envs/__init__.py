"""srpo_envs: multi-agent LLM environments whose every state transition is tagged with
the outputs it consumed (``Transition``). Imports no torch.

Importing this package registers the Gymnasium ids ``SRPO-Math-v0`` and
``SRPO-Search-v0`` with string entry points, so ``gym.make`` imports an env only
when it is made. Without importing it first, ``gym.make("srpo_envs:SRPO-Math-v0")``
does both.
"""

from gymnasium.envs.registration import register, registry

from srpo_envs.transition import ConsumedOutput, Transition

__version__ = "0.1.0"


def register_envs() -> None:
    if "SRPO-Math-v0" not in registry:
        register(id="SRPO-Math-v0", entry_point="srpo_envs.math_v0:gym_env")
    if "SRPO-Search-v0" not in registry:
        register(id="SRPO-Search-v0", entry_point="srpo_envs.search_v0:gym_env")


register_envs()

__all__ = ["ConsumedOutput", "Transition", "register_envs"]
