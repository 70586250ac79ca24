"""The one module that decides verdicts (issue 38): its rule over seeds, its refusal to
call a one-seed difference, the noise floor that may let it, and one run's gain."""

import math

import pytest

from srpo_agents.running.verdicts import (
    NOT_CALLED,
    Floor,
    bar,
    cleared,
    contrast,
    diff_cell,
    difference,
    seeds_for,
    task_difference,
)


def rows(values_by_seed):
    return [{"seed": s, "per_task_avg": v} for s, v in values_by_seed.items()]


def test_several_seeds_call_only_agreeing_seeds_beyond_the_bar():
    zeros = rows({s: [0.0] * 200 for s in range(3)})
    ahead = rows({s: [0.1 + 0.01 * (t % 3) for t in range(200)] for s in range(3)})
    d = difference(ahead, zeros)
    assert d["verdict"] == "ahead" and d["diff"] == pytest.approx(0.1 + 0.01 * 199 / 200)
    assert d["se"] >= d["between_se"] and d["se"] >= d["bootstrap_se"]
    assert d["bar"] == pytest.approx(4.30) and "**ahead**" in diff_cell(d)
    # one seed the other way round: never called, whatever its size
    mixed = rows({0: [0.3] * 200, 1: [0.3] * 200, 2: [-0.05] * 200})
    d = difference(mixed, zeros)
    assert d["verdict"] == "within noise" and d["per_seed"] == pytest.approx([0.3, 0.3, -0.05])
    assert d["seeds_to_separate"] >= 4
    # the seed spread enters the standard error even when every task agrees
    spread = rows({0: [0.01] * 200, 1: [0.05] * 200, 2: [0.09] * 200})
    d = difference(spread, zeros)
    assert d["se"] == pytest.approx(d["between_se"], rel=0.5) and d["se"] > 0.01
    with pytest.raises(ValueError, match="same held-out tasks"):
        difference(rows({0: [0.0] * 3}), rows({0: [0.0] * 4}))
    with pytest.raises(ValueError, match="share no seed"):
        difference(rows({0: [0.0]}), rows({1: [0.0]}))


def test_one_seed_is_never_called_and_says_what_would_decide_it():
    """The search routing table's case: +0.021 over 500 tasks, per-task SE ~0.007, which
    the old rule (2 x the larger SE, the seed SE being 0) called "ahead"."""
    a = rows({0: [0.021 + (0.15 if t % 2 else -0.15) for t in range(500)]})
    b = rows({0: [0.0] * 500})
    d = difference(a, b)
    assert d["verdict"] == NOT_CALLED and d["rule"] == "one seed"
    assert d["se"] == pytest.approx(0.15 * math.sqrt(500 / 499) / math.sqrt(500), rel=1e-6)
    # a lower bound from the per-task SE alone: the seed spread can only add to it
    assert d["lower_bound"] and d["seeds_to_separate"] == seeds_for(d["diff"], d["se"])
    cell = diff_cell(d)
    assert NOT_CALLED in cell and f"at least {d['seeds_to_separate']} seeds" in cell
    assert "ahead" not in cell and "behind" not in cell


def test_one_seed_can_be_called_against_a_measured_floor():
    floor = Floor.from_twin_gaps([0.012, -0.018, 0.015])      # sigma from 3 twin pairs
    assert floor.sigma == pytest.approx(math.sqrt((0.012**2 + 0.018**2 + 0.015**2) / 3 / 2))
    b = rows({0: [0.0] * 500})
    big = difference(rows({0: [0.2] * 500}), b, floor=floor)
    # two training runs differ with sd sqrt(2) sigma; the bar is t at 3 degrees of freedom
    assert big["rule"] == "one seed, floor" and big["bar"] == pytest.approx(3.18)
    assert big["se"] == pytest.approx(math.sqrt(2) * floor.sigma)
    assert big["verdict"] == "ahead"
    small = difference(rows({0: [0.03] * 500}), b, floor=floor)
    assert small["verdict"] == "within noise" and small["seeds_to_separate"] > 1
    # a run against its own fixed start spreads sigma, not sqrt(2) sigma
    gain = difference(rows({0: [0.03] * 500}), b, floor=floor, independent=False)
    assert gain["se"] == pytest.approx(floor.sigma)
    with pytest.raises(ValueError, match="at least 2 twin pairs"):
        Floor.from_twin_gaps([0.01])


def test_bar_is_t_for_few_seeds_and_two_for_many():
    assert bar(2) == pytest.approx(12.71) and bar(3) == pytest.approx(4.30)
    assert bar(50) == 2.0
    # sd 0.02 a seed: +0.01 needs many seeds, +0.05 few
    assert seeds_for(0.05, 0.02) < seeds_for(0.01, 0.02)


def test_task_difference_by_hand():
    before = {"per_task_avg": [0.0, 0.5, 0.25], "per_task_pass": [0.0, 1.0, 1.0]}
    after = {"per_task_avg": [0.5, 0.5, 0.75], "per_task_pass": [1.0, 1.0, 1.0]}
    d = task_difference(before, after)
    # differences 0.5, 0, 0.5: mean 1/3, sample std sqrt(1/12), se sqrt(1/12)/sqrt(3) = 1/6
    assert d["avg_at_k"] == pytest.approx(1 / 3)
    assert d["avg_at_k_stderr"] == pytest.approx(1 / 6)
    assert d["avg_at_k_z"] == pytest.approx(2.0)
    assert d["pass_at_k"] == pytest.approx(1 / 3) and d["tasks"] == 3
    assert cleared(d, 0.3, 1.9) and not cleared(d, 0.4, 1.9) and not cleared(d, 0.3, 2.1)
    with pytest.raises(ValueError, match="same tasks"):
        task_difference(before, {"per_task_avg": [0.0], "per_task_pass": [0.0]})


def test_contrast_within_one_evaluation():
    assert contrast(0.3, 0.1) == "higher" and contrast(-0.3, 0.1) == "lower"
    assert contrast(0.2, 0.1) == "within noise"
