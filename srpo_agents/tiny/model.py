"""A tiny offline policy for tests and benchmarks: a character-level tokenizer and a
randomly initialized Qwen2-style model of about 1M parameters.

Deliberate choices:
- **Byte-level characters, Qwen2's own tokenizer pipeline.** transformers 5 loads every
  ``qwen2`` checkpoint with ``Qwen2Tokenizer``, which rebuilds the pipeline (NFC, Qwen's
  split regex, byte-level mapping, BPE from vocab and merges) and ignores a custom
  pre-tokenizer in ``tokenizer.json``; a word-level character tokenizer would silently lose
  its spaces on reload. So the tokenizer is trained with exactly that pipeline and a
  vocabulary capped at the 256-symbol byte alphabet plus the specials: the trainer learns
  no merges, every byte is one token, and env text (ASCII) is one token per character.
  Because every byte has an id there are no unknown characters (a non-ASCII character is
  2-4 byte tokens) and no ``<|unk|>`` token is needed. ``texts`` are what the trainer
  reads; with the vocabulary capped they do not change it, which is what makes the
  tokenizer identical across builds and across the two ways transformers may load it.
- **ChatML-like template, EOS ends the answer.** ``<|im_start|>user\\n{content}<|im_end|>
  \\n<|im_start|>assistant\\n``; a response ends with ``<|endoftext|>``, the only EOS id.
- **Qwen2 architecture, tied embeddings**, so the tiny model runs through the same
  transformers code paths (RoPE, grouped attention, KV cache) as the real Qwen policies.
- **Deterministic.** Weights come from ``torch.manual_seed(seed)`` inside
  ``torch.random.fork_rng``, so building a policy never disturbs the caller's RNG.
- **Atomic save.** Model and tokenizer are written to a temporary folder beside
  ``out_dir`` and renamed into place; an existing ``out_dir`` is replaced (moved aside,
  then deleted), so a reader never sees a half-written folder.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path

import torch

from srpo_agents.models.policy import Policy, load_policy

PAD, EOS, IM_START, IM_END = "<|pad|>", "<|endoftext|>", "<|im_start|>", "<|im_end|>"
# Qwen2Tokenizer's split regex (transformers.models.qwen2.tokenization_qwen2); with no
# merges the split does not change the ids, only the NFC + byte mapping does.
_QWEN2_SPLIT = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"""
                r""" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""")
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def build_tiny_policy(texts: Iterable[str], out_dir: str | Path, *, hidden_size: int = 128,
                      num_layers: int = 4, num_heads: int = 4, max_positions: int = 1024,
                      seed: int = 0, vocab_size: int = 0) -> Policy:
    """Train a character tokenizer on ``texts``, build a tiny Qwen2 LM, save both to
    ``out_dir`` and return ``load_policy(out_dir)``.

    With the defaults the model has about 1.08M parameters: 4 layers x (4 x 128^2
    attention + 3 x 128 x 512 MLP) plus the tied 260 x 128 embedding.

    ``vocab_size`` above the 260 byte and special tokens adds BPE merges learned from
    the runs of letters in ``texts``, up to that many tokens: prompts get shorter and a
    word a token or a few. Merges never join a letter to a space or a sign, so a name
    is the same tokens after a space (in a question) and after a tag's ``>`` (in a
    query): copying it stays copying tokens.
    """
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=_train_char_tokenizer(texts, vocab_size), eos_token=EOS, pad_token=PAD,
        extra_special_tokens=[IM_START, IM_END], chat_template=CHAT_TEMPLATE,
        clean_up_tokenization_spaces=False)
    config = Qwen2Config(
        vocab_size=len(tokenizer), hidden_size=hidden_size, intermediate_size=4 * hidden_size,
        num_hidden_layers=num_layers, num_attention_heads=num_heads,
        num_key_value_heads=num_heads, max_position_embeddings=max_positions,
        tie_word_embeddings=True, bos_token_id=None, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.bos_token_id = None

    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    try:
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        _replace_dir(staging, out_dir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return load_policy(str(out_dir))


def _train_char_tokenizer(texts: Iterable[str], vocab_size: int = 0):
    """A ``tokenizers.Tokenizer`` with Qwen2's pipeline whose tokens are single bytes, or
    with ``vocab_size`` > 260, bytes plus merges of letters learned from ``texts``."""
    import re

    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.normalizer = normalizers.NFC()
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(_QWEN2_SPLIT), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tokenizer.decoder = decoders.ByteLevel()
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    specials = [PAD, EOS, IM_START, IM_END]
    base = len(specials) + len(alphabet)
    if vocab_size and vocab_size <= base:
        raise ValueError(f"vocab_size={vocab_size!r}: expected 0 (bytes only) or more than "
                         f"the {base} byte and special tokens")
    trainer = trainers.BpeTrainer(vocab_size=max(vocab_size, base), special_tokens=specials,
                                  initial_alphabet=alphabet, show_progress=False)
    if vocab_size:
        # Trained on the letter runs alone, the merges never cross into a space or a sign.
        texts = (word for text in texts for word in re.findall(r"[^\W\d_]+", text))
    tokenizer.train_from_iterator(texts, trainer)
    return tokenizer


def _replace_dir(new: Path, target: Path) -> None:
    """Rename ``new`` to ``target``; an existing ``target`` is moved aside first so the
    swap is two renames and never leaves a partial folder at ``target``."""
    if not target.exists():
        os.replace(new, target)
        return
    old = Path(tempfile.mkdtemp(prefix=f".{target.name}.old.", dir=target.parent))
    os.replace(target, old / "replaced")
    try:
        os.replace(new, target)
    finally:
        shutil.rmtree(old, ignore_errors=True)
