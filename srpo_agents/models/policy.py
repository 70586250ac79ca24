"""The policy the learner trains: a Hugging Face causal LM, its tokenizer, and the one
rule that turns an environment prompt into the token ids the model is conditioned on.

Deliberate choices:
- **Prompts are data.** An env prompt can hold text that a chat template treats as a
  control token (``<|im_end|>`` quoted from another agent's answer or from a retrieved
  passage). ``prompt_ids`` renders the chat template around a sentinel, tokenizes the
  template's own pieces normally (their control tokens stay control tokens) and the
  prompt with ``split_special_tokens=True``, so no character of the prompt can become a
  special id. Tokenizing the three pieces separately can differ from tokenizing the
  rendered string at the two seams (a BPE merge across a template boundary); it does
  not matter, because the learner scores exactly the ids built here, never a re-encoding.
  Added tokens that the tokenizer does not mark special (Qwen3's ``<think>``,
  ``<tool_call>``) are split too: where one appears in a prompt, its text is encoded in
  two halves, so the prompt's ids hold no added-token id at all. (The envs also
  neutralize such tags in quoted text: ``srpo_envs.text.neutralize_control_tokens``.)
- **No system line.** The role is not injected: every env prompt already opens with the
  role's instructions ("You are a math verifier. ..."), so one shared policy gets its role
  conditioning from the prompt itself, and a template's default system message (Qwen2.5
  adds one) stays as the model was trained with. ``role`` is part of the signature so a
  multi-policy learner can route on it.
- **No template, plain text.** A base model without ``chat_template`` is conditioned on the
  prompt text alone (still with special tokens split), plus whatever its tokenizer's
  post-processor adds (Llama's BOS).
- ``decode`` is the text the env receives: end-of-sequence, padding and every special
  token are dropped, and no tokenization-space clean-up is applied, so the text is the
  literal concatenation of the sampled tokens.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch
    import transformers

_SENTINEL = "\x00SRPO-PROMPT\x00"


@dataclass
class Policy:
    """A causal LM with its tokenizer. ``name`` is the hub name or local path it was loaded
    from (a vLLM engine loads its own copy from there)."""

    model: transformers.PreTrainedModel
    tokenizer: transformers.PreTrainedTokenizerBase
    name: str
    adapter_roles: tuple[str, ...] = ()
    """Roles with a LoRA adapter of their own on a frozen base (``srpo_agents.models.adapters``);
    empty for a plain model."""
    base_name: str = ""
    """The frozen base's hub name or path when ``adapter_roles`` is set."""
    compute_dtype: torch.dtype | None = None
    """What the forward passes compute in when it is not the weights' dtype: mixed
    precision (``--dtype bfloat16``: float32 weights, bfloat16 matmuls under autocast).
    None: the weights' own dtype."""

    def autocast(self):
        """The context every forward pass of this policy runs in: autocast to
        ``compute_dtype`` when that differs from the weights' dtype, else nothing."""
        import contextlib

        import torch

        if self.compute_dtype is None:
            return contextlib.nullcontext()
        first = next(self.model.parameters())
        if first.dtype == self.compute_dtype:
            return contextlib.nullcontext()
        return torch.autocast(device_type=first.device.type, dtype=self.compute_dtype)

    def copy_with(self, model, name: str | None = None) -> Policy:
        """This policy's tokenizer and precision around another model (a role's own copy,
        a rollout process's)."""
        return Policy(model=model, tokenizer=self.tokenizer, name=name or self.name,
                      compute_dtype=self.compute_dtype)

    def row_kwargs(self, roles: Sequence[str]) -> dict:
        """Forward kwargs that give each row of a batch its role's adapter: PEFT's
        ``adapter_names``, one per row; nothing for a plain model."""
        if not self.adapter_roles:
            return {}
        unknown = sorted(set(roles) - set(self.adapter_roles))
        if unknown:
            raise ValueError(f"roles {unknown!r} have no adapter (adapters: "
                             f"{list(self.adapter_roles)})")
        return {"adapter_names": list(roles)}

    def count_tokens(self, text: str) -> int:
        """Tokens of ``text`` without special tokens (the team cost's token count)."""
        return len(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def prompt_ids(self, role: str, prompt: str) -> list[int]:
        """Token ids the model is conditioned on when ``role`` acts on ``prompt``: the chat
        template's user turn holding ``prompt`` followed by the generation prompt, or the
        plain prompt without a template. ``role`` is not rendered (see module docstring)."""
        return self.prompt_ids_batch(role, [prompt])[0]

    def prompt_ids_batch(self, role: str, prompts: Sequence[str]) -> list[list[int]]:
        """``prompt_ids`` of many prompts: the template is rendered and its pieces encoded
        once, and the prompts go through the tokenizer in one call (about 4x faster per
        prompt than one call each, which counts in rollouts and the warm start)."""
        if not prompts:
            return []
        if not getattr(self.tokenizer, "chat_template", None):
            # The tokenizer's own BOS (if its post-processor adds one) still comes from
            # the tokenizer, never from the text.
            rows = self.tokenizer(list(prompts), add_special_tokens=True,
                                  split_special_tokens=True)["input_ids"]
            return [self._split_added(row) for row in rows]
        prefix, suffix = self._template_pieces()
        # The template writes its own BOS if it wants one, so none is added around it.
        head = self.tokenizer.encode(prefix, add_special_tokens=False)
        tail = self.tokenizer.encode(suffix, add_special_tokens=False)
        bodies = self._data_ids(prompts)
        return [head + body + tail for body in bodies]

    def decode(self, response_ids: list[int]) -> str:
        """The text of sampled ids, without EOS, padding or other special tokens."""
        dropped = self.eos_token_ids | {self.pad_token_id}
        return self.tokenizer.decode([i for i in response_ids if i not in dropped],
                                     skip_special_tokens=True,
                                     clean_up_tokenization_spaces=False)

    @property
    def eos_token_ids(self) -> frozenset[int]:
        """Ids that end a response: the tokenizer's EOS and the model's generation config
        EOS ids (chat models often list their end-of-turn token there)."""
        ids = set()
        for value in (self.tokenizer.eos_token_id,
                      getattr(self.model.generation_config, "eos_token_id", None)):
            if isinstance(value, int):
                ids.add(value)
            elif value is not None:
                ids.update(int(v) for v in value)
        if not ids:
            raise ValueError(f"policy {self.name!r} has no EOS token id: set "
                             f"tokenizer.eos_token or generation_config.eos_token_id")
        return frozenset(ids)

    @property
    def pad_token_id(self) -> int:
        return int(self.tokenizer.pad_token_id)

    # -- helpers ------------------------------------------------------------------
    def _data_ids(self, texts: Sequence[str]) -> list[list[int]]:
        """Ids of texts that are data: no special and no added-token id."""
        rows = self.tokenizer(list(texts), add_special_tokens=False,
                              split_special_tokens=True)["input_ids"]
        return [self._split_added(row) for row in rows]

    def _split_added(self, ids: list[int], depth: int = 0) -> list[int]:
        """``ids`` with every non-special added token re-encoded from its text in two
        halves (neither half can match the whole token)."""
        added = self._added_ids()
        if not added or not added.intersection(ids):
            return ids
        out: list[int] = []
        for token_id in ids:
            if token_id not in added or depth > 8:
                out.append(token_id)
                continue
            text = self.tokenizer.convert_ids_to_tokens(token_id)
            text = self.tokenizer.convert_tokens_to_string([text])
            half = max(1, len(text) // 2)
            for piece in (text[:half], text[half:]):
                piece_ids = self.tokenizer.encode(piece, add_special_tokens=False,
                                                  split_special_tokens=True)
                out += self._split_added(piece_ids, depth + 1)
        return out

    def _added_ids(self) -> frozenset[int]:
        cached = getattr(self, "_added_cache", None)
        if cached is None or cached[0] is not self.tokenizer:
            decoder = getattr(self.tokenizer, "added_tokens_decoder", {}) or {}
            ids = frozenset(int(i) for i, token in decoder.items()
                            if not getattr(token, "special", True))
            cached = (self.tokenizer, ids)
            object.__setattr__(self, "_added_cache", cached)
        return cached[1]

    def _template_pieces(self) -> tuple[str, str]:
        """The rendered chat template before and after the user content. Rendered per
        call (cheap next to generation) so a template edited after loading is honoured."""
        rendered = self.tokenizer.apply_chat_template(
            [{"role": "user", "content": _SENTINEL}], tokenize=False,
            add_generation_prompt=True)
        if rendered.count(_SENTINEL) != 1:
            raise ValueError(f"the chat template of {self.name!r} does not insert the user "
                             f"content verbatim exactly once; cannot build prompt ids")
        prefix, suffix = rendered.split(_SENTINEL)
        return prefix, suffix

DTYPES = ("auto", "float32", "bfloat16", "float16", "pure-bfloat16", "pure-float16",
          "bfloat16-if-native")
"""``--dtype``: "bfloat16" and "float16" are mixed precision (float32 weights, gradients
and AdamW state, 16-bit compute under autocast), as TRL's ``bf16=True``; the "pure-"
names keep the weights and the optimizer state in 16 bits too, where an AdamW step at a
learning rate of 1e-5 mostly rounds away. "bfloat16-if-native": mixed bfloat16 on CUDA
and on a CPU that computes bf16 natively (``native_bf16``), float32 elsewhere, where
bf16 is slower: the fastest of the two on the machine at hand, so two machines may round
differently."""


@dataclass(frozen=True)
class Precision:
    """The weights' dtype (the master copy the optimizer updates) and the forward's."""

    weights: torch.dtype
    compute: torch.dtype

    @property
    def mixed(self) -> bool:
        return self.weights != self.compute

    @property
    def autocast(self) -> torch.dtype | None:
        """``Policy.compute_dtype``: the compute dtype when it is not the weights'."""
        return self.compute if self.mixed else None


def resolve_device(device: str) -> str:
    """``"auto"``: CUDA when a GPU is present, else the CPU; anything else as given.
    Under torchrun (``LOCAL_RANK`` set) "auto" and a bare "cuda" name this rank's own GPU,
    ``cuda:<LOCAL_RANK>``: left as "cuda", every rank would land on GPU 0."""
    import os

    import torch

    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and "LOCAL_RANK" in os.environ:
        return f"cuda:{int(os.environ['LOCAL_RANK'])}"
    return device


def native_bf16() -> bool:
    """Whether this CPU computes bfloat16 natively (AVX512-BF16 or AMX): where it does,
    bf16 autocast ran a SmolLM2-like forward and backward 2.25x faster than float32;
    where it does not, 0.26x (``benchmarks/results/cpu_bf16.md``)."""
    import torch

    return bool(torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported())


def resolve_precision(dtype: str, device: str) -> Precision:
    """``--dtype`` on ``device``: "auto" is mixed bfloat16 on CUDA, float32 elsewhere;
    "bfloat16-if-native" also mixed bfloat16 on a CPU with native bf16."""
    import torch

    if dtype not in DTYPES:
        raise ValueError(f"dtype={dtype!r}: expected one of {DTYPES}")
    if dtype == "bfloat16-if-native":
        dtype = "bfloat16" if str(device) == "cpu" and native_bf16() else "auto"
    if dtype == "auto":
        dtype = "bfloat16" if str(device).startswith("cuda") else "float32"
    compute = getattr(torch, dtype.removeprefix("pure-"))
    weights = compute if dtype.startswith("pure-") or dtype == "float32" else torch.float32
    return Precision(weights, compute)


def precision_kwargs(dtype: str, device: str) -> dict:
    """``load_policy``'s ``dtype`` and ``compute_dtype`` for ``--dtype`` on ``device``."""
    precision = resolve_precision(dtype, device)
    return {"dtype": precision.weights, "compute_dtype": precision.autocast}


def resolve_dtype(dtype: str, device: str) -> torch.dtype:
    """The dtype the weights are stored and updated in (``resolve_precision``)."""
    return resolve_precision(dtype, device).weights


def place(policy: Policy, device: str, dtype: str = "auto") -> Policy:
    """Move ``policy`` to ``device`` (``"auto"`` resolved) in ``dtype``'s precision."""
    device = resolve_device(device)
    precision = resolve_precision(dtype, device)
    policy.model.to(device=device, dtype=precision.weights)
    policy.compute_dtype = precision.autocast
    return policy


def load_policy(name_or_path: str, *, device: str = "cpu",
                dtype: torch.dtype | str | None = None,
                compute_dtype: torch.dtype | None = None) -> Policy:
    """Load any Hugging Face causal LM and its tokenizer by hub name or local path, a
    .gguf file or a known source (``srpo_agents.models.sources``), or a folder of role
    adapters (``srpo_agents.models.adapters``) with its base.

    ``dtype=None`` keeps the checkpoint's stored dtype ("auto"); ``compute_dtype``: the
    forward's under autocast (mixed precision; ``resolve_precision``). A tokenizer without a pad
    token gets its EOS token as pad: pad positions are always masked, and both are dropped
    by ``decode``, so reusing the id is harmless.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from srpo_agents.models.sources import is_adapter_folder, resolve_model

    name_or_path = resolve_model(str(name_or_path))  # a .gguf or known source: a folder
    if is_adapter_folder(name_or_path):  # a base and one LoRA adapter per role
        policy = _load_role_adapters(Path(name_or_path), device=device, dtype=dtype)
        policy.compute_dtype = compute_dtype
        return policy
    tokenizer = AutoTokenizer.from_pretrained(name_or_path)
    if tokenizer.pad_token is None:
        if tokenizer.eos_token is None:
            raise ValueError(f"tokenizer of {name_or_path!r} has neither a pad nor an EOS "
                             f"token")
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(
        name_or_path, dtype=dtype if dtype is not None else "auto")
    model.to(device)
    return Policy(model=model, tokenizer=tokenizer, name=str(name_or_path),
                  compute_dtype=compute_dtype)


def _load_role_adapters(path: Path, *, device: str = "cpu", dtype=None) -> Policy:
    """A policy from a folder written by ``adapters.save_role_adapters``: its base (by the
    manifest's name) with every role's adapter, frozen (for sampling; training attaches
    fresh adapters and restores a checkpoint's weights into them)."""
    from srpo_agents.models.sources import MANIFEST

    peft = require_peft()
    manifest = json.loads((path / MANIFEST).read_text())
    roles = manifest["roles"]
    plain = load_policy(manifest["base"], device=device, dtype=dtype)
    model = peft.PeftModel.from_pretrained(plain.model, str(path / roles[0]),
                                           adapter_name=roles[0])
    for role in roles[1:]:
        model.load_adapter(str(path / role), adapter_name=role)
    model.to(device)
    return Policy(model=model, tokenizer=plain.tokenizer, name=str(path),
                  adapter_roles=tuple(roles), base_name=manifest["base"])


def require_peft():
    try:
        import peft
    except ImportError as err:  # pragma: no cover - the [lora] extra is not installed
        raise ImportError("per_role_adapters='lora' needs PEFT: pip install 'srpo[lora]' "
                          "(or pip install peft)") from err
    return peft


class PretrainedSource:
    """A pretrained LLM: anything ``resolve_model`` finds, loaded by transformers."""

    name = "pretrained"
    options = None
    compact_prompts = False

    def prepare(self, config, run_dir: Path, log) -> tuple:
        device = resolve_device(config.device)
        return load_policy(config.model, device=device,
                           **precision_kwargs(config.dtype, device)), {}

    @staticmethod
    def rank_options(config) -> dict:
        """The options of a data-parallel rank other than 0 (whose --out is its own)."""
        return dict(config.model_options)
