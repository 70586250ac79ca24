"""The update step: log-probs of sampled responses under the current policy, the
registered loss on event-atomic mini-batches, optional KL to a frozen reference, gradient
clipping and AdamW, for several epochs over one batch of rollouts.

Deliberate choices:
- log-probs are ``log_softmax(logits / temperature)`` at the sampled ids, the same
  quantity the rollout engine recorded, scored with the model in eval mode (dropout
  off) as the sampler ran (with ``gradient_checkpointing``: train mode, every dropout
  at 0), so at the first epoch the ratio is exactly 1 (up to float
  noise) even for a model with dropout; ``first_epoch_max_abs_log_ratio`` is the largest
  deviation over the first mini-batch, scored before the first optimizer step;
- one optimizer step per mini-batch; a mini-batch holds whole episodes
  (``minibatch_episodes``; so every algorithm takes the same steps on the same episodes,
  whatever its unit) and is processed in micro-batches of whole units whose losses are
  weighted to sum to the mini-batch loss (units for set losses, tokens for token-mean
  losses), so memory is bounded without changing the objective;
- losses that sum tokens within a unit (set losses, MAGRPO's REINFORCE) are divided by
  the constant ``token_budget`` (the run's ``max_new_tokens``; Dr. GRPO's normalizer), so
  their gradients sit at a token-mean loss's scale and one ``max_grad_norm`` clips every
  algorithm alike; a positive constant, it changes no ratio, clip or direction;
- the KL term is k3 = exp(ref - logp) - (ref - logp) - 1 with weight ``beta``, at the
  loss's own level (``objective.reference_kl``: each unit's token sum, mean over units,
  under the same ``token_budget``, for unit losses; the token mean for token-mean
  losses), so the same micro-batch weights make it exact too; the reference scores each
  row once per update (``_reference_logprobs``), not once per micro-batch of every epoch;
- ``grad_norm`` is the mean pre-clip gradient norm of the update's optimizer steps and
  ``grad_clipped`` the share of them whose norm exceeded ``max_grad_norm``;
- every reported figure is the mean over the update's mini-batches of that mini-batch's
  figure, computed as if it were one batch: ``loss``, ``kl``, ``clip_fraction`` and
  ``ratio_mean`` at the loss's level (units or tokens), ``approx_kl`` over tokens,
  ``max_abs_log_ratio`` the largest over the whole update; none depends on
  ``microbatch_rows`` (nor, under data parallelism, on the number of ranks);
- diagnostics over response tokens: ``entropy`` is the policy's mean token entropy on
  the sampled responses during the first epoch (before the first optimizer step it is
  the behaviour policy's own), ``approx_kl`` the k3 estimate of KL(behaviour ||
  current), (r - 1) - log r with r = exp(logp - logp_old) (0 while on-policy; it grows
  with each step taken);
- off-policy data (``max_staleness`` >= 1: sampled some versions ago): with ``proximal``
  "recompute" the batch is scored once under the update's starting weights (pi_prox, no
  gradient) before the first optimizer step; the loss's ratio is then pi_theta / pi_prox
  and each unit (or token) carries the detached behaviour weight pi_prox / mu
  (``objective.behaviour_weight``). ``mismatch_kl`` is the k3 estimate of KL(mu ||
  pi_prox) over response tokens, ``proximal_seconds`` the extra pass's time. With
  ``max_staleness`` 0 nothing of this runs, and the update is the synchronous one;
- fresh data from a sampler whose numerics are not the learner's (``pi_old`` "learner",
  or "auto" with 16-bit compute; ``TrainConfig.learner`` decides "auto" for vLLM, rollout
  workers and processes): the same pass and weight at staleness 0. The pass runs in the
  first epoch's own micro-batches (every epoch's mini-batches are drawn before it, the
  same draws as one at a time), so the first step's ratio is exactly 1. The first
  optimizer step's own rows skip the pass: the weights it starts from are pi_prox, so
  their pi_prox is the step's own log-probs, detached (kept for later epochs); with one
  optimizer step a batch there is no extra pass at all (not under FSDP, whose path
  scores every row up front);
- mixed precision (``Policy.compute_dtype``): the forward passes run under autocast, the
  weights, gradients and AdamW state stay in the weights' float32; ``update_to_weight``
  is ||theta_after - theta_before|| / ||theta_before|| over the trainable weights for the
  whole update (a copy of them is held while it runs).
"""

from __future__ import annotations

import copy
import random
import sys
import time

import numpy as np
import torch

from srpo_agents import faults
from srpo_agents.config import LearnerConfig  # noqa: F401 (Learner's settings; imported from here too)
from srpo_agents.learning.events import ActionUnit, UnitBatch
from srpo_agents.learning.objective import (
    POLICY_LOSSES,
    Algorithm,
    LossConfig,
    LossInputs,
    reference_kl,
)
from srpo_agents.learning.prompt_cache import (
    MIN_SHARED_PREFIX,
    prefix_groups,
    prompt_cache,
    shares_tokens,
)
from srpo_agents.models.policy import Policy
from srpo_agents.models.sharding import (
    full,
    full_weights,
    init_distributed,
    local,
    reshard_all,
    same_as_rank0,
    shard,
)
from srpo_agents.rollout.engine import Sample
from srpo_agents.rollout.sampling import cache_kwarg

LOGPROB_ROWS = 4
"""Rows per chunk of ``token_logprobs``: the full-vocabulary temporaries of one chunk are
what it holds at a time."""


def token_logprobs(logits: torch.Tensor, targets: torch.Tensor,
                   temperature: float | torch.Tensor, with_entropy: bool = False
                   ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """log softmax(logits / temperature) at ``targets`` ([R, T]), and the tempered
    distribution's entropy (no gradient) when asked, without a full [R, T, V]
    log-softmax: z[target] - logsumexp(z), a few rows at a time. With a real vocabulary
    (SmolLM2: 49,152; Qwen: 151,936) the log-softmax, its exponent and the tempered copy
    were each as large as the logits; here autograd keeps one tempered copy (none at
    temperature 1, where z is a view of the logits) and the rest lives per chunk."""
    logps, entropies = [], []
    for start in range(0, logits.shape[0], LOGPROB_ROWS):
        rows = slice(start, start + LOGPROB_ROWS)
        z = logits[rows].float()
        t = temperature[rows] if isinstance(temperature, torch.Tensor) else temperature
        if isinstance(t, torch.Tensor) or t != 1.0:
            z = z / t
        lse = torch.logsumexp(z, dim=-1)
        logps.append(z.gather(-1, targets[rows].unsqueeze(-1)).squeeze(-1) - lse)
        if with_entropy:
            with torch.no_grad():
                p = torch.exp(z - lse.unsqueeze(-1))
                entropies.append(lse - (p * z).sum(dim=-1))
    return torch.cat(logps), torch.cat(entropies) if with_entropy else None


def _pad(rows: list[list], value, dtype) -> torch.Tensor:
    width = max(len(r) for r in rows)
    return torch.tensor([r + [value] * (width - len(r)) for r in rows], dtype=dtype)


def by_response(unit) -> tuple:
    """A micro-batch order for shared prefixes (``prompt_cache``): rows of one role share
    its template whatever their task, so rows of similar response length go together and
    share their padding (on one real team batch the response passes computed 5,312
    positions for 4,431 tokens, against 8,192 when sorted by prompt tokens:
    ``benchmarks/results/update_forms_order.md``)."""
    return (unit.members[0].role, max(len(m.response_ids) for m in unit.members),
            unit.members[0].prompt_ids)


def by_prompt(unit) -> tuple:
    """Issue 50's micro-batch order: units with one prompt side by side, so the rows that
    share it share one micro-batch and the prompt runs once (``response_logprobs``)."""
    first = unit.members[0].prompt_ids
    return (len(first), first, max(len(m.prompt_ids) + len(m.response_ids)
                                   for m in unit.members))


class Learner:
    def __init__(self, policy: Policy, algorithm: Algorithm, config: LearnerConfig,
                 seed: int = 0):
        self.policy = policy
        self.algorithm = algorithm
        self.config = config
        self.loss_fn = POLICY_LOSSES[algorithm.loss]
        self.normalizer = self.loss_fn.averages_over
        # losses that sum tokens within a unit, divided by the generation budget
        self.loss_scale = (1.0 / max(config.token_budget, 1) if self.normalizer == "units"
                           else 1.0)
        self.loss_config = LossConfig(config.eps_low, config.eps_high, algorithm.kappa,
                                      config.behaviour_correction, config.behaviour_cap)
        self._proximal: dict[int, list[float]] = {}  # id(sample) -> pi_prox log-probs
        self._own_old: set[int] = set()  # micro-batches whose pi_prox is their own logp
        self._reference_cache: dict[int, list[float]] = {}  # id(sample) -> reference
        # pi_old from the learner: for off-policy data (asynchronous SRPO) as ``proximal``
        # says; for fresh data when the sampler's numerics are not the learner's
        # (``pi_old``; "auto" here knows only the policy: 16-bit compute is never exact)
        if config.max_staleness:
            self.recompute_old = config.proximal == "recompute"
        else:
            self.recompute_old = config.pi_old == "learner" or (
                config.pi_old == "auto" and policy.compute_dtype is not None)
        self.reference = None
        if config.beta > 0 and not policy.adapter_roles:
            # the starting weights, copied before the policy is sharded; under data
            # parallelism sharded too (below), and gathered whole once to score
            self.reference = copy.deepcopy(policy.model).eval()
            self.reference.requires_grad_(False)
        # With role adapters the reference is the frozen base: the adapters switched off.
        self.base_reference = config.beta > 0 and bool(policy.adapter_roles)
        self.rng = random.Random(seed)
        # what micro-batches are ordered by (None: by_response with shared prefixes,
        # else by_prompt); a benchmark sets it to weigh one order against the other
        self.microbatch_order = None
        if config.gradient_checkpointing:
            # transformers recomputes a layer in the backward only in train mode, so the
            # learner scores in train mode, with dropout switched off for good
            disable_dropout(policy.model)
            checkpointing(policy.model)
            if getattr(policy.model, "enable_input_require_grads", None) and policy.adapter_roles:
                policy.model.enable_input_require_grads()  # a frozen embedding under LoRA
        # data parallelism is FSDP2, in place: the rollout engine's model is this one
        self.sharded = config.data_parallel
        if self.sharded:
            if policy.adapter_roles:  # drawn, not loaded: rank 0's adapters everywhere
                same_as_rank0(policy.model)
            shard(policy.model, config.sharding, policy.compute_dtype)
            if self.reference is not None:  # 4N / ranks bytes a rank instead of 4N
                shard(self.reference, config.sharding, policy.compute_dtype)
        params = [p for p in policy.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(params, lr=config.lr,
                                           weight_decay=config.weight_decay)

    @property
    def device(self) -> torch.device:
        return next(self.policy.model.parameters()).device

    def response_logprobs(self, model, samples: list[Sample], with_entropy: bool = False,
                          plain: bool = False
                          ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Log-probs of each sample's response ids given its prompt.

        Returns (logp [R, T], mask [R, T], entropy [R, T] or None) with T the longest
        response; right padding. ``entropy`` (no gradient) is the tempered softmax's
        entropy at each response position.

        Rows that share a prompt (the K members of a set, the G rollouts of a task) run
        it once, and prompts that share leading tokens (a verifier's template and
        question, before each rollout's solution) run those once (``prompt_cache``):
        their KV cache is copied out to every row that shares it (an index, so gradients
        from every row flow back into the one pass), and the responses then run on top of
        it. The result is the same computation as running each row's prompt + response,
        at a fraction of the cost when prompts repeat.

        With role adapters (``Policy.adapter_roles``) each row runs under its sample's
        role's adapter, and rows share a prompt pass only within a role; ``plain``: the
        rows run without adapters (the reference of a KL penalty: the base)."""
        adapters = bool(self.policy.adapter_roles) and not plain
        distinct: dict[tuple, int] = {}
        keys = [(tuple(s.prompt_ids), s.role) if adapters else (tuple(s.prompt_ids),)
                for s in samples]
        source = [distinct.setdefault(key, len(distinct)) for key in keys]
        roles = [s.role for s in samples] if adapters else None
        prompts = [key[0] for key in distinct]
        prompt_roles = [key[1] for key in distinct] if adapters else None
        with self.policy.autocast():  # mixed precision: float32 weights, 16-bit matmuls
            # a checkpointed model keeps no KV cache in train mode: each row its prompt.
            # Under FSDP one pass a micro-batch, each row its prompt: every rank then
            # runs the same collectives, and no backward reaches a layer through the
            # KV cache of a pass whose gathered weights FSDP has already freed (the
            # shared-prompt pair crashed a 2-rank SmolLM2 update with SIGSEGV).
            if (self.config.gradient_checkpointing or self.sharded
                    or not shares_tokens(prompts, len(samples), groups := prefix_groups(
                        prompts, prompt_roles, self._least_prefix))):
                logits = self._full_logits(model, samples, roles)
            else:
                logits = self._shared_prompt_logits(model, prompts, source, samples, groups,
                                                    prompt_roles, roles)
        targets = _pad([s.response_ids for s in samples], self.policy.pad_token_id,
                       torch.long).to(self.device)
        mask = _pad([[1.0] * len(s.response_ids) for s in samples], 0.0,
                    torch.float32).to(self.device)
        logp, entropy = token_logprobs(logits, targets, self._temperatures(samples),
                                       with_entropy)
        return logp * mask, mask, None if entropy is None else entropy * mask

    def _temperatures(self, samples: list[Sample]) -> float | torch.Tensor:
        """What each row's logits are divided by: the temperature it was sampled at
        (per role with ``role_sampling``), else the learner's. One number when the rows
        share it, so the usual run computes exactly as before."""
        temperatures = [s.temperature or self.config.temperature for s in samples]
        if all(t == self.config.temperature for t in temperatures):
            return self.config.temperature
        return torch.tensor(temperatures, device=self.device).view(-1, 1, 1)

    def _rows(self, roles: list[str] | None) -> dict:
        return self.policy.row_kwargs(roles) if roles is not None else {}

    def _full_logits(self, model, samples: list[Sample], roles: list[str] | None = None
                     ) -> torch.Tensor:
        """[R, T, V] logits predicting each response token, one pass per row.

        Only the columns from the shortest prompt's end on get logits
        (``logits_to_keep``): a real model's vocabulary makes the prompt columns'
        logits the largest tensor of the pass (SmolLM2: 49,152 floats a token), and
        they are never used."""
        seqs = [s.prompt_ids + s.response_ids for s in samples]
        input_ids = _pad(seqs, self.policy.pad_token_id, torch.long).to(self.device)
        attention = _pad([[1] * len(s) for s in seqs], 0, torch.long).to(self.device)
        # position p predicts token p + 1: the response starts at len(prompt)
        starts = torch.tensor([len(s.prompt_ids) - 1 for s in samples], device=self.device)
        keep = input_ids.shape[1] - int(starts.min())
        logits = model(input_ids=input_ids, attention_mask=attention, logits_to_keep=keep,
                       use_cache=False, **self._rows(roles)).logits         # [R, keep, V]
        width = max(len(s.response_ids) for s in samples)
        offsets = torch.arange(width, device=self.device)
        positions = (starts.unsqueeze(1) - (input_ids.shape[1] - keep) + offsets).clamp(
            max=keep - 1)
        return logits.gather(1, positions.unsqueeze(-1).expand(-1, -1, logits.shape[-1]))

    def _shared_prompt_logits(self, model, prompts: list[tuple[int, ...]], source: list[int],
                              samples: list[Sample], groups: tuple[list[int], list[int]],
                              prompt_roles: list[str] | None = None,
                              roles: list[str] | None = None) -> torch.Tensor:
        """[R, T, V] logits predicting each response token, each distinct prompt run once
        and the leading tokens prompts share once (``prompt_cache``); the responses then
        continue each row's prompt from its KV cache."""
        pad = self.policy.pad_token_id
        cache, prompt_mask, last = prompt_cache(model, prompts, pad, cache_kwarg(model),
                                                self._rows, groups, prompt_roles)
        rows = torch.tensor(source, device=self.device)
        cache.batch_select_indices(rows)
        first = last[rows]                                                    # [R, V]
        responses = [s.response_ids for s in samples]
        response_ids = _pad(responses, pad, torch.long).to(self.device)       # [R, T]
        response_mask = _pad([[1] * len(r) for r in responses], 0, torch.long).to(self.device)
        attention = torch.cat([prompt_mask[rows], response_mask], dim=1)
        start = torch.tensor([len(prompts[i]) for i in source], device=self.device)
        response_positions = start.unsqueeze(1) + torch.arange(response_ids.shape[1],
                                                               device=self.device)
        rest = model(input_ids=response_ids[:, :-1], attention_mask=attention[:, :-1],
                     position_ids=response_positions[:, :-1], use_cache=True,
                     **{cache_kwarg(model): cache}, **self._rows(roles)
                     ).logits if response_ids.shape[1] > 1 else None
        return first.unsqueeze(1) if rest is None else torch.cat([first.unsqueeze(1), rest], 1)

    @property
    def _least_prefix(self) -> int:
        """The fewest shared leading tokens that distinct prompts run once; without
        ``share_prompt_prefix`` only whole repeated prompts are shared."""
        return MIN_SHARED_PREFIX if self.config.share_prompt_prefix else sys.maxsize

    @property
    def skips_zero(self) -> bool:
        return self.config.skip_zero_advantage and not (
            self.reference is not None or self.base_reference)

    def _carried(self, batch: UnitBatch, rank: int, world: int) -> list[int]:
        """This rank's share of ``batch`` (every ``world``-th unit from ``rank``), less
        the units of advantage 0 with ``skip_zero_advantage``: their loss terms and
        gradients are exactly 0 (every loss is linear in the advantage; no KL term)."""
        share = range(rank, len(batch), world)
        if not self.skips_zero:
            return list(share)
        return [i for i in share if batch.advantages[i] != 0.0]

    def _figure_totals(self, mini: UnitBatch) -> tuple[int, int]:
        """(units, response tokens) of ``mini`` that its figures average over: every
        unit, or under ``skip_zero_advantage`` those carried (at least 1 each)."""
        if not self.skips_zero:
            return len(mini), max(mini.response_tokens, 1)
        kept = mini.subset([i for i in range(len(mini)) if mini.advantages[i] != 0.0])
        return max(len(kept), 1), max(kept.response_tokens, 1)

    def _pad_plan(self, plan: list, batch: UnitBatch) -> set[int]:
        """Under FSDP every forward and backward is a collective, so every rank runs as
        many micro-batches of each mini-batch as the busiest one: a rank with fewer (an
        uneven split, or units skipped for advantage 0) runs one unit of the batch
        again, at weight 0. Returns the padding micro-batches' ids."""
        import torch.distributed as dist

        counts = torch.tensor([len(micros) for minis in plan for _, micros in minis])
        dist.all_reduce(counts, op=dist.ReduceOp.MAX)
        padding, most = set(), iter(counts.tolist())
        carried = self._carried(batch, 0, 1)  # some rank has a unit: one of these
        for minis in plan:
            for _, micros in minis:
                for _ in range(next(most) - len(micros)):
                    micros.append(batch.subset(carried[:1]))
                    padding.add(id(micros[-1]))
        return padding

    def _microbatches(self, batch: UnitBatch) -> list[UnitBatch]:
        """Whole units, at most ``microbatch_rows`` rows each (a larger unit goes alone),
        in ``microbatch_order``'s order, so that a micro-batch's rows share padding or
        prompts."""
        order = self.microbatch_order or (by_response if self.config.share_prompt_prefix
                                          else by_prompt)
        groups, current, rows = [], [], 0
        for i in sorted(range(len(batch)), key=lambda i: order(batch.units[i])):
            size = batch.units[i].size
            if current and rows + size > self.config.microbatch_rows:
                groups.append(current)
                current, rows = [], 0
            current.append(i)
            rows += size
        return [batch.subset(index) for index in groups + ([current] if current else [])]

    def _rows_without_grad(self, samples: list[Sample], model=None, plain: bool = False
                           ) -> list[list[float]]:
        """Each sample's response log-probs under ``model`` (default: the policy), no
        gradient, one list per sample."""
        with torch.no_grad():
            logp, _, _ = self.response_logprobs(model or self.policy.model, samples,
                                                plain=plain)
        return [row[:len(s.response_ids)] for row, s in zip(logp.tolist(), samples,
                                                            strict=True)]

    def _score_proximal(self, micros: list[UnitBatch]) -> None:
        """pi_prox (pi_old): every sample's log-probs under the weights the update starts
        from, without gradients, in ``micros``: the first epoch's own micro-batches, so
        that the same rows in the same shapes give the first optimizer step a ratio of
        exactly 1."""
        self._proximal = {}
        for micro in micros:
            samples = micro.samples
            self._proximal.update(zip(map(id, samples), self._rows_without_grad(samples),
                                      strict=True))

    def _reference_logprobs(self, samples: list[Sample]) -> torch.Tensor:
        """[R, T] log-probs of the frozen reference (the KL term's), each row scored once
        per update: the first micro-batch that holds it scores it, later epochs reuse
        it (the reference does not change within an update)."""
        if any(id(s) not in self._reference_cache for s in samples):
            if self.base_reference:  # the base: the role adapters switched off
                with self.policy.model.disable_adapter():
                    rows = self._rows_without_grad(samples, plain=True)
            else:
                rows = self._rows_without_grad(samples, self.reference)
            for sample, row in zip(samples, rows, strict=True):
                self._reference_cache.setdefault(id(sample), row)
        return _pad([self._reference_cache[id(s)] for s in samples], 0.0,
                    torch.float32).to(self.device)

    def _loss(self, micro: UnitBatch, with_entropy: bool):
        """The micro-batch's loss (KL term included) and its figures, each a mean at the
        level named in ``update``; plus its response tokens."""
        samples = micro.samples
        logp, mask, entropy = self.response_logprobs(self.policy.model, samples, with_entropy)
        logp_old = _pad([s.logprobs for s in samples], 0.0, torch.float32).to(self.device)
        behaviour = None
        if id(micro) in self._own_old:  # the first step's rows: pi_prox is these weights
            for sample, row in zip(samples, logp.detach().tolist(), strict=True):
                self._proximal[id(sample)] = row[:len(sample.response_ids)]
        if self._proximal:  # pi_prox scored: the ratio is to it, mu enters as a weight
            behaviour = logp_old * mask
            logp_old = _pad([self._proximal[id(s)] for s in samples], 0.0,
                            torch.float32).to(self.device)
        unit_index = torch.tensor(micro.unit_index, device=self.device)
        inputs = LossInputs(logp=logp, logp_old=logp_old * mask, mask=mask,
                            unit_index=unit_index,
                            unit_size=torch.tensor(micro.unit_sizes, device=self.device),
                            # float32, as the losses were written for
                            advantages=torch.tensor(micro.advantages.tolist()).to(self.device),
                            logp_behaviour=behaviour)
        loss, figures = self.loss_fn(inputs, self.loss_config)
        if behaviour is not None:
            log_r = inputs.logp_old - behaviour  # log pi_prox / mu, 0 on padding
            figures["mismatch_kl"] = float(((log_r.exp() - 1 - log_r) * mask).sum()
                                           / mask.sum().clamp(min=1))
        tokens = float(mask.sum())
        log_ratio = (logp.detach() - logp_old) * mask
        figures["max_abs_log_ratio"] = float(log_ratio.abs().max())
        figures["approx_kl"] = float(((log_ratio.exp() - 1 - log_ratio) * mask).sum()
                                     / max(tokens, 1.0))
        if entropy is not None:
            figures["entropy"] = float(entropy.sum() / max(tokens, 1.0))
        if self.reference is not None or self.base_reference:
            ref = self._reference_logprobs(samples) * mask
            kl = reference_kl(logp, ref, mask, unit_index, len(micro), self.normalizer)
            loss = loss + self.config.beta * kl
            figures["kl"] = float(kl.detach()) * self.loss_scale
        loss = loss * self.loss_scale  # 1 for token means; 1 / token_budget for token sums
        figures["loss"] = float(loss.detach())
        return loss, figures, tokens

    def update(self, units: list[ActionUnit], advantages: np.ndarray) -> dict[str, float]:
        """Several epochs of clipped updates on ``units`` with one advantage per unit.

        The model is scored in eval mode and put back in the mode it came in. Eval mode
        switches dropout off and nothing else: gradients flow as in train mode. The
        behaviour log-probs were recorded with dropout off (the sampler runs in eval
        mode), so scoring with it on would make the first-epoch ratio a dropout sample
        instead of 1, and clip updates that never happened; on-policy RL trainers (verl,
        TRL's GRPO) score without dropout for the same reason. With
        ``gradient_checkpointing`` it is scored in train mode (transformers recomputes
        layers only there) with every dropout set to 0 (``disable_dropout``): the same
        computation."""
        if not units:
            return {"updates": 0}
        model = self.policy.model
        was_training = model.training
        # train mode only where checkpointing needs it, and then without dropout
        model.train(self.config.gradient_checkpointing)
        try:
            return self._update(units, advantages)
        finally:
            self._proximal, self._reference_cache, self._own_old = {}, {}, set()
            model.train(was_training)

    def _update(self, units: list[ActionUnit], advantages: np.ndarray) -> dict[str, float]:
        batch = UnitBatch(units, advantages)
        model = self.policy.model
        size = self.config.minibatch_episodes or batch.episodes
        rank, world = _rank_and_world(self.config.data_parallel)
        # every epoch's mini-batches and this rank's micro-batches, drawn up front (the
        # same draws as one epoch at a time), so pi_old can be scored on epoch 0's own
        plan = [[(mini, self._microbatches(mini.subset(self._carried(mini, rank, world))))
                 for mini in batch.minibatches(size, self.rng, self.config.minibatch_by)]
                for _ in range(self.config.epochs)]
        padding = self._pad_plan(plan, batch) if self.sharded else set()
        proximal_seconds = None
        # the first optimizer step's rows: their pi_prox is their own detached log-probs
        own = plan[0][0][1] if plan[0] and self.recompute_old and not self.sharded else []
        self._own_old = {id(micro) for micro in own}
        if self.recompute_old:
            tick = time.monotonic()
            first = [micro for _, micros in plan[0] for micro in micros
                     if id(micro) not in self._own_old]
            # rows this rank meets only in later epochs (other ranks' share of epoch 0)
            scored = {id(m) for micro in first + own for m in micro.samples}
            rest = [i for i in self._carried(batch, 0, 1)
                    if any(id(m) not in scored for m in batch.units[i].members)]
            with full_weights(model):
                self._score_proximal(first + (self._microbatches(batch.subset(rest))
                                              if rest else []))
            proximal_seconds = time.monotonic() - tick
        if self.sharded and (self.reference is not None or self.base_reference):
            scorer = self.reference if self.reference is not None else model
            with full_weights(scorer):  # every row this rank scores, before any collective
                for minis in plan:
                    for _, micros in minis:
                        for micro in micros:
                            self._reference_logprobs(micro.samples)
        grad_norms = []
        if self.sharded:  # the sharded parameters, not gathered ones FSDP frees later
            reshard_all(model)
        trainable = [p for p in model.parameters() if p.requires_grad]
        start = [local(p.detach()).clone() for p in trainable]  # for update_to_weight
        # Each figure summed with its share of its mini-batch (at its own level, over
        # every rank), so a mini-batch's sum is its one-batch figure; maxima apart.
        # Every rank holds the same keys (a rank may run no micro-batch of a mini-batch).
        sums = dict.fromkeys(["loss", "approx_kl", "mismatch_kl", "clip_fraction",
                              "ratio_mean", "entropy_sum", "entropy_tokens"]
                             + (["kl"] if self.reference is not None or self.base_reference
                                else []), 0.0)
        maxima = {"max_abs_log_ratio": 0.0, "first_epoch_max_abs_log_ratio": 0.0}
        clip_by_update = []  # each optimizer step's own clip fraction, in order
        for epoch, minibatches in enumerate(plan):
            for index, (mini, micros) in enumerate(minibatches):
                self.optimizer.zero_grad(set_to_none=True)
                clipped_before = sums["clip_fraction"]
                total_units = len(mini)
                total_tokens = max(mini.response_tokens, 1)
                # Figures (ratio, clip, KL) average over the units that ran: skipped
                # units of advantage 0 weigh in the loss's normalisation, not in them.
                seen_units, seen_tokens = self._figure_totals(mini)
                for n, micro in enumerate(micros):
                    if self.sharded:  # gradients reduced once, after the last micro-batch
                        model.set_requires_gradient_sync(n == len(micros) - 1)
                    loss, figures, tokens = self._loss(micro, with_entropy=epoch == 0)
                    if id(micro) in padding:  # a collective's partner: no gradient, no figure
                        (loss * 0.0).backward()
                        continue
                    weight = (len(micro) / total_units if self.normalizer == "units"
                              else tokens / total_tokens)
                    (loss * weight).backward()
                    token_share = tokens / seen_tokens
                    share = (len(micro) / seen_units if self.normalizer == "units"
                             else token_share)
                    deviation = figures.pop("max_abs_log_ratio")
                    maxima["max_abs_log_ratio"] = max(maxima["max_abs_log_ratio"], deviation)
                    if epoch == 0 and index == 0:  # before the first optimizer step
                        maxima["first_epoch_max_abs_log_ratio"] = max(
                            maxima["first_epoch_max_abs_log_ratio"], deviation)
                    if "entropy" in figures:
                        sums["entropy_sum"] += figures.pop("entropy") * tokens
                        sums["entropy_tokens"] += tokens
                    sums["approx_kl"] += figures.pop("approx_kl") * token_share
                    # over tokens, as approx_kl; 0 where pi_old is the sampler's own
                    sums["mismatch_kl"] += figures.pop("mismatch_kl", 0.0) * token_share
                    for key, value in figures.items():  # the loss's own terms at its weight
                        sums[key] = sums.get(key, 0.0) + value * (
                            weight if key in ("loss", "kl") else share)
                clip_by_update.append(sums["clip_fraction"] - clipped_before)
                if self.skips_zero:  # units left out: the step still sees every gradient
                    for p in trainable:
                        if p.grad is None:
                            p.grad = torch.zeros_like(p)
                norm = torch.nn.utils.clip_grad_norm_(model.parameters(),
                                                      self.config.max_grad_norm)
                grad_norms.append(float(full(norm)))
                faults.kill_point("update")  # fault-injection tests: a kill mid-update
                self.optimizer.step()
        if world > 1:
            sums, maxima = _combine_figures(sums, maxima)
        ratio = update_to_weight([local(p.detach()) for p in trainable], start,
                                 self.sharded and self.config.sharding == "full_shard")
        entropy = sums.pop("entropy_sum") / max(sums.pop("entropy_tokens"), 1.0)
        out = {k: v / len(grad_norms) for k, v in sums.items()}
        norms = np.array(grad_norms)
        out.update(maxima, updates=len(grad_norms), grad_norm=float(norms.mean()),
                   grad_norm_max=float(norms.max()),
                   grad_clipped=float((norms > self.config.max_grad_norm).mean()),
                   update_to_weight=ratio,
                   grad_norm_cv=float(norms.std() / norms.mean()) if norms.mean() > 0 else 0.0,
                   entropy=entropy)
        if not self._proximal:  # pi_old is the sampler's: the weight is 1 everywhere
            out.update(NO_BEHAVIOUR_WEIGHT)
        if world == 1:  # a rank's own share is not the mini-batch's figure
            out["clip_fraction_by_update"] = clip_by_update
        # every path logs the same keys (a run's rows and trackers keep one schema)
        out["proximal_seconds"] = proximal_seconds or 0.0
        return out


NO_BEHAVIOUR_WEIGHT = {"behaviour_weight_mean": 1.0, "behaviour_truncated": 0.0,
                       "behaviour_masked": 0.0}
"""The behaviour weight's figures when pi_old is the sampler's own log-probs."""


def checkpointing(model: torch.nn.Module) -> None:
    """Switch on transformers' activation checkpointing of every decoder layer, with
    torch's non-reentrant checkpoint (it needs no input that requires a gradient), by
    the name this transformers has (5.2x renamed ``gradient_checkpointing_enable``)."""
    enable = getattr(model, "activation_checkpointing_enable", None)
    if enable is not None:
        enable(activation_checkpointing_kwargs={"use_reentrant": False})
    else:
        model.gradient_checkpointing_enable(
            gradient_checkpointing_kwargs={"use_reentrant": False})


def disable_dropout(model: torch.nn.Module) -> None:
    """Every dropout of ``model`` to 0: ``nn.Dropout`` modules and the float rates that
    attention modules apply themselves in train mode (transformers' ``attention_dropout``).
    Train mode is then eval mode's computation, which the behaviour log-probs were."""
    for module in model.modules():
        if isinstance(module, torch.nn.modules.dropout._DropoutNd):
            module.p = 0.0
        for name, value in vars(module).items():
            if "dropout" in name and isinstance(value, float):
                setattr(module, name, 0.0)


def update_to_weight(parameters: list[torch.Tensor], start: list[torch.Tensor],
                     shards: bool = False) -> float:
    """||theta - theta_start|| / ||theta_start|| over ``parameters``, summed in float64:
    how far an update moved the weights, relative to their size. Near 1e-5 an lr 1e-5 AdamW
    step took; near 0 the step rounded away (16-bit weights). ``shards``: each rank holds
    its piece of every weight (FSDP's full shard), so the sums add up over the ranks."""
    if not start:
        return 0.0
    # summed where the weights live, read once (not one host sync per parameter)
    moved = torch.stack([(p.detach().double() - s.double()).pow(2).sum()
                         for p, s in zip(parameters, start, strict=True)]).sum()
    size = torch.stack([s.double().pow(2).sum() for s in start]).sum()
    if shards:
        import torch.distributed as dist

        sums = torch.stack([moved, size])
        dist.all_reduce(sums)
        moved, size = sums[0], sums[1]
    return float((moved / size).sqrt()) if float(size) > 0 else 0.0


def _rank_and_world(data_parallel: bool) -> tuple[int, int]:
    if not data_parallel:
        return 0, 1
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError("data_parallel=True needs torch.distributed initialized (run under "
                           "torchrun and call srpo_agents.learning.learner.init_data_parallel())")
    return dist.get_rank(), dist.get_world_size()


def init_data_parallel() -> tuple[int, int]:
    """Join the process group ``torchrun`` describes, each rank on its own GPU
    (``sharding.init_distributed``: NCCL for CUDA tensors, gloo for CPU ones; gloo alone
    without CUDA); returns (rank, world size)."""
    rank, world, _ = init_distributed()
    return rank, world


def _combine_figures(sums: dict[str, float], maxima: dict[str, float]
                     ) -> tuple[dict[str, float], dict[str, float]]:
    """The update's figures over all ranks: each rank summed its micro-batches' shares
    of the global mini-batches, so the shares add up across ranks; maxima are maxima.
    Every rank then reports the same numbers, the ones one process would."""
    import torch.distributed as dist

    keys = sorted(sums)
    names = sorted(maxima)
    totals = torch.tensor([float(sums[k]) for k in keys], dtype=torch.float64)
    peaks = torch.tensor([float(maxima[k]) for k in names], dtype=torch.float64)
    dist.all_reduce(totals, op=dist.ReduceOp.SUM)
    dist.all_reduce(peaks, op=dist.ReduceOp.MAX)
    return ({k: float(totals[i]) for i, k in enumerate(keys)},
            {k: float(peaks[i]) for i, k in enumerate(names)})
