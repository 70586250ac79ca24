"""The test-scale model: ``--model tiny``, one model source among the others.

Why it exists: the test suite, the CPU benchmarks and ``make demo`` need a policy that
trains in seconds to minutes on two CPU cores and whose learning can be checked against
a margin. A 1M-parameter byte-level Qwen2-shaped model (``model``) does that; it is built
here, from nothing, so it needs no download. A random model never answers right, so
before RL it imitates scripted teams' trajectories (``warmstart``). Users train
pretrained LLMs (``srpo_agents.models.sources``); this model is for testing the machinery.

What lives here:
- ``model``: the builder and its byte-level (optionally BPE) tokenizer;
- ``warmstart``: the supervised warm start and its cache;
- ``config.TinyConfig``: its options (the ``srpo train`` tiny-model flags, recorded in a
  run's ``model_options``);
- ``source.TinySource``: what ``srpo train --model tiny`` calls to get its policy.
"""

from srpo_agents.tiny.config import TinyConfig
from srpo_agents.tiny.model import build_tiny_policy

__all__ = ["TinyConfig", "build_tiny_policy"]
