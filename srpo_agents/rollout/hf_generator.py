"""The default generation backend: ``HFGenerator``, a plain sampling loop over the
transformers model.

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
- **Reproducible.** Draws come from one ``torch.Generator`` seeded once, so the same seed,
  prompts and call order give the same samples. Prompts are sorted by length before they
  are cut into chunks of ``max_batch`` (less padding per chunk); results come back in the
  caller's order.
- Runs under ``torch.inference_mode`` with the model in eval mode; its train/eval mode is
  restored afterwards.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from srpo_agents.models.policy import Policy
from srpo_agents.rollout.sampling import (
    GenerationOutput,
    Sampling,
    cache_kwarg,
    sample_next,
    sampling_groups,
)
from srpo_agents.rollout.static_cache import StaticSlotLayer, reserved_layer_type


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
                for setting, rows in sampling_groups(sampling, len(prompts), self.default):
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
