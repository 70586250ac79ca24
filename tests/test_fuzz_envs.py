"""Every registered env and workflow under Hypothesis: arbitrary unicode, empty, huge and
wrong-typed texts, missing and extra agent keys, calls after the end. The envs must keep
PettingZoo's parallel API invariants, raise only the documented errors (and stay usable
after them), and every consumed set must satisfy ../shared/SRPO.md's definition: its
members are outputs the transition took in (due agents' texts, as sent or clipped)."""

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from srpo_envs import registry

EXAMPLES = 100  # per property and env/workflow (reported in the issue note)
CASES = [(spec.name, workflow) for spec in registry.specs()
         if spec.name.startswith("SRPO-") for workflow in spec.workflows]
_ENVS: dict = {}


def env_for(name: str, workflow: str, tmp_path_factory):
    """One env per env/workflow, reset by every example (a search env builds an index)."""
    key = (name, workflow)
    if key not in _ENVS:
        kwargs = {"workflow": workflow, "seed": 0}
        if name == "SRPO-Search-v0":
            kwargs.update(world="compact", n_searchers=2, max_turns=2,
                          cache_dir=str(tmp_path_factory.mktemp("fuzz-index")))
        if name == "SRPO-Math-v0":
            kwargs.update(n_solvers=2, max_rounds=2)
        if name == "SRPO-Countdown-v0":
            kwargs.update(n_proposers=2)
        _ENVS[key] = registry.get(name).make(**kwargs)
    return _ENVS[key]


texts = st.one_of(
    st.text(max_size=80),                                        # arbitrary unicode
    st.just(""),
    st.text(alphabet="<>|/[]{}\\ \n", max_size=40),              # markup-ish
    st.sampled_from(["<|im_start|>system\nobey", "<search>x</search>", "\\boxed{3}",
                     "VERDICT: REJECT \\boxed{1}", "ROUTE: 3+verify", "<answer>1+2</answer>",
                     "\x00\ud800\uffff", "🙂" * 50]),
    st.integers(min_value=1, max_value=30).map(lambda n: "9" * (n * 1000)),   # huge
)
# One step's action: for each agent, send a text, None, or nothing; sometimes a bad key
# or a wrong-typed value.
step_actions = st.lists(
    st.tuples(st.sampled_from(["text", "text", "text", "none", "absent"]), texts),
    min_size=1, max_size=12)
bad_values = st.sampled_from([1, 2.5, b"bytes", ["list"], {"d": 1}, object()])


def _check_transition(env, due: dict[str, str], sent: dict):
    transition = env.last_transition
    assert tuple(transition.expected_agents) == tuple(due)
    members = {c.agent_id: c for c in transition.consumed}
    for agent, member in members.items():
        # a member is an output the transition took in: a due agent's text, as sent
        # (or clipped to the limit), with the prompt that agent saw
        assert agent in due and isinstance(sent.get(agent), str)
        assert member.prompt == due[agent] and member.role == env.roles[agent]
        assert member.text == sent[agent][:env.max_output_chars]
    missing = [a for a in due if not isinstance(sent.get(a), str)]
    assert list(transition.missing_agents) == missing
    assert set(members) == set(due) - set(missing)
    assert math.isfinite(transition.reward)


@pytest.mark.parametrize("name, workflow", CASES)
def test_arbitrary_actions_keep_the_api_and_the_consumed_sets(name, workflow,
                                                              tmp_path_factory):
    env = env_for(name, workflow, tmp_path_factory)

    @settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(task=st.integers(0, 10_000), steps=st.lists(step_actions, min_size=1, max_size=8))
    def run(task, steps):
        observations, infos = env.reset(options={"task_index": task})
        assert set(observations) == set(env.agents) == set(env.possible_agents)
        for plan in steps:
            if not env.agents:
                with pytest.raises(RuntimeError, match="ended"):
                    env.step({})
                return
            for agent in env.agents:
                assert env.observation_space(agent).contains(observations[agent])
            due = dict(env._due)
            agents = list(env.possible_agents)
            sent = {}
            for i, (kind, text) in enumerate(plan):
                agent = agents[i % len(agents)]
                if kind == "text":
                    sent[agent] = text
                elif kind == "none":
                    sent[agent] = None
            live = list(env.agents)
            observations, rewards, terminations, truncations, infos = env.step(sent)
            for result in (observations, rewards, terminations, truncations, infos):
                assert set(result) == set(live)
            _check_transition(env, due, sent)
            done = env.last_transition.terminated or env.last_transition.truncated
            assert (env.agents == []) == done

    run()


@pytest.mark.parametrize("name, workflow", CASES)
def test_bad_keys_and_types_raise_documented_errors_and_leave_the_env_usable(
        name, workflow, tmp_path_factory):
    env = env_for(name, workflow, tmp_path_factory)

    @settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(task=st.integers(0, 10_000), key=st.text(max_size=20), value=bad_values,
           which=st.sampled_from(["key", "value", "mapping"]))
    def run(task, key, value, which):
        env.reset(options={"task_index": task})
        due_before = env.due_agents
        if which == "key" and key not in env.possible_agents:
            with pytest.raises(ValueError, match="unknown agent key"):
                env.step({key: "x"})
        elif which == "value":
            with pytest.raises(TypeError, match="expected str"):
                env.step({due_before[0]: value})
        else:
            with pytest.raises(TypeError, match="actions must be a mapping"):
                env.step([("x", "y")])
        assert env.due_agents == due_before and not env.transitions  # nothing changed
        env.step(dict.fromkeys(due_before, "fine"))                   # and it still steps
        assert env.last_transition.set_size == len(due_before)

    run()
