"""Advantage estimators and policy losses, registered by name with one signature each.

SRPO (../shared/SRPO.md, section 2) and every comparison of its section 3 are a choice
of three things: the *action unit* (the whole active set, or each output alone), an
*advantage estimator* (which units are compared with which) and a *policy loss* (how
the ratio is formed, clipped and averaged). The learner loops over names; adding a
method is a few lines here.

Signatures:

    advantage estimator: (units: Sequence[UnitInfo], eps: float) -> np.ndarray [U]
    policy loss:         (inputs: LossInputs, cfg: LossConfig) -> (loss, metrics)

Shapes in ``LossInputs`` (R member rows, T response tokens, U action units):
    logp, logp_old: [R, T] float   log-probs of the sampled response tokens
    logp_behaviour: [R, T] float   the generator's log-probs (mu), or None (see below)
    mask:           [R, T] float   1 on response tokens, 0 on padding
    unit_index:     [R]    long    the unit each row belongs to, in 0..U-1
    unit_size:      [U]    float   K of each unit (number of member rows)
    advantages:     [U]    float   one scalar per unit

Deliberate choices: the set log-ratio is computed in log space and clipped once per unit
(as the spec says); the per-output baselines use token-level ratios and token-mean
aggregation, as their papers do; MAGRPO is REINFORCE with a group-mean baseline and no
ratio. KL to a reference (k3, ``reference_kl``) is added by the learner for every loss,
at the loss's own level (token sums averaged over units, or the token mean), so a
mini-batch split into micro-batches weighted by their share of units or tokens gives the
same term. The losses here are the papers' formulas; the learner divides the losses that
sum tokens by a constant generation budget (``LearnerConfig.token_budget``).

Off-policy data (asynchronous SRPO, ``max_staleness`` >= 1; docs/algorithm.md): the
ratio's denominator ``logp_old`` is then the proximal policy pi_prox (the weights at the
start of the update), and ``logp_behaviour`` holds mu, the log-probs the generator
sampled with, some versions older. Every loss multiplies its objective, at its own unit,
by the detached behaviour weight w = pi_prox / mu (``behaviour_weight``): per token for
the token losses, per unit for the others, where a unit's weight is the geometric mean
of its members' sequence ratios (never their product). ``logp_behaviour`` None: the
data is on-policy, or ``logp_old`` is mu itself (bypass), and no weight applies.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

KAPPAS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "inv_sqrt": lambda k: k.rsqrt(),      # SRPO default: Var(L_e) stays one member's
    "one": lambda k: torch.ones_like(k),  # SRPO-sum
    "inv": lambda k: k.reciprocal(),      # SRPO-mean
}


@dataclass(frozen=True)
class UnitInfo:
    """What an advantage estimator may know about one action unit."""

    task_id: str
    episode_id: str
    event_type: str
    step_index: int
    agent_id: str          # the member's agent for output units; "" for a set
    pre_state_id: str
    reward: float          # the return credited to this unit (episode outcome by default)


@dataclass
class LossInputs:
    logp: torch.Tensor
    logp_old: torch.Tensor
    mask: torch.Tensor
    unit_index: torch.Tensor
    unit_size: torch.Tensor
    advantages: torch.Tensor
    logp_behaviour: torch.Tensor | None = None


BEHAVIOUR_CORRECTIONS = ("truncate", "mask")


@dataclass(frozen=True)
class LossConfig:
    eps_low: float = 0.2
    eps_high: float = 0.2
    kappa: str = "inv_sqrt"
    correction: str = "truncate"
    """What the behaviour weight w does past ``cap``: "truncate" (min(w, cap)) or "mask"
    (w outside [1/cap, cap] becomes 0: the unit or token leaves the update)."""
    cap: float = 3.0


def behaviour_weight(inputs: LossInputs, cfg: LossConfig, per: str
                     ) -> tuple[torch.Tensor | None, dict[str, float]]:
    """The detached behaviour weight pi_prox / mu at the loss's unit, and its figures.

    ``per="tokens"``: one weight per response token, exp(logp_old - logp_behaviour)
    ([R, T]). ``per="units"``: one weight per unit ([U]), the geometric mean over its
    members of each member's sequence ratio, exp((1/K) sum_j sum_t m (logp_old -
    logp_behaviour)); for units of one output, that output's sequence ratio. None (and no
    figures) when ``logp_behaviour`` is None."""
    if inputs.logp_behaviour is None:
        return None, {}
    with torch.no_grad():
        log_w = (inputs.logp_old - inputs.logp_behaviour) * inputs.mask              # [R, T]
        if per == "units":
            sizes = inputs.unit_size.to(log_w.dtype)
            log_w = torch.zeros_like(sizes).index_add(0, inputs.unit_index,
                                                     log_w.sum(dim=1)) / sizes      # [U]
            counted = torch.ones_like(log_w)
        elif per == "tokens":
            counted = inputs.mask
        else:
            raise ValueError(f"per={per!r}: expected 'tokens' or 'units'")
        weight = torch.exp(log_w)
        cap = float(cfg.cap)
        if cfg.correction == "truncate":
            outside = weight > cap
            out = torch.clamp(weight, max=cap)
        elif cfg.correction == "mask":
            outside = (weight > cap) | (weight < 1 / cap)
            out = torch.where(outside, torch.zeros_like(weight), weight)
        else:
            raise ValueError(f"correction={cfg.correction!r}: expected one of "
                             f"{BEHAVIOUR_CORRECTIONS}")
        total = counted.sum().clamp(min=1)
        share = float((outside.to(counted.dtype) * counted).sum() / total)
        figures = {"behaviour_weight_mean": float((out * counted).sum() / total),
                   "behaviour_truncated": share if cfg.correction == "truncate" else 0.0,
                   "behaviour_masked": share if cfg.correction == "mask" else 0.0}
    return out * counted if per == "tokens" else out, figures


ADVANTAGE_ESTIMATORS: dict[str, Callable[..., np.ndarray]] = {}


@dataclass(frozen=True)
class PolicyLoss:
    """A registered loss and what the learner must know to run it in pieces.

    ``averages_over``: "units" (the loss is a mean over action units: sets, outputs,
    sequences) or "tokens" (a mean over every response token of the mini-batch). The
    learner splits a mini-batch into micro-batches and weights each micro-batch's loss by
    its share of that level, so their sum is the mini-batch's loss; a KL penalty is
    averaged at the same level."""
    fn: Callable[[LossInputs, LossConfig], tuple[torch.Tensor, dict[str, float]]]
    averages_over: str

    def __call__(self, inputs: LossInputs, cfg: LossConfig
                 ) -> tuple[torch.Tensor, dict[str, float]]:
        return self.fn(inputs, cfg)


POLICY_LOSSES: dict[str, PolicyLoss] = {}


def register_adv_est(name: str):
    def add(fn):
        ADVANTAGE_ESTIMATORS[name] = fn
        return fn
    return add


def register_policy_loss(name: str, averages_over: str):
    """Register ``fn(inputs, cfg) -> (loss, figures)`` as ``name``; ``averages_over``:
    "units" or "tokens" (see ``PolicyLoss``), stated by every loss: a micro-batch
    weighted at the wrong level gives a different gradient without any error."""
    if averages_over not in ("units", "tokens"):
        raise ValueError(f"register_policy_loss({name!r}): averages_over={averages_over!r}; "
                         "expected 'units' or 'tokens'")

    def add(fn):
        POLICY_LOSSES[name] = PolicyLoss(fn, averages_over)
        return fn
    return add


def group_relative(units: Sequence[UnitInfo], key: Callable[[UnitInfo], Hashable],
                   eps: float, scale: bool = True) -> np.ndarray:
    """(R - mean_g) / (std_g + eps) within groups of equal ``key`` (population std).

    A group of one unit, or one whose rewards are all equal, gets advantage 0."""
    groups: dict[Hashable, list[int]] = defaultdict(list)
    for i, unit in enumerate(units):
        groups[key(unit)].append(i)
    rewards = np.array([u.reward for u in units], dtype=np.float64)
    out = np.zeros(len(units), dtype=np.float64)
    for members in groups.values():
        r = rewards[members]
        centered = r - r.mean()
        if not scale:
            out[members] = centered
        elif r.std() > 0:
            out[members] = centered / (r.std() + eps)
    return out


@register_adv_est("task")
def task_advantage(units: Sequence[UnitInfo], eps: float = 1e-6) -> np.ndarray:
    """SRPO default and GRPO: all units of the G rollouts of one task form a group."""
    return group_relative(units, lambda u: u.task_id, eps)


@register_adv_est("task_event_type")
def task_event_type_advantage(units: Sequence[UnitInfo], eps: float = 1e-6) -> np.ndarray:
    """SRPO with groups of (task, event type), e.g. solver sets vs aggregator events."""
    return group_relative(units, lambda u: (u.task_id, u.event_type), eps)


@register_adv_est("task_step")
def task_step_advantage(units: Sequence[UnitInfo], eps: float = 1e-6) -> np.ndarray:
    """SRPO with groups of (task, step index)."""
    return group_relative(units, lambda u: (u.task_id, u.step_index), eps)


@register_policy_loss("set_clip", averages_over="units")
def set_clip_loss(inputs: LossInputs, cfg: LossConfig) -> tuple[torch.Tensor, dict[str, float]]:
    """SRPO: L_u = kappa(K_u) * sum_{j in u} sum_t m (logp - logp_old); rho_u = exp(L_u);
    J = mean_u min(rho_u A_u, clip(rho_u, 1 - eps_low, 1 + eps_high) A_u); loss = -J.

    With units of one output each (K = 1) this is SRPO-singleton: a sequence-level ratio
    per output, mean over outputs."""
    n_units = inputs.unit_size.shape[0]
    row_log_ratio = ((inputs.logp - inputs.logp_old) * inputs.mask).sum(dim=1)      # [R]
    set_log_ratio = torch.zeros(n_units, dtype=row_log_ratio.dtype,
                                device=row_log_ratio.device)
    set_log_ratio = set_log_ratio.index_add(0, inputs.unit_index, row_log_ratio)    # [U]
    set_log_ratio = KAPPAS[cfg.kappa](inputs.unit_size.to(set_log_ratio.dtype)) * set_log_ratio
    ratio = torch.exp(set_log_ratio)
    adv = inputs.advantages.to(ratio.dtype)
    clipped = torch.clamp(ratio, 1 - cfg.eps_low, 1 + cfg.eps_high)
    objective = torch.minimum(ratio * adv, clipped * adv)
    clip_frac = ((ratio * adv) > (clipped * adv)).float().mean()
    weight, figures = behaviour_weight(inputs, cfg, "units")
    if weight is not None:
        objective = weight * objective
    return -objective.mean(), {"clip_fraction": float(clip_frac),
                               "ratio_mean": float(ratio.detach().mean()), **figures}


@register_policy_loss("token_clip", averages_over="tokens")
def token_clip_loss(inputs: LossInputs, cfg: LossConfig) -> tuple[torch.Tensor, dict[str, float]]:
    """GRPO-style: per-token ratio r_t = exp(logp - logp_old), clipped per token with the
    row's unit advantage, averaged over all response tokens of the batch (token-mean)."""
    adv = inputs.advantages[inputs.unit_index].unsqueeze(1).to(inputs.logp.dtype)  # [R, 1]
    ratio = torch.exp(inputs.logp - inputs.logp_old)                                  # [R, T]
    clipped = torch.clamp(ratio, 1 - cfg.eps_low, 1 + cfg.eps_high)
    per_token = torch.minimum(ratio * adv, clipped * adv)
    tokens = inputs.mask.sum().clamp(min=1)
    clip_frac = ((((ratio * adv) > (clipped * adv)).float() * inputs.mask).sum() / tokens)
    weight, figures = behaviour_weight(inputs, cfg, "tokens")
    if weight is not None:
        per_token = weight * per_token
    return -(per_token * inputs.mask).sum() / tokens, {"clip_fraction": float(clip_frac),
                                                       "ratio_mean": float(ratio.detach()[
                                                           inputs.mask > 0].mean()), **figures}


@register_adv_est("task_agent")
def task_agent_advantage(units: Sequence[UnitInfo], eps: float = 1e-6) -> np.ndarray:
    """Dr. MAS (agent-wise GRPO): each agent's outputs are normalized within their own
    (task, agent) group, so one agent's reward scale cannot swamp another's."""
    return group_relative(units, lambda u: (u.task_id, u.agent_id), eps)


@register_adv_est("task_turn_agent")
def task_turn_agent_advantage(units: Sequence[UnitInfo], eps: float = 1e-6) -> np.ndarray:
    """AT-GRPO (PettingLLMs): groups of (task, turn, agent); the turn is the event index."""
    return group_relative(units, lambda u: (u.task_id, u.step_index, u.agent_id), eps)


@register_adv_est("node_mean")
def node_mean_advantage(units: Sequence[UnitInfo], eps: float = 1e-6) -> np.ndarray:
    """MAGRPO (Liu et al. 2025, arXiv 2508.04652; CoMLRL): A = R - mean of the returns of
    the node's G siblings, no division by the standard deviation (CoMLRL's default
    ``advantage_mode="mean"``; ``eps`` is unused).

    Followed: CoMLRL ``comlrl/trainers/reinforce/magrpo.py`` (``MAGRPOTrainer.
    _train_step_returns``, ``_compute_advantages``) and its docs
    ``docs/content/docs/user-guide/multi-turn.md``. There a node of turn t holds G
    joint actions sampled from one shared history; in the default "aligned" joint mode
    joint action g is every agent's g-th sample and each agent's g-th output is credited
    with joint action g's return; each joint action then spawns its own child node of G
    (a tree, G^T leaves), and the return is r_t + gamma * mean(children's returns).

    Here a node is (task, event index, event type, agent) across the G rollouts of a
    task, and the return credited is the episode outcome (``events.build_units``). At
    the first event this is CoMLRL's node exactly: the G rollouts share the pre-state
    (the reset), and the K parallel solvers of rollout g are aligned joint action g. At
    later events the rollouts do not branch (the rollout engine plays G independent
    episodes, so the G siblings at event e do not share their pre-state: each followed
    its own earlier actions); the group is the G actions of one agent at the same depth
    of the same task. Differences from CoMLRL, kept so every method of the harness runs
    on the same G rollouts per task: (1) the baseline at a later event averages over
    different histories instead of one node's; (2) G actions per node instead of a
    tree of G^T episodes; (3) no discount (gamma = 1) and one path's return instead of
    the mean over a child node's G returns; every built-in env pays its reward at the
    last event only, so the return from any event is the outcome; (4) no "cross" joint
    mode (a Cartesian product of the members' samples needs re-scoring joint actions
    the env never played). Grouping by the pre-state instead (the old definition) left
    every role after the first event without siblings: advantage 0 for the aggregator
    and the verifier in every episode."""
    return group_relative(units, lambda u: (u.task_id, u.step_index, u.event_type,
                                            u.agent_id), eps, scale=False)


@register_policy_loss("reinforce", averages_over="units")
def reinforce_loss(inputs: LossInputs, cfg: LossConfig) -> tuple[torch.Tensor, dict[str, float]]:
    """MAGRPO's REINFORCE: no ratio and no clip; loss = -(1/U) sum_u A_u sum_{rows of u}
    sum_t m logp (seq-mean-token-sum: token sums per sequence, mean over units)."""
    row_logp = (inputs.logp * inputs.mask).sum(dim=1)                               # [R]
    unit_logp = torch.zeros(inputs.unit_size.shape[0], dtype=row_logp.dtype,
                            device=row_logp.device).index_add(0, inputs.unit_index, row_logp)
    objective = inputs.advantages.to(unit_logp.dtype) * unit_logp
    weight, figures = behaviour_weight(inputs, cfg, "units")
    if weight is not None:  # off-policy REINFORCE: the gradient of log pi, weighted by w
        objective = weight * objective
    return -objective.mean(), {"clip_fraction": 0.0, "ratio_mean": 1.0, **figures}


def reference_kl(logp: torch.Tensor, ref_logp: torch.Tensor, mask: torch.Tensor,
                 unit_index: torch.Tensor, n_units: int, per: str) -> torch.Tensor:
    """k3 estimate of KL(pi || pi_ref): exp(d) - d - 1 with d = ref - logp, per token.

    ``per="tokens"`` (token-mean losses): the mean over every response token.
    ``per="units"`` (losses that average over units of summed tokens: sets, single
    outputs, MAGRPO's sequences): each unit's token sum (its members' tokens pooled),
    then the mean over units: the level of the loss's own term, a sum of log-ratios over
    the unit's tokens (the learner divides both by ``token_budget``). Before issue 60 it
    was each unit's token mean, so beta weighed about 1/(mean length) as much against a
    set loss as against a token-mean one.
    Either way the term is a mean at the level the loss averages at: micro-batches
    weighted by their share of that level add up to the mini-batch's term exactly."""
    delta = (ref_logp - logp) * mask
    k3 = (torch.exp(delta) - delta - 1) * mask                                     # [R, T]
    if per == "tokens":
        return k3.sum() / mask.sum().clamp(min=1)
    if per != "units":
        raise ValueError(f"per={per!r}: expected 'tokens' or 'units'")
    zeros = torch.zeros(n_units, dtype=k3.dtype, device=k3.device)
    return zeros.index_add(0, unit_index, k3.sum(dim=1)).mean()


@dataclass(frozen=True)
class Algorithm:
    """One row of SRPO.md section 3: how units are formed and which functions apply."""

    unit: str          # "set" (the active set is one action) or "output" (each output alone)
    advantage: str     # a name in ADVANTAGE_ESTIMATORS
    loss: str          # a name in POLICY_LOSSES
    kappa: str = "inv_sqrt"
    about: str = ""    # the formula and the paper it comes from


_SRPO = "SRPO (arXiv 2609.08452)"
_SET = "L_e = kappa(K_e) sum_j l_ej, rho_e = exp(L_e), clipped once per event, mean over events"

ALGORITHMS: dict[str, Algorithm] = {
    "srpo": Algorithm("set", "task", "set_clip", "inv_sqrt",
                      f"{_SRPO}: {_SET}, kappa(K) = 1/sqrt K; A_e normalized over the "
                      "task's G rollouts"),
    "srpo_sum": Algorithm("set", "task", "set_clip", "one",
                          f"{_SRPO} ablation: {_SET}, kappa(K) = 1"),
    "srpo_mean": Algorithm("set", "task", "set_clip", "inv",
                           f"{_SRPO} ablation: {_SET}, kappa(K) = 1/K"),
    "srpo_singleton": Algorithm("output", "task", "set_clip", "inv_sqrt",
                                f"{_SRPO} ablation: every output its own action (K = 1), "
                                "sequence log-ratio clipped once per output, mean over outputs"),
    # The per-output baselines of SRPO.md section 3: each output is its own action.
    "grpo": Algorithm("output", "task", "token_clip", about=(
        "GRPO (Shao et al. 2024, DeepSeekMath, arXiv 2402.03300): A = (R - mean_task) / "
        "std_task per output, token ratio clipped per token, token-mean")),
    "dr_mas": Algorithm("output", "task_agent", "token_clip", about=(
        "Dr. MAS (Feng et al. 2026, arXiv 2602.08847): A = (R - mean_task,agent) / "
        "std_task,agent, each agent normalized by its own reward statistics; GRPO's loss")),
    "at_grpo": Algorithm("output", "task_turn_agent", "token_clip", about=(
        "AT-GRPO (Zhao et al. 2025, PettingLLMs, arXiv 2510.11062): A = (R - "
        "mean_task,turn,agent) / std_task,turn,agent; GRPO's loss")),
    "magrpo": Algorithm("output", "node_mean", "reinforce", about=(
        "MAGRPO (Liu et al. 2025, CoMLRL, arXiv 2508.04652): REINFORCE with A = R - mean of "
        "the G siblings at the same node = (task, event index, event type, agent), no "
        "ratio, sequence-mean of token sums")),
}


def kappa_value(name: str, k: int) -> float:
    """kappa(K) as a float, for reports and hand checks."""
    return {"inv_sqrt": 1 / math.sqrt(k), "one": 1.0, "inv": 1 / k}[name]
