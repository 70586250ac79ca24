"""``RolloutConfig``: how episodes are sampled (backend, sampling, workers), a section of ``TrainConfig``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from srpo_agents.config.checks import WEIGHT_SYNCS, check_int, check_role_sampling


@dataclass
class RolloutConfig:
    """How episodes are generated (the temperature is the learner's too: see below)."""

    max_new_tokens: int = 48
    """Most tokens one agent may generate per event."""
    drop_unfinished: bool = False
    """Send the env None instead of a response that hit max_new_tokens (no EOS), so the
    event lists the agent as missing and the learner drops the event whole instead of
    training on a cut-off text (srpo_agents.rollout.engine). The tokens still count as cost."""
    backend: str = "hf"
    """Rollout backend: hf or vllm."""
    vllm_gpu_memory: float = 0.3
    """--backend vllm on a GPU: the share of the GPU's memory its engines take, together,
    beside the learner in the same process (TRL's vllm_gpu_memory_utilization), split
    evenly between the engines (one per role with --per-role-policies). vLLM's own
    default, 0.9, leaves the learner no room. Unused on the CPU."""
    vllm_sleep_level: int = 1
    """--backend vllm on a GPU: vLLM's sleep mode while the learner updates (where the
    installed vLLM has it): 1 moves the engines' weights to CPU memory and frees their KV
    cache, 2 frees the weights too (the sync after the update rewrites them; with
    --per-role-adapters 1 is used: the frozen base is never rewritten), 0 keeps them
    awake. Unused on the CPU."""
    vllm_compile: bool = False
    """--backend vllm on the CPU: vLLM's compiled model (torch.compile) instead of eager
    mode. SmolLM2's held-out evaluation ran 1.59x as fast with it and a 2 GiB KV cache
    (1.14x from the cache alone), after about a minute of compiling at start-up
    (``benchmarks/results/vllm_eval_levers.md``). A GPU engine compiles whatever this says."""
    max_batch: int = 256
    """Most prompts one generation forward batches (hf) or vLLM's max_num_seqs: more
    rows use a GPU better, fewer bound the KV cache's memory."""
    hf_compile: bool = False
    """--backend hf: decode with a static KV cache under torch.compile (CUDA graphs on a
    GPU; srpo_agents.rollout.hf_generator). The first batch of each shape compiles (~40 s
    for SmolLM2 on 2 CPU cores), and compiled kernels round differently from the
    learner's forward, so pi_old is the learner's. On a GPU --backend vllm is faster."""
    rollout_workers: int = 0
    """Training rollouts on this many Ray actors (extra ray; srpo_agents.rollout.ray_engine); 0
    plays them in this process and imports nothing of Ray."""
    ray_address: str = ""
    """Join this Ray cluster (host:port of `ray start --head`) instead of starting a local
    Ray instance; only with --rollout-workers or --ray-ranks."""
    rollout_worker_gpus: float = 0.0
    """GPUs each Ray rollout worker takes (a share such as 0.5, or whole ones); its model
    and generation then run on that GPU. 0: the workers run on the CPU."""
    rollout_device: str = ""
    """Asynchronous runs (max_staleness >= 1) without Ray workers: the device the rollout
    process generates on ("cuda:1": a GPU of its own; "cpu"); empty: the CPU, as
    before. Its copy of the policy goes there in --dtype's precision."""
    weight_sync: str = "collective"
    """How updated weights reach the Ray rollout workers: "collective" (a broadcast over
    a group of the learner and the workers: gloo, or NCCL where all hold a GPU;
    srpo_agents.rollout.weight_sync) or "object_store" (the state dict through Ray's
    object store). Asynchronous runs (max_staleness >= 1) use the object store, which
    does not wait for busy workers."""
    role_sampling: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Per-role sampling, a JSON object by role, e.g. '{"verifier": {"temperature": 0.7,
    "top_p": 0.9, "max_new_tokens": 16, "stop": ["</answer>"]}}'; a role's unset keys
    take the run's (--temperature, top_p 1, --max-new-tokens, no stop strings). The
    learner scores each row at its own role's temperature."""

    def check_rollout(self) -> None:
        if self.backend not in ("hf", "vllm"):
            raise ValueError(f"backend={self.backend!r}: expected 'hf' or 'vllm'")
        check_int(self, "max_new_tokens", 1)
        check_int(self, "max_batch", 1)
        if self.vllm_sleep_level not in (0, 1, 2):
            raise ValueError(f"vllm_sleep_level={self.vllm_sleep_level!r}: expected 0 "
                             f"(awake), 1 or 2")
        if self.vllm_compile and self.backend != "vllm":
            raise ValueError(f"vllm_compile with backend={self.backend!r}: it compiles "
                             f"vLLM's model (--hf-compile compiles the hf decode loop)")
        if self.hf_compile and self.backend != "hf":
            raise ValueError(f"hf_compile with backend={self.backend!r}: it compiles the "
                             f"hf decode loop (vLLM compiles its own)")
        check_role_sampling(self.role_sampling)
        share = self.vllm_gpu_memory
        if not (isinstance(share, int | float) and not isinstance(share, bool)
                and 0 < share < 1):
            raise ValueError(f"vllm_gpu_memory={share!r}: expected a share of the GPU's "
                             f"memory in (0, 1)")
        check_int(self, "rollout_workers", 0)
        gpus = self.rollout_worker_gpus
        if not (isinstance(gpus, int | float) and not isinstance(gpus, bool) and gpus >= 0):
            raise ValueError(f"rollout_worker_gpus={gpus!r}: expected a number of GPUs >= 0")
        if self.rollout_device and not (self.rollout_device == "cpu"
                                        or self.rollout_device.startswith("cuda")):
            raise ValueError(f"rollout_device={self.rollout_device!r}: expected 'cpu', "
                             f"'cuda' or 'cuda:N'")
        if self.weight_sync not in WEIGHT_SYNCS:
            raise ValueError(f"weight_sync={self.weight_sync!r}: expected one of "
                             f"{WEIGHT_SYNCS}")
