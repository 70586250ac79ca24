"""What both generation backends share: how a row is sampled, and what comes back.

A row's next id is drawn from ``log_softmax(logits / temperature)`` in float32, and the
sampled id's entry is the recorded log-prob. With ``top_p < 1`` the id is drawn from the renormalized nucleus
but the recorded log-prob is still the full tempered softmax's, so the learner's ratio
at the first epoch is not exactly the behaviour ratio (the nucleus renormalization is
left out); the default ``top_p=1`` has no such gap. ``temperature=0`` is greedy: the
argmax, recorded with the log-prob of the untempered softmax (temperature 1).
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass

import torch

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


def sampling_groups(sampling: Sequence[Sampling] | None, n: int, default: Sampling
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
