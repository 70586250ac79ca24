"""Per-role sampling (``--role-sampling``): each role's temperature, top_p, length limit
and stop strings reach the sampler, the learner scores every row at its own role's
temperature (so the behaviour log-probs stay exact with two temperatures in one batch),
and the held-out evaluations can sample at a temperature of their own."""

import pytest
import torch

from srpo_agents.config import TrainConfig
from srpo_agents.learning.learner import Learner, LearnerConfig
from srpo_agents.learning.objective import ALGORITHMS
from srpo_agents.rollout.engine import RolloutEngine
from srpo_agents.rollout.sampling import Sampling
from srpo_agents.tiny import build_tiny_policy
from tests.test_learning import ALPHABET, LetterEnv, relay, say


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    prompts = [say(c) for c in ALPHABET] + [relay(c) for c in ALPHABET]
    return build_tiny_policy(prompts, tmp_path_factory.mktemp("tiny"), hidden_size=32,
                             num_layers=1, num_heads=2, seed=0)


def relay_rollouts(policy, role_sampling, n=16, max_new_tokens=6):
    engine = RolloutEngine(policy, max_new_tokens=max_new_tokens, seed=0,
                           role_sampling=role_sampling)
    envs = [LetterEnv("relay", seed=i) for i in range(n)]
    return engine, engine.run(envs, [{"task_index": i % 4, "episode_id": f"e{i}"}
                                     for i in range(n)])


def test_two_temperatures_in_one_batch_keep_the_behaviour_logprobs_exact(tiny):
    _, rollouts = relay_rollouts(tiny, {"caller": Sampling(0.5, max_new_tokens=6),
                                        "echo": Sampling(1.7, max_new_tokens=6)})
    samples = [s for r in rollouts for s in r.samples.values()]
    assert {s.role: s.temperature for s in samples} == {"caller": 0.5, "echo": 1.7}
    learner = Learner(tiny, ALGORITHMS["srpo"], LearnerConfig(temperature=1.0))
    with torch.no_grad():
        logp, mask, _ = learner.response_logprobs(tiny.model, samples)
    recorded = torch.zeros_like(logp)
    for i, s in enumerate(samples):
        recorded[i, :len(s.logprobs)] = torch.tensor(s.logprobs)
    assert float(((logp - recorded) * mask).abs().max()) < 1e-4
    # a control: scored at one temperature for every row, the callers' rows are off
    for s in samples:
        s.temperature = None
    with torch.no_grad():
        wrong, _, _ = learner.response_logprobs(tiny.model, samples)
    assert float(((wrong - recorded) * mask).abs().max()) > 1e-2


def test_each_role_keeps_its_length_limit_and_stop_strings(tiny):
    letters = "".join(ALPHABET)
    _, rollouts = relay_rollouts(tiny, {"caller": Sampling(1.0, max_new_tokens=2),
                                        "echo": Sampling(1.0, max_new_tokens=8,
                                                         stop=tuple(letters))})
    callers = [s for r in rollouts for s in r.samples.values() if s.role == "caller"]
    echoes = [s for r in rollouts for s in r.samples.values() if s.role == "echo"]
    assert max(len(s.response_ids) for s in callers) <= 2
    assert any(len(s.response_ids) == 2 for s in callers)
    stopped = [s for s in echoes if any(c in s.text for c in letters)]
    assert stopped, "no echo response named a letter: the stop test would be empty"
    for s in stopped:  # ends at the first token whose text holds a stop string
        assert s.finished and s.text[-1] in letters
        assert not any(c in tiny.decode(s.response_ids[:-1]) for c in letters)


def test_held_out_evaluations_sample_at_their_own_temperature(tiny):
    engine = RolloutEngine(tiny, temperature=1.0, role_sampling={"echo": Sampling(1.5)},
                           eval_temperature=0.0)
    assert engine.sampling_for("echo").temperature == 1.5
    with engine.evaluating():
        assert engine.sampling_for("echo").temperature == 0.0
        assert engine.sampling_for("caller").temperature == 0.0
    assert engine.sampling_for("caller") == engine.default_sampling


@pytest.mark.parametrize("value,message", [
    ({"judge": {"temperature": 0.5}}, r"role 'judge' is not a role of SRPO-Math-v0 "
                                      r"solve_verify"),
    ({"solver": {"temp": 0.5}}, r"role_sampling\['solver'\]=.*expected an object with keys"),
    ({"solver": {"temperature": 0}}, r"\['temperature'\]=0: expected a number > 0"),
    ({"solver": {"stop": "x"}}, r"\['stop'\]='x': expected a list of non-empty strings"),
])
def test_bad_role_sampling_is_named(value, message):
    with pytest.raises(ValueError, match=message):
        TrainConfig(env="SRPO-Math-v0", workflow="solve_verify", role_sampling=value)


def test_a_config_role_sampling_reaches_the_engine():
    from srpo_agents.rollout.engine import role_sampling

    config = TrainConfig(env="SRPO-Math-v0", workflow="solve_verify", temperature=0.9,
                         max_new_tokens=40, eval_temperature=0.3,
                         role_sampling={"verifier": {"temperature": 0.6, "stop": ["</v>"]}})
    assert role_sampling(config) == {"verifier": Sampling(0.6, 1.0, 40, ("</v>",))}
    with pytest.raises(ValueError, match=r"eval_temperature=-1: expected a number >= 0"):
        TrainConfig(eval_temperature=-1)
