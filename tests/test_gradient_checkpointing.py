"""``--gradient-checkpointing``: transformers recomputes a decoder layer in the backward
only in train mode, so the learner scores in train mode with every dropout set to 0. The
update must be the eval-mode update's (same loss and weights), the layers must really be
recomputed, and a model whose attention has dropout must still start at ratio 1."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from srpo_agents.learning.events import build_units
from srpo_agents.learning.learner import Learner, LearnerConfig, disable_dropout
from srpo_agents.learning.objective import ALGORITHMS
from srpo_agents.models.policy import load_policy

from .test_learner import forced_advantages, rollouts_for


def _with_dropout(policy, rate: float = 0.5):
    """The tiny model with attention dropout, as some checkpoints ship (train mode with
    it on would make the first ratio a dropout sample)."""
    for module in policy.model.modules():
        if isinstance(getattr(module, "attention_dropout", None), float):
            module.attention_dropout = rate
    return policy


def _update(policy, units, advantages, checkpointing: bool):
    torch.manual_seed(0)
    learner = Learner(policy, ALGORITHMS["srpo"],
                      LearnerConfig(lr=1e-3, pi_old="learner", microbatch_rows=8,
                                    gradient_checkpointing=checkpointing))
    # the first layer's parts run inside its checkpointed forward (its own hooks do not)
    parts = list(policy.model.model.layers[0].children())
    calls, backward = [], torch.Tensor.backward   # the layer's calls: in a backward?
    state = {"in_backward": False}

    def marked_backward(self, *args, **kwargs):
        state["in_backward"] = True
        try:
            return backward(self, *args, **kwargs)
        finally:
            state["in_backward"] = False

    grads, step = [], learner.optimizer.step

    def recording_step(*args, **kwargs):   # the summed gradients the step is taken on
        grads.append([p.grad.detach().clone() for p in policy.model.parameters()])
        return step(*args, **kwargs)

    learner.optimizer.step = recording_step
    handles = [part.register_forward_hook(lambda *_: calls.append(state["in_backward"]))
               for part in parts]
    torch.Tensor.backward = marked_backward
    try:
        figures = learner.update(units, advantages)
    finally:
        for handle in handles:
            handle.remove()
        torch.Tensor.backward = backward
    return figures, calls, grads


def test_a_checkpointed_update_is_the_plain_update(math_tiny_dir):
    base = _with_dropout(load_policy(str(math_tiny_dir)))
    units, _ = build_units(rollouts_for(base, n_tasks=4, group=4), "set")
    advantages = forced_advantages(units)
    plain, checkpointed = copy.deepcopy(base), copy.deepcopy(base)
    plain_figures, plain_calls, plain_grads = _update(plain, units, advantages, False)
    figures, calls, grads = _update(checkpointed, units, advantages, True)
    # the layer ran again inside the backward, and only when checkpointed
    assert sum(calls) > 0 and sum(plain_calls) == 0
    assert not checkpointed.model.training   # put back in the mode it came in
    # dropout is off for good: the first step starts at ratio 1 and the update is the same
    assert figures["first_epoch_max_abs_log_ratio"] <= 1e-6
    assert figures["loss"] == pytest.approx(plain_figures["loss"], abs=1e-6)
    # the gradients each optimizer step took agree to float round-off (the plain update
    # shares prompt passes, so it rounds differently); the weights after AdamW are not
    # compared: it turns a near-zero gradient's round-off into a whole step of lr
    assert len(grads) == len(plain_grads) > 0
    for step_grads, plain_step in zip(grads, plain_grads, strict=True):
        for (name, _), a, b in zip(plain.model.named_parameters(), plain_step, step_grads,
                                   strict=True):
            torch.testing.assert_close(b, a, rtol=1e-3, atol=1e-6 * float(a.abs().max()),
                                       msg=name)


def test_train_mode_with_dropout_on_would_not_start_at_one(math_tiny_dir):
    """The control: the same model scored in train mode with its dropout left on."""
    policy = _with_dropout(load_policy(str(math_tiny_dir)))
    units, _ = build_units(rollouts_for(policy, n_tasks=2, group=4), "set")
    learner = Learner(policy, ALGORITHMS["srpo"], LearnerConfig(lr=1e-3, pi_old="learner"))
    policy.model.train()
    samples = [m for unit in units for m in unit.members]
    with torch.no_grad():
        first, mask, _ = learner.response_logprobs(policy.model, samples)
        again, _, _ = learner.response_logprobs(policy.model, samples)
    assert float(((first - again) * mask).abs().max()) > 1e-3
    disable_dropout(policy.model)
    with torch.no_grad():
        first, _, _ = learner.response_logprobs(policy.model, samples)
        again, _, _ = learner.response_logprobs(policy.model, samples)
    assert np.array_equal(first.numpy(), again.numpy())
