"""Stage 2, rollouts: ``envs`` (an env by its registered name), ``generation`` (the hf
and vLLM backends), ``engine`` (``RolloutEngine``: many episodes stepped at once, every
turn tagged with the outputs it consumed), ``files`` (rollouts written to and read from
JSONL), ``process`` (the rollouts of asynchronous SRPO, in a process of their own),
``ray_engine`` (the same engine across Ray workers) and ``trl_adapter`` (an env
in TRL's ``GRPOTrainer``).

``srpo_agents.rollout`` was the engine's module before the stages were grouped; its
names (``from srpo_agents.rollout import RolloutEngine``) still resolve to ``engine``'s.
"""

import importlib


def __getattr__(name: str):
    if not name.startswith("__"):
        engine = importlib.import_module(f"{__name__}.engine")
        if hasattr(engine, name):
            return getattr(engine, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
