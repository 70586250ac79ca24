"""The SRPO objective against hand-computed values, and vectorized against a plain loop."""

import math

import numpy as np
import pytest
import torch

from srpo_agents.learning.objective import (
    ADVANTAGE_ESTIMATORS,
    ALGORITHMS,
    POLICY_LOSSES,
    LossConfig,
    LossInputs,
    UnitInfo,
    group_relative,
    kappa_value,
)


def one_unit(row_log_ratios, advantage):
    """A single unit whose member rows have the given summed log-ratios (one token each)."""
    k = len(row_log_ratios)
    logp = torch.tensor(row_log_ratios, dtype=torch.float64).unsqueeze(1)
    return LossInputs(logp=logp, logp_old=torch.zeros_like(logp), mask=torch.ones_like(logp),
                      unit_index=torch.zeros(k, dtype=torch.long),
                      unit_size=torch.tensor([float(k)], dtype=torch.float64),
                      advantages=torch.tensor([advantage], dtype=torch.float64))


# (members' log-ratios, advantage, kappa, expected objective J), computed by hand:
# L = kappa * sum, rho = e^L, J = min(rho A, clip(rho, 0.8, 1.2) A)
HAND_CASES = [
    # K = 1: kappa is 1 for every variant
    ([0.1], 1.0, "inv_sqrt", min(math.exp(0.1), 1.2)),              # rho 1.105, not clipped
    ([0.3], 1.0, "one", 1.2),                                         # rho 1.35 > 1.2: clipped
    ([-0.3], -1.0, "inv", -0.8),                                      # rho 0.74 < 0.8, A < 0
    # K = 2, sum 0.4: L = 0.4/sqrt2 = 0.2828 (rho 1.327), 0.4 (1.492), 0.2 (1.221)
    ([0.1, 0.3], 2.0, "inv_sqrt", 2.0 * 1.2),
    ([0.1, 0.3], -2.0, "inv_sqrt", -2.0 * math.exp(0.4 / math.sqrt(2))),  # A < 0: unclipped side
    ([0.1, 0.3], 2.0, "one", 2.0 * 1.2),
    ([0.05, 0.05], 1.0, "inv", math.exp(0.05)),                      # L = 0.05, inside
    # K = 5, sum -0.5: L = -0.2236 (rho 0.7997), -0.5 (0.6065), -0.1 (0.9048)
    ([-0.1] * 5, 1.0, "inv_sqrt", math.exp(-0.5 / math.sqrt(5))),    # A > 0, rho < 0.8: min keeps rho
    ([-0.1] * 5, -1.0, "one", -0.8),                                  # A < 0, rho < 0.8: clipped
    ([-0.1] * 5, -1.0, "inv", -math.exp(-0.1)),
    ([0.2] * 5, -1.0, "inv_sqrt", -math.exp(1.0 / math.sqrt(5))),    # rho 1.564, A < 0: unclipped
    ([0.2] * 5, 1.0, "inv", 1.2),                                     # L = 0.2, rho 1.221: clipped
]


@pytest.mark.parametrize(("ratios", "advantage", "kappa", "expected"), HAND_CASES)
def test_set_clip_matches_hand_computed_values(ratios, advantage, kappa, expected):
    loss, _ = POLICY_LOSSES["set_clip"](one_unit(ratios, advantage),
                                        LossConfig(eps_low=0.2, eps_high=0.2, kappa=kappa))
    assert loss.item() == pytest.approx(-expected, rel=1e-9, abs=1e-12)


def test_asymmetric_clip_bounds():
    cfg = LossConfig(eps_low=0.1, eps_high=0.3, kappa="one")
    high, _ = POLICY_LOSSES["set_clip"](one_unit([0.5], 1.0), cfg)        # rho 1.65 -> 1.3
    low, _ = POLICY_LOSSES["set_clip"](one_unit([-0.5], -1.0), cfg)       # rho 0.61 -> 0.9
    assert high.item() == pytest.approx(-1.3) and low.item() == pytest.approx(0.9)


def loop_set_clip(logp, logp_old, mask, unit_index, unit_size, adv, cfg):
    total = 0.0
    for u in range(len(unit_size)):
        log_ratio = 0.0
        for r in range(logp.shape[0]):
            if unit_index[r] == u:
                for t in range(logp.shape[1]):
                    log_ratio += mask[r, t] * (logp[r, t] - logp_old[r, t])
        rho = math.exp(kappa_value(cfg.kappa, int(unit_size[u])) * log_ratio)
        clipped = min(max(rho, 1 - cfg.eps_low), 1 + cfg.eps_high)
        total += min(rho * adv[u], clipped * adv[u])
    return -total / len(unit_size)


def loop_token_clip(logp, logp_old, mask, unit_index, adv, cfg):
    total = count = 0.0
    for r in range(logp.shape[0]):
        for t in range(logp.shape[1]):
            if mask[r, t]:
                rho = math.exp(logp[r, t] - logp_old[r, t])
                clipped = min(max(rho, 1 - cfg.eps_low), 1 + cfg.eps_high)
                a = adv[unit_index[r]]
                total += min(rho * a, clipped * a)
                count += 1
    return -total / count


@pytest.mark.parametrize("kappa", ["inv_sqrt", "one", "inv"])
def test_vectorized_losses_equal_a_plain_loop(kappa):
    rng = np.random.default_rng(0)
    sizes = [1, 2, 5, 3, 1]
    unit_index = np.repeat(np.arange(len(sizes)), sizes)
    rows, width = len(unit_index), 7
    logp_old = rng.normal(-2, 0.5, (rows, width))
    logp = logp_old + rng.normal(0, 0.15, (rows, width))
    mask = (rng.random((rows, width)) < 0.8).astype(float)
    mask[:, 0] = 1
    adv = rng.normal(0, 1, len(sizes))
    cfg = LossConfig(eps_low=0.2, eps_high=0.28, kappa=kappa)
    inputs = LossInputs(torch.tensor(logp), torch.tensor(logp_old), torch.tensor(mask),
                        torch.tensor(unit_index), torch.tensor(sizes, dtype=torch.float64),
                        torch.tensor(adv))
    got, _ = POLICY_LOSSES["set_clip"](inputs, cfg)
    want = loop_set_clip(logp, logp_old, mask, unit_index, sizes, adv, cfg)
    assert got.item() == pytest.approx(want, rel=1e-10)
    got, _ = POLICY_LOSSES["token_clip"](inputs, cfg)
    want = loop_token_clip(logp, logp_old, mask, unit_index, adv, cfg)
    assert got.item() == pytest.approx(want, rel=1e-10)


def test_ratio_one_gives_minus_mean_advantage_and_gradient_flows():
    logp = torch.full((3, 4), -1.0, dtype=torch.float64, requires_grad=True)
    inputs = LossInputs(logp, logp.detach().clone(), torch.ones(3, 4),
                        torch.tensor([0, 0, 1]), torch.tensor([2.0, 1.0], dtype=torch.float64),
                        torch.tensor([1.0, -0.5], dtype=torch.float64))
    loss, metrics = POLICY_LOSSES["set_clip"](inputs, LossConfig())
    assert loss.item() == pytest.approx(-(1.0 - 0.5) / 2)
    assert metrics["clip_fraction"] == 0.0
    loss.backward()
    # d(-J)/d logp = -A * kappa * rho / U for every token of the unit
    assert logp.grad[0, 0].item() == pytest.approx(-1.0 / math.sqrt(2) / 2)
    assert logp.grad[2, 0].item() == pytest.approx(0.5 / 2)


def units(rewards, tasks, events=None, agents=None, states=None):
    n = len(rewards)
    events = events or ["solve"] * n
    agents = agents or [""] * n
    states = states or ["s"] * n
    return [UnitInfo(t, f"ep{i}", e, 0, a, s, r)
            for i, (r, t, e, a, s) in enumerate(zip(rewards, tasks, events, agents, states,
                                                    strict=True))]


def test_group_relative_advantage_by_hand():
    u = units([1, 0, 0, 1, 5, 5], ["a", "a", "a", "a", "b", "b"])
    adv = ADVANTAGE_ESTIMATORS["task"](u, eps=0.0)
    # task a: mean 0.5, population std 0.5 -> +-1; task b: all equal -> 0
    np.testing.assert_allclose(adv, [1, -1, -1, 1, 0, 0])
    u = units([1, 0, 1, 1], ["a"] * 4, events=["solve", "solve", "agg", "agg"])
    np.testing.assert_allclose(ADVANTAGE_ESTIMATORS["task_event_type"](u, eps=0.0),
                               [1, -1, 0, 0])
    np.testing.assert_allclose(group_relative(u, lambda x: x.task_id, 0.0, scale=False),
                               [0.25, -0.75, 0.25, 0.25])


def test_algorithm_table_names_registered_functions():
    for name, algo in ALGORITHMS.items():
        assert algo.advantage in ADVANTAGE_ESTIMATORS, name
        assert algo.loss in POLICY_LOSSES, name
        assert algo.unit in ("set", "output"), name


def test_baseline_groupings_by_hand():
    # one task's outputs from three agents over two turns; the aggregators of e1 and e2
    # saw different solutions (pre-states s1, s2), as they do whenever the solvers differ
    u = [UnitInfo("a", "e1", "solve", 0, "solver_0", "s0", 1.0),
         UnitInfo("a", "e2", "solve", 0, "solver_0", "s0", 0.0),
         UnitInfo("a", "e1", "aggregate", 1, "aggregator_0", "s1", 1.0),
         UnitInfo("a", "e2", "aggregate", 1, "aggregator_0", "s2", 0.0),
         UnitInfo("a", "e3", "solve", 0, "solver_1", "s0", 0.0),
         UnitInfo("a", "e3", "solve", 0, "solver_1", "s0", 3.0)]
    # Dr. MAS: (task, agent) groups: solver_0 {1, 0} -> +-1; aggregator {1, 0} -> +-1;
    # solver_1 {0, 3} -> -+1
    np.testing.assert_allclose(ADVANTAGE_ESTIMATORS["task_agent"](u, eps=0.0),
                               [1, -1, 1, -1, -1, 1])
    # AT-GRPO: (task, turn, agent): the same groups here, since each agent acts at one turn
    np.testing.assert_allclose(ADVANTAGE_ESTIMATORS["task_turn_agent"](u, eps=0.0),
                               [1, -1, 1, -1, -1, 1])
    # MAGRPO: siblings at the same node (task, event index, event type, agent), R - mean,
    # no std: solver_0 {1, 0} -> +-0.5; aggregator {1, 0} -> +-0.5 (grouped by pre-state,
    # as before, s1 and s2 had no sibling and the aggregator got 0);
    # solver_1 {0, 3} -> -+1.5
    np.testing.assert_allclose(ADVANTAGE_ESTIMATORS["node_mean"](u, eps=0.0),
                               [0.5, -0.5, 0.5, -0.5, -1.5, 1.5])
    # GRPO: one task group over all six outputs: mean 5/6, population std sqrt(41/36)
    rewards = np.array([1, 0, 1, 0, 0, 3])
    np.testing.assert_allclose(ADVANTAGE_ESTIMATORS["task"](u, eps=0.0),
                               (rewards - rewards.mean()) / rewards.std())


def test_magrpo_siblings_need_the_same_event_and_agent():
    # a verifier at event 1 and one at event 3 (a second round) are not siblings, nor is
    # a solver with a verifier at one event index, nor are two tasks' outputs
    u = [UnitInfo("a", "e1", "verify", 1, "verifier_0", "x", 1.0),
         UnitInfo("a", "e2", "verify", 1, "verifier_0", "y", 0.0),
         UnitInfo("a", "e2", "verify", 3, "verifier_0", "z", 0.0),
         UnitInfo("a", "e3", "solve", 1, "solver_0", "w", 5.0),
         UnitInfo("b", "e4", "verify", 1, "verifier_0", "v", 7.0)]
    np.testing.assert_allclose(ADVANTAGE_ESTIMATORS["node_mean"](u, eps=0.0),
                               [0.5, -0.5, 0, 0, 0])


def test_reference_kl_by_hand():
    from srpo_agents.learning.objective import reference_kl

    # two units: unit 0 has rows 0 and 1 (3 tokens in all), unit 1 has row 2 (1 token)
    logp = torch.tensor([[0.0, 0.0], [0.0, 0.0], [0.0, 0.0]], dtype=torch.float64)
    ref = torch.tensor([[1.0, 0.5], [-1.0, 9.0], [2.0, 9.0]], dtype=torch.float64)
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0], [1.0, 0.0]], dtype=torch.float64)
    index = torch.tensor([0, 0, 1])

    def k3(d):
        return math.exp(d) - d - 1

    # "units": each unit's token sum (the level of a set loss's summed log-ratios), then
    # the mean over units; a per-unit token mean would give (k3s / 3 + k3(2)) / 2 instead
    per_unit = [k3(1.0) + k3(0.5) + k3(-1.0), k3(2.0)]
    assert reference_kl(logp, ref, mask, index, 2, "units").item() == pytest.approx(
        sum(per_unit) / 2)
    assert reference_kl(logp, ref, mask, index, 2, "units").item() != pytest.approx(
        (per_unit[0] / 3 + per_unit[1]) / 2)
    assert reference_kl(logp, ref, mask, index, 2, "tokens").item() == pytest.approx(
        (k3(1.0) + k3(0.5) + k3(-1.0) + k3(2.0)) / 4)
    assert reference_kl(ref, ref, mask, index, 2, "units").item() == 0.0


def test_reinforce_loss_by_hand():
    logp = torch.tensor([[-1.0, -2.0, 0.0], [-0.5, -0.5, -0.5]], dtype=torch.float64,
                        requires_grad=True)
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]], dtype=torch.float64)
    inputs = LossInputs(logp, torch.zeros_like(logp), mask, torch.tensor([0, 1]),
                        torch.tensor([1.0, 1.0], dtype=torch.float64),
                        torch.tensor([2.0, -1.0], dtype=torch.float64))
    loss, _ = POLICY_LOSSES["reinforce"](inputs, LossConfig())
    # token sums -3 and -1.5; -(2 * -3 + -1 * -1.5) / 2 = 2.25
    assert loss.item() == pytest.approx(2.25)
    loss.backward()
    assert logp.grad[0].tolist() == pytest.approx([-1.0, -1.0, 0.0])   # -A/U on kept tokens
    assert logp.grad[1].tolist() == pytest.approx([0.5, 0.5, 0.5])


