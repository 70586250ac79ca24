"""The libraries' own checks on every registered env and workflow: PettingZoo's seed tests
(parallel and AEC) and API test, Gymnasium's env checker and async vector env, and a
``Transition`` that survives pickling and deep copies (how it crosses processes)."""

import copy
import dataclasses
import pickle

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from pettingzoo.test import parallel_api_test, parallel_seed_test, seed_test
from pettingzoo.utils.conversions import parallel_to_aec

import srpo_envs
from srpo_envs import registry
from srpo_envs.registry import RunSettings
from srpo_envs.transition import ConsumedOutput, Transition

CASES = [(spec.name, workflow) for spec in registry.specs() for workflow in spec.workflows]
ENV_IDS = sorted({env_id for env_id, _ in CASES})


@pytest.fixture(autouse=True)
def index_cache(tmp_path_factory, monkeypatch):
    """One retrieval index cache for the module (the search env builds its BM25 index
    once); set in the environment so async vector env workers see it too."""
    monkeypatch.setenv("SRPO_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "index-cache"))


def _kwargs(env_id, workflow):
    # A run's own constructor arguments (EnvSpec.kwargs), at small settings.
    return registry.get(env_id).kwargs(RunSettings(workflow=workflow, n_agents=2,
                                                   max_turns=2))


def _make(env_id, workflow, **extra):
    return registry.get(env_id).make(**_kwargs(env_id, workflow), **extra)


def test_every_builtin_env_is_covered():
    assert {"SRPO-Math-v0", "SRPO-Search-v0", "SRPO-Countdown-v0"} <= set(ENV_IDS)
    assert len(CASES) >= 10


@pytest.mark.parametrize(("env_id", "workflow"), CASES)
def test_spaces_are_one_object_per_agent_and_env(env_id, workflow):
    env, other = _make(env_id, workflow), _make(env_id, workflow)
    agents = env.possible_agents
    for agent in agents:
        # PettingZoo expects the same object on every call...
        assert env.action_space(agent) is env.action_space(agent)
        assert env.observation_space(agent) is env.observation_space(agent)
        # ...and no object shared with another agent or env, whose seeding would reseed it.
        assert env.action_space(agent) is not other.action_space(agent)
        assert env.observation_space(agent) is not env.action_space(agent)
    assert len({id(env.action_space(a)) for a in agents}) == len(agents)
    first = agents[0]
    env.action_space(first).seed(7)
    expected = env.action_space(first).sample()
    env.action_space(first).seed(7)
    other.action_space(first).seed(8)
    other.action_space(first).sample()
    assert env.action_space(first).sample() == expected


@pytest.mark.parametrize(("env_id", "workflow"), CASES)
def test_pettingzoo_parallel_seed_and_api_tests(env_id, workflow):
    parallel_seed_test(lambda: _make(env_id, workflow), num_cycles=10)
    parallel_api_test(_make(env_id, workflow, seed=0), num_cycles=10)


@pytest.mark.parametrize(("env_id", "workflow"), CASES)
def test_pettingzoo_aec_seed_test(env_id, workflow):
    seed_test(lambda: parallel_to_aec(_make(env_id, workflow)), num_cycles=10)


@pytest.mark.parametrize(("env_id", "workflow"), CASES)
def test_gymnasium_check_env(env_id, workflow):
    env = gym.make(env_id, **_kwargs(env_id, workflow))
    check_env(env.unwrapped, skip_render_check=True)


def _transitions():
    nested = Transition(
        episode_id="ep-1", task_id="t-1", step_index=0, event_type="solve",
        pre_state_id="abc", consumed=(ConsumedOutput("solver_0", "solver", "2+2?", "4"),),
        expected_agents=("solver_0", "solver_1"), reward=0.5, terminated=False,
        truncated=False, info={"correct": True, "scores": [1, 2.5], "sub": {"k": ["x"]},
                               "pair": (1, {"y": None})})
    env = _make("SRPO-Countdown-v0", "parallel", seed=0)
    env.reset(seed=0)
    while env.agents:
        env.step({a: "1 + 2" for a in env.due_agents})
    return [nested, *env.transitions]


def test_transition_pickles_and_deep_copies_and_stays_read_only():
    for transition in _transitions():
        for clone in (pickle.loads(pickle.dumps(transition)), copy.deepcopy(transition),
                      copy.copy(transition)):
            assert clone == transition and clone is not transition
            assert clone.to_dict() == transition.to_dict()
            assert clone.info == transition.info
            assert pickle.loads(pickle.dumps(clone.info)) == transition.info
        with pytest.raises(TypeError):
            transition.info["correct"] = False
        with pytest.raises(dataclasses.FrozenInstanceError):
            transition.reward = 2.0
    nested = _transitions()[0]
    clone = copy.deepcopy(nested)
    with pytest.raises(TypeError):
        clone.info["sub"]["k"] = "changed"
    assert clone.info["scores"] == (1, 2.5) and clone.info["pair"][1]["y"] is None
    assert Transition.from_dict(clone.to_dict()) == nested


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_gymnasium_async_vector_env_steps(env_id):
    gym.register_envs(srpo_envs)
    spec = registry.get(env_id)
    envs = gym.make_vec(env_id, num_envs=2, vectorization_mode="async",
                        **_kwargs(env_id, spec.workflows[0]))
    try:
        envs.action_space.seed(0)
        observations, _ = envs.reset(seed=0)
        assert observations["due"].shape == (2, len(spec.make(**_kwargs(
            env_id, spec.workflows[0])).possible_agents))
        transitions = []
        for _ in range(6):
            observations, rewards, terminated, truncated, infos = envs.step(
                envs.action_space.sample())
            assert rewards.shape == terminated.shape == (2,)
            transitions += [t for t in infos.get("transition", ()) if t is not None]
        # the workers' transitions came back through a pipe: pickled and equal in kind
        assert transitions and all(isinstance(t, Transition) for t in transitions)
        assert all(np.isfinite(t.reward) for t in transitions)
    finally:
        envs.close()
