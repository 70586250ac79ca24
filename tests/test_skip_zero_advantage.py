"""``skip_zero_advantage``: units of advantage 0 (a group all right or all wrong) leave
the update's passes. Every built-in loss is linear in the advantage, so the gradient each
optimizer step takes must be the full update's, for set, token and REINFORCE losses,
over several mini-batches and epochs, and the passes must really shrink."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from srpo_agents.learning.events import build_units
from srpo_agents.learning.learner import Learner, LearnerConfig
from srpo_agents.learning.objective import ALGORITHMS
from srpo_agents.models.policy import load_policy

from .test_learner import rollouts_for


def _update(policy, units, advantages, algo: str, skip: bool, **config):
    learner = Learner(policy, ALGORITHMS[algo],
                      # no gradient clip: it would rescale a wrongly scaled gradient
                      LearnerConfig(lr=1e-3, microbatch_rows=4, skip_zero_advantage=skip,
                                    max_grad_norm=1e9, **config), seed=3)
    grads, rows, step = [], [], learner.optimizer.step
    score = learner.response_logprobs

    def counting(model, samples, *args, **kwargs):   # rows each pass scores
        rows.append(len(samples))
        return score(model, samples, *args, **kwargs)

    def recording_step(*args, **kwargs):   # the summed gradients the step is taken on
        grads.append([p.grad.detach().clone() for p in policy.model.parameters()])
        return step(*args, **kwargs)

    learner.optimizer.step = recording_step
    learner.response_logprobs = counting
    figures = learner.update(units, advantages)
    return figures, grads, sum(rows)


def _zeroed(units) -> np.ndarray:
    """Advantages of +-1 with every third unit's 0 (and one whole mini-batch's worth in
    a row, so some optimizer step may see no unit at all)."""
    advantages = np.array([1.0 if i % 2 else -1.0 for i in range(len(units))])
    advantages[::3] = 0.0
    advantages[:4] = 0.0
    return advantages


@pytest.mark.parametrize(("algo", "config"), [
    ("srpo", {}),
    ("grpo", {"epochs": 2, "minibatch_episodes": 2}),
    ("magrpo", {"pi_old": "learner"}),
    ("srpo", {"epochs": 2, "minibatch_episodes": 2, "pi_old": "learner"}),
])
def test_the_update_is_the_same_without_the_zero_units(math_tiny_dir, algo, config):
    base = load_policy(str(math_tiny_dir))
    units, _ = build_units(rollouts_for(base, n_tasks=3, group=4), ALGORITHMS[algo].unit)
    advantages = _zeroed(units)
    full, skipping = copy.deepcopy(base), copy.deepcopy(base)
    full_figures, full_grads, full_rows = _update(full, units, advantages, algo, False,
                                                  **config)
    figures, grads, rows = _update(skipping, units, advantages, algo, True, **config)
    assert rows < full_rows          # the zero units' passes were left out
    # float32 round-off, relative: REINFORCE's loss is a sum of log-probs (about 2.5)
    assert figures["loss"] == pytest.approx(full_figures["loss"], rel=1e-5, abs=1e-6)
    if "epochs" not in config:  # one pass on policy: every ratio is 1 up to round-off
        # The figures average over the units that ran (a real run logged ratio_mean 0.25
        # with 3 in 4 units left out, when they counted as 0s).
        assert figures["ratio_mean"] == pytest.approx(1.0, abs=1e-3)
        assert full_figures["ratio_mean"] == pytest.approx(1.0, abs=1e-3)
    assert len(grads) == len(full_grads) == (config.get("epochs", 1) if not
                                            config.get("minibatch_episodes") else len(grads))
    assert len(grads) >= 1
    for step, (step_grads, full_step) in enumerate(zip(grads, full_grads, strict=True)):
        # round-off is relative to the step's gradients: a key bias's true gradient is 0
        # (softmax ignores a shift shared by every key), so its own scale is round-off.
        # The first step's is the sums' order (the zero units leave, so micro-batches
        # regroup: 2e-7 of the scale); Adam's steps then turn it into weights that differ
        # by round-off, and later gradients by a few 1e-6 of the scale (grpo's second
        # step read 4.2e-6). A wrongly weighted gradient is off by a tenth or more.
        scale = max(float(a.abs().max()) for a in full_step)
        atol = (1e-6 if step == 0 else 2e-5) * scale
        for (name, _), a, b in zip(full.model.named_parameters(), full_step, step_grads,
                                   strict=True):
            torch.testing.assert_close(b, a, rtol=1e-4, atol=atol, msg=name)


def test_a_kl_term_keeps_every_unit(math_tiny_dir):
    """With beta > 0 a zero-advantage unit still pulls towards the reference."""
    base = load_policy(str(math_tiny_dir))
    units, _ = build_units(rollouts_for(base, n_tasks=2, group=4), "set")
    advantages = _zeroed(units)
    _, _, plain_rows = _update(copy.deepcopy(base), units, advantages, "srpo", False,
                               beta=0.1)
    _, _, rows = _update(copy.deepcopy(base), units, advantages, "srpo", True, beta=0.1)
    assert rows == plain_rows
