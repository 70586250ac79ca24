"""``LearnerConfig``: the update, a section of ``TrainConfig``; ``Learner`` takes exactly it."""

from __future__ import annotations

import math
from dataclasses import dataclass

from srpo_agents.config.checks import FSDP_STRATEGIES, MINIBATCH_BY, check_int, check_positive
from srpo_agents.learning.objective import (
    BEHAVIOUR_CORRECTIONS,
)


@dataclass
class LearnerConfig:
    """The update: ``srpo_agents.learning.learner.Learner`` takes exactly these."""

    lr: float = 2e-5
    """Learning rate of the RL updates (AdamW)."""
    epochs: int = 1
    """Passes over each step's batch (the second and later are off-policy)."""
    minibatch_episodes: int = 0
    """Episodes per optimizer step: each mini-batch holds every unit of its episodes, so
    every algorithm takes the same optimizer steps on the same episodes, whatever its unit
    (a set, or one output); 0: one step per epoch over the whole batch."""
    minibatch_by: str = "episode"
    """How mini-batches draw their episodes: "episode" (shuffled episodes, any task) or
    "task" (shuffled tasks, each task's episodes together). Both give every algorithm the
    same steps on the same episodes; "task" lets the rows of one prompt (a task's first
    turn, played G times) share its forward pass in the update, about half the update's
    time on the search demo's batch (issue 61)."""
    microbatch_rows: int = 32
    """Rows per forward/backward pass (memory bound; gradients are accumulated)."""
    eps_low: float = 0.2
    """Lower clip bound of the policy ratio (1 - eps_low)."""
    eps_high: float = 0.2
    """Upper clip bound of the policy ratio (1 + eps_high; DAPO's clip-higher when
    larger)."""
    beta: float = 0.0
    """Weight of the k3 KL to the initial policy (0 disables; no reference is kept)."""
    max_grad_norm: float = 1.0
    """Gradient-norm clip of each optimizer step (the pre-clip norm is logged as
    ``grad_norm``, the share of steps it clipped as ``grad_clipped``)."""
    token_budget: int = 0
    """The constant that losses summing tokens (SRPO's set losses, MAGRPO's REINFORCE)
    divide by, as Dr. GRPO divides by its generation budget: their gradients then sit at a
    token-mean loss's scale, so one ``max_grad_norm`` treats every algorithm alike. It
    scales the loss and nothing else (not the ratio, its clip or the advantages). 0: the
    run's ``max_new_tokens`` (``TrainConfig.learner``; a LearnerConfig used alone divides
    by 1); 1: the paper's formula as written."""
    adv_eps: float = 1e-6
    """Added to the group's standard deviation of returns in the relative advantage
    (R - mean) / (std + adv_eps); > 0."""
    weight_decay: float = 0.0
    """AdamW's decoupled weight decay of the RL updates."""
    gradient_checkpointing: bool = False
    """Keep only each decoder layer's input through the forward and recompute the rest
    in the backward: activation memory of one layer instead of all, for about a third
    more compute. The learner then scores in train mode with every dropout set to 0
    (transformers checkpoints only in train mode) and runs each row's prompt with it."""
    share_prompt_prefix: bool = True
    """Run the leading tokens that distinct prompts of a micro-batch share (a task's
    verifier prompts: the template and question before each rollout's solution) once,
    as repeated prompts always are (``srpo_agents.learning.prompt_cache``): the same
    computation in fewer tokens. False: only whole repeated prompts run once (issue 50's
    runs)."""
    skip_zero_advantage: bool = False
    """Leave units whose advantage is exactly 0 (groups all right or all wrong) out of the
    update's passes: every built-in loss is linear in the advantage, so without a KL term
    (``beta`` 0) their gradient is exactly 0 and the update is the same (the normalizers
    still count them; an optimizer step whose units are all 0 steps on zero gradients).
    Saves their forward and backward. ``ratio_mean``, ``approx_kl``, ``entropy`` and
    ``max_abs_log_ratio`` then cover the units that carried gradient. Ignored when
    ``beta`` > 0."""
    temperature: float = 1.0
    """Sampling temperature of the rollouts (also divides the learner's logits)."""
    data_parallel: bool = False
    """Run under torchrun (each rank on GPU ``LOCAL_RANK`` over NCCL, or the CPU over
    gloo) with the learner on torch's FSDP2 (``fully_shard``): every rank plays its share
    of each step's tasks, the episodes are gathered, and the update shards events over
    the ranks, whose gradients FSDP sums, so all ranks hold the same weights. Rank 0
    writes --out; rank r writes --out/rank-r."""
    fsdp: str = ""
    """With ``data_parallel``, how FSDP2 shards the learner, as accelerate names the
    strategies: "full_shard" (the default, when empty) splits the weights, gradients and
    AdamW state over the ranks; "no_shard" replicates them like DDP."""
    max_staleness: int = 0
    """Asynchronous SRPO: the rollouts of step s + N are generated in a process of their
    own (hf or vLLM backend), or on the Ray workers (--rollout-workers), while step s
    updates, with the weights of N updates before;
    a set whose oldest member is more than N versions old when used is dropped whole and
    counted. 0: synchronous (generate, then update)."""
    proximal: str = "recompute"
    """The ratio's denominator on off-policy data: "recompute" (pi_prox, the weights at the
    update's start, scored in one extra pass over the rows after the first optimizer
    step's, whose own log-probs are their pi_prox; the behaviour weight pi_prox / mu
    corrects for the generator mu) or "behaviour" (bypass: pi_prox = mu, no extra pass, no weight;
    only with max_staleness <= 1)."""
    behaviour_correction: str = "truncate"
    """The behaviour weight past behaviour_cap: "truncate" (min(w, cap)) or "mask" (w
    outside [1/cap, cap] is 0, and the unit or token leaves the update)."""
    pi_old: str = "auto"
    """The ratio's denominator on fresh data: "sampler" (the log-probs the sampler
    recorded; exact only when sampling is the learner's own computation: hf, float32, in
    this process), "learner" (one no-grad pass of the learner before each update, in the
    first epoch's own micro-batches, so the ratio starts at exactly 1; the first
    optimizer step's rows skip it, their own log-probs being pi_old; the sampler's
    log-probs then enter only as the truncated behaviour weight, as off-policy data's do)
    or "auto" (learner whenever the sampler's numerics differ from the learner's: vLLM,
    16-bit compute, Ray rollout workers, a rollout process)."""
    behaviour_cap: float = 3.0
    """Cap C of the behaviour weight (> 1). 3.0 is TRL's vllm_importance_sampling_cap: a
    stale set's weight may triple, never more, so one stale set cannot outweigh three
    fresh ones."""

    @property
    def sharding(self) -> str:
        """The FSDP2 strategy of a data-parallel learner ("full_shard" unless chosen)."""
        return self.fsdp or "full_shard"

    def __post_init__(self) -> None:
        self.check_learner()

    def check_learner(self) -> None:
        if not (isinstance(self.lr, int | float) and 0 < self.lr < 1):
            raise ValueError(f"lr={self.lr!r}: expected a learning rate in (0, 1)")
        check_int(self, "epochs", 1)
        check_int(self, "microbatch_rows", 1)
        check_int(self, "minibatch_episodes", 0)
        if self.minibatch_by not in MINIBATCH_BY:
            raise ValueError(f"minibatch_by={self.minibatch_by!r}: expected one of "
                             f"{', '.join(MINIBATCH_BY)}")
        check_int(self, "token_budget", 0)
        if not (isinstance(self.eps_low, int | float) and 0 < self.eps_low < 1):
            raise ValueError(f"eps_low={self.eps_low!r}: expected a value in (0, 1) (the clip "
                             f"range is [1 - eps_low, 1 + eps_high])")
        if not (isinstance(self.eps_high, int | float) and self.eps_high > 0):
            raise ValueError(f"eps_high={self.eps_high!r}: expected a value > 0 (the clip "
                             f"range is [1 - eps_low, 1 + eps_high])")
        for name in ("beta", "weight_decay"):
            value = getattr(self, name)
            if not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
                raise ValueError(f"{name}={value!r}: expected a finite number >= 0.0")
        for name in ("temperature", "max_grad_norm", "adv_eps"):
            check_positive(self, name)
        check_int(self, "max_staleness", 0)
        if self.proximal not in ("recompute", "behaviour"):
            raise ValueError(f"proximal={self.proximal!r}: expected 'recompute' or "
                             f"'behaviour' (bypass: pi_prox = mu)")
        if self.proximal == "behaviour" and self.max_staleness > 1:
            raise ValueError(f"proximal='behaviour' with max_staleness={self.max_staleness}: "
                             f"bypass clips against the generator's weights, which are "
                             f"then up to {self.max_staleness} updates old; it is allowed "
                             f"at max_staleness <= 1 only (use proximal='recompute')")
        if self.pi_old not in ("auto", "sampler", "learner"):
            raise ValueError(f"pi_old={self.pi_old!r}: expected 'auto', 'sampler' or "
                             f"'learner'")
        if self.behaviour_correction not in BEHAVIOUR_CORRECTIONS:
            raise ValueError(f"behaviour_correction={self.behaviour_correction!r}: expected "
                             f"one of {BEHAVIOUR_CORRECTIONS}")
        if not (isinstance(self.behaviour_cap, int | float) and math.isfinite(
                self.behaviour_cap) and self.behaviour_cap > 1):
            raise ValueError(f"behaviour_cap={self.behaviour_cap!r}: expected a finite "
                             f"number > 1")
        if self.fsdp not in FSDP_STRATEGIES:
            raise ValueError(f"fsdp={self.fsdp!r}: expected one of {FSDP_STRATEGIES}")
        if self.fsdp and not self.data_parallel:
            raise ValueError(f"fsdp={self.fsdp!r} without data_parallel: FSDP2 shards over "
                             f"the ranks of a torchrun launch (add --data-parallel)")
