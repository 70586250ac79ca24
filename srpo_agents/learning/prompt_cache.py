"""The prompts of a micro-batch run once, and their shared leading tokens once.

An update scores each row's response given its prompt. Rows repeat prompts (the G
rollouts of a task give its solver one prompt) and prompts repeat leading tokens (a
verifier's prompt is the same template and question for every rollout of a task, then
that rollout's solution; every prompt of a role starts with the same template). Running
each repeated piece once, and copying its KV cache out by index, is the same computation
as running every row on its own (gradients from every row flow back through the index
into the one pass), at a fraction of the cost: issue 61's "sharing the prompt prefix".

``prompt_cache`` runs the distinct prompts in at most two passes: the prefixes that groups
of prompts share, then each prompt's own tail on top of its group's prefix. Both are
left padded, so every prompt ends in the last column and its last logits are there;
positions count real tokens only, so the gaps of padding change nothing but the shapes.
"""

from __future__ import annotations

import torch

MIN_SHARED_PREFIX = 16
"""Fewest leading tokens distinct prompts must share to run them once: below that the
second pass costs more than it saves."""


def common_length(a, b) -> int:
    """How many leading tokens ``a`` and ``b`` share."""
    n = 0
    for x, y in zip(a, b, strict=False):  # the shorter one bounds it
        if x != y:
            break
        n += 1
    return n


def prefix_groups(prompts: list[tuple[int, ...]], roles: list[str] | None = None,
                  least: int = MIN_SHARED_PREFIX) -> tuple[list[int], list[int]]:
    """Distinct prompts grouped by the leading tokens they share: (each prompt's group,
    each group's shared length). In sorted order a prompt joins the group before it
    when it shares at least ``least`` tokens with that group's prefix (and the same
    role, where ``roles`` are given: a prefix runs under one role's adapter); the
    prefix shrinks to what every member shares and leaves each member at least its last
    token, so each prompt's last logits come from the second pass. A prompt alone is a
    group whose prefix is all but its last token."""
    roles = roles or [""] * len(prompts)
    order = sorted(range(len(prompts)), key=lambda i: (roles[i], prompts[i]))
    group_of, shared, heads = [0] * len(prompts), [], []
    for i in order:
        prompt = prompts[i]
        if heads and roles[heads[-1]] == roles[i]:
            n = min(common_length(prompts[heads[-1]][:shared[-1]], prompt), len(prompt) - 1)
            if n >= least:
                shared[-1] = n
                group_of[i] = len(shared) - 1
                continue
        heads.append(i)
        shared.append(len(prompt) - 1)
        group_of[i] = len(shared) - 1
    return group_of, shared


def shares_tokens(prompts: list[tuple[int, ...]], rows: int, groups: tuple[list, list]) -> bool:
    """Whether ``rows`` rows with these distinct ``prompts``, grouped as ``prefix_groups``
    ``groups`` them, repeat any tokens of their prompts (a prompt, or a shared prefix)."""
    return len(prompts) < rows or len(groups[1]) < len(prompts)


def left_padded(rows: list, pad: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids, mask) of ``rows`` left padded to the longest."""
    width = max(len(r) for r in rows)
    ids = torch.tensor([[pad] * (width - len(r)) + list(r) for r in rows], device=device)
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows], device=device)
    return ids, mask


def prompt_cache(model, prompts: list[tuple[int, ...]], pad: int, cache_kwarg: str,
                 rows_kwargs, groups: tuple[list[int], list[int]],
                 prompt_roles: list[str] | None = None):
    """Run the distinct ``prompts`` once each, and the prefixes that ``groups`` (from
    ``prefix_groups``) share once (module docstring). Returns (KV cache, one row per prompt; attention
    mask [P, width]; the logits after each prompt's last token [P, V]).
    ``rows_kwargs(roles)``: the model's per-row keyword arguments (role adapters), ``{}``
    for None."""
    from transformers import DynamicCache

    device = next(model.parameters()).device
    cache = DynamicCache(config=model.config)
    group_of, shared = groups
    if len(shared) == len(prompts):  # nothing shared: one pass of whole prompts
        ids, mask = left_padded(prompts, pad, device)
        out = model(input_ids=ids, attention_mask=mask,
                    position_ids=(mask.cumsum(-1) - 1).clamp(min=0), use_cache=True,
                    logits_to_keep=1, **{cache_kwarg: cache}, **rows_kwargs(prompt_roles))
        return cache, mask, out.logits[:, -1]
    heads = {}
    for i, group in enumerate(group_of):
        heads.setdefault(group, i)
    head_rows = [heads[g] for g in range(len(shared))]
    ids, head_mask = left_padded([prompts[i][:shared[g]] for g, i in enumerate(head_rows)],
                                 pad, device)
    model(input_ids=ids, attention_mask=head_mask,
          position_ids=(head_mask.cumsum(-1) - 1).clamp(min=0), use_cache=True,
          logits_to_keep=1, **{cache_kwarg: cache},
          **rows_kwargs(None if prompt_roles is None else [prompt_roles[i] for i in head_rows]))
    groups = torch.tensor(group_of, device=device)
    cache.batch_select_indices(groups)
    tails, tail_mask = left_padded([p[shared[g]:] for p, g in zip(prompts, group_of,
                                                                   strict=True)], pad, device)
    mask = torch.cat([head_mask[groups], tail_mask], dim=1)
    starts = torch.tensor([shared[g] for g in group_of], device=device).unsqueeze(1)
    out = model(input_ids=tails, attention_mask=mask,
                position_ids=starts + (tail_mask.cumsum(-1) - 1).clamp(min=0), use_cache=True,
                logits_to_keep=1, **{cache_kwarg: cache}, **rows_kwargs(prompt_roles))
    return cache, mask, out.logits[:, -1]
