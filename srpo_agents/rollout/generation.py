"""Generation backends: token ids in, sampled token ids and their behaviour log-probs out.

Both backends implement ``generate(prompts) -> [(response_ids, logprobs, finished)]`` and
``sync_weights(model)``. ``RolloutEngine`` owns one and calls ``sync_weights`` when the
learner has bumped the policy version.

The backends: ``hf_generator.HFGenerator`` (default: a sampling loop over the
transformers model, its KV-cache layers in ``static_cache``) and
``vllm_generator.VLLMGenerator``; what both share (``Sampling``, ``sample_next``, the
output's shape) is in ``sampling``.
"""

from srpo_agents.rollout.hf_generator import HFGenerator
from srpo_agents.rollout.vllm_generator import VLLMGenerator

BACKENDS = {"hf": HFGenerator, "vllm": VLLMGenerator}
