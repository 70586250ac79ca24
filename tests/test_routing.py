"""Mode switching: the routed workflows, the team cost, the routing diagnostics, and a
router that learns, with the unchanged ``srpo`` algorithm, to pick one agent where one
suffices and a team where only a team succeeds."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from srpo_agents.config import TrainConfig
from srpo_agents.running.routing_stats import routing_summary
from srpo_agents.running.train import train
from srpo_agents.tiny import build_tiny_policy
from srpo_bench import router_task
from srpo_envs import math_v0, search_v0
from srpo_envs.math_tasks import MathTask
from srpo_envs.routing import Route, parse_route

ROOT = Path(__file__).resolve().parents[1]


# -- the route grammar ------------------------------------------------------------------
@pytest.mark.parametrize(("text", "route", "parsed"), [
    ("ROUTE: 3+verify", Route(3, True), True),
    ("route:2 + v", Route(2, True), True),
    ("I would say ROUTE: 1, no, ROUTE: 2", Route(2), True),    # the last one counts
    ("  3+v trailing words", Route(3, True), True),           # the bare form at the start
    ("2", Route(2), True),
    ("ROUTE: 4", Route(1), False),                            # K beyond K_max
    ("ROUTE: 0", Route(1), False),
    ("send it to 2 solvers", Route(1), False),                 # no ROUTE:, no number first
    ("", Route(1), False),
    (None, Route(1), False),
    ("ROUTE: 99999999999", Route(1), False),
])
def test_route_grammar(text, route, parsed):
    assert parse_route(text, 3, True, Route(1)) == (route, parsed)


def test_verify_is_ignored_where_no_verifier_is_offered():
    assert parse_route("ROUTE: 2+verify", 3, False, Route(1)) == (Route(2), True)


@pytest.mark.parametrize(("module", "kwargs", "message"), [
    (math_v0, {"workflow": "routed", "default_route": "ROUTE: 9"}, "default_route='ROUTE: 9'"),
    (math_v0, {"cost_per_token": -1.0}, "cost_per_token=-1.0"),
    (math_v0, {"cost_per_token": float("nan")}, "cost_per_token=nan"),
    (search_v0, {"cost_per_tool_call": -0.5}, "cost_per_tool_call=-0.5"),
    (search_v0, {"workflow": "routed", "default_route": "two"}, "default_route='two'"),
])
def test_bad_routing_config_names_the_field(module, kwargs, message):
    with pytest.raises(ValueError, match=message):
        module.parallel_env(**kwargs)


# -- the math routed workflow -----------------------------------------------------------
def play_math(route: str, verdict: str = "VERDICT: ACCEPT", **kwargs):
    env = math_v0.parallel_env(workflow="routed", n_solvers=3, seed=0, **kwargs)
    env.reset(options={"task": MathTask("t", "What is 2 + 3?", "5")})
    env.step({"router_0": route})
    while env.agents:
        env.step({a: verdict if env.roles[a] == "verifier" else "\\boxed{5}"
                  for a in env.due_agents})
    return env.transitions


@pytest.mark.parametrize(("route", "shape"), [
    ("ROUTE: 1", [("route", 1), ("solve", 1)]),
    ("ROUTE: 1+verify", [("route", 1), ("solve", 1), ("verify", 1)]),
    ("ROUTE: 3", [("route", 1), ("solve", 3), ("aggregate", 1)]),
    ("ROUTE: 2+verify", [("route", 1), ("solve", 2), ("aggregate", 1), ("verify", 1)]),
])
def test_math_router_schedules_the_chosen_set(route, shape):
    transitions = play_math(route)
    assert [(t.event_type, t.set_size) for t in transitions] == shape
    assert transitions[0].consumed[0].role == "router"
    assert transitions[0].info["route_parsed"] is True
    solve = transitions[1]
    assert [c.agent_id for c in solve.consumed] == [f"solver_{i}" for i in range(shape[1][1])]
    assert transitions[-1].terminated and transitions[-1].reward == 1.0
    expected = Route(shape[1][1], "verify" in route)
    assert all(t.info["route_k"] == expected.k and t.info["route_verify"] == expected.verify
               for t in transitions)


def test_unreadable_route_takes_the_default_and_is_counted():
    transitions = play_math("I am not sure", default_route="ROUTE: 2")
    assert [(t.event_type, t.set_size) for t in transitions][:2] == [("route", 1), ("solve", 2)]
    assert transitions[0].info["route_parsed"] is False
    assert transitions[0].info["route_failures"] == 1


def test_math_verifier_correction_replaces_the_answer():
    transitions = play_math("ROUTE: 1+verify", verdict="VERDICT: REJECT \\boxed{6}")
    assert transitions[-1].info["final_answer"] == "6" and transitions[-1].reward == 0.0


# -- the search routed workflow ---------------------------------------------------------
def test_search_router_chooses_the_searchers_of_each_round(tmp_path):
    env = search_v0.parallel_env(workflow="routed", n_searchers=3, seed=0, world="compact",
                                 hops=[1], top_k=1, max_turns=2, cache_dir=tmp_path)
    observations, _ = env.reset(options={"task_index": 0})
    assert env.due_agents == ("router_0",)
    assert "1 to 3" in observations["router_0"]
    task = env.current_task
    env.step({"router_0": "ROUTE: 3"})
    assert env.due_agents == ("searcher_0", "searcher_1", "searcher_2")
    env.step({a: "<search>nothing useful</search>" for a in env.due_agents})
    env.step({"aggregator_0": "<search>again</search>"})
    assert env.due_agents == ("router_0",)
    env.step({"router_0": "ROUTE: 1"})
    title = env.title_of(task.supporting_ids[0])
    env.step({"searcher_0": f"<search>{title}</search>"})
    env.step({"aggregator_0": f"<answer>{task.answers[0]}</answer>"})
    sizes = [(t.event_type, t.set_size) for t in env.transitions]
    assert sizes == [("route", 1), ("search", 3), ("aggregate", 1),
                     ("route", 1), ("search", 1), ("aggregate", 1)]
    assert [t.info.get("route_k") for t in env.transitions] == [3, 3, None, 1, 1, None]
    last = env.transitions[-1]
    assert last.reward == 1.0 and last.info["team_tool_calls"] == 4


@pytest.mark.parametrize("hops", [1, 2, 3])
def test_search_route_events_carry_the_hop_count(hops, tmp_path):
    """The routing table reads chosen K by hop count from the route events' level."""
    env = search_v0.parallel_env(workflow="routed", n_searchers=2, seed=0, world="compact",
                                 hops=[hops], top_k=1, max_turns=1, cache_dir=tmp_path)
    env.reset(options={"task_index": 0})
    assert len(env.current_task.supporting_ids) == hops
    env.step({"router_0": "ROUTE: 2"})
    assert env.transitions[0].info["level"] == hops
    rollouts = [SimpleNamespace(transitions=env.transitions, generated_tokens=0, right=right)
                for right in (True, False)]
    summary = routing_summary(rollouts, lambda rollout: rollout.right)
    assert summary["by_level"] == {str(hops): {"2": 2}}
    assert summary["level_accuracy"] == {str(hops): {"episodes": 2, "accuracy": 0.5}}


# -- the cost ---------------------------------------------------------------------------
def test_cost_is_off_by_default_and_reported_apart_when_on():
    free = play_math("ROUTE: 3")[-1]
    assert free.reward == 1.0 and free.info["cost"] == 0.0 and free.info["task_reward"] == 1.0
    # one "token" per output: router + 3 solvers + aggregator = 5
    paid = play_math("ROUTE: 3", cost_per_token=0.1, token_counter=lambda text: 1)[-1]
    assert paid.info["team_tokens"] == 5 and paid.info["task_reward"] == 1.0
    assert paid.info["cost"] == pytest.approx(0.5) and paid.reward == pytest.approx(0.5)
    alone = play_math("ROUTE: 1", cost_per_token=0.1, token_counter=lambda text: 1)[-1]
    assert alone.reward == pytest.approx(0.8)
    # only the last event pays
    assert all(t.reward == 0.0 for t in play_math("ROUTE: 3", cost_per_token=0.1)[:-1])


def test_search_tool_call_cost(tmp_path):
    env = search_v0.parallel_env(workflow="parallel", n_searchers=2, seed=0, world="compact",
                                 hops=[1], max_turns=1, cost_per_tool_call=0.25,
                                 cache_dir=tmp_path)
    env.reset(options={"task_index": 0})
    env.step({"searcher_0": "<search>a</search>", "searcher_1": "<search>b</search>"})
    env.step({"aggregator_0": f"<answer>{env.current_task.answers[0]}</answer>"})
    last = env.transitions[-1]
    assert last.info["task_reward"] == 1.0 and last.info["cost"] == 0.5
    assert last.reward == 0.5


def test_train_config_routes_cost_to_the_env_and_checks_it():

    config = TrainConfig(workflow="routed", model="x", cost_per_token=0.01)
    assert config.env_kwargs("train", len)["cost_per_token"] == 0.01
    assert config.env_kwargs("train", len)["token_counter"] is len
    with pytest.raises(ValueError, match="cost_per_tool_call=0.1"):
        TrainConfig(model="x", cost_per_tool_call=0.1)
    with pytest.raises(ValueError, match="cost_per_token=-1"):
        TrainConfig(model="x", cost_per_token=-1)


# -- the learner is unchanged -----------------------------------------------------------
def test_the_learner_has_no_routed_branch():
    """Routing is trained by the one update rule: the modules that form units, compute
    advantages and update never mention routes."""
    for name in ("learning/learner.py", "learning/objective.py", "learning/events.py",
                 "rollout/engine.py", "rollout/generation.py", "rollout/hf_generator.py",
                 "rollout/vllm_generator.py", "rollout/sampling.py"):
        text = (ROOT / "srpo_agents" / name).read_text().lower()
        assert "route" not in text and "router" not in text, name


# -- a router that must learn when a team is needed (srpo_bench/router_task.py) ---------
@pytest.fixture(scope="module")
def uniform_router(tmp_path_factory):
    """A fresh tiny policy whose router picks K = 1, 2 or 3 uniformly on both levels."""
    return router_task.uniform_router(tmp_path_factory.mktemp("tiny"))


def test_router_learns_one_agent_for_easy_and_a_team_for_hard(uniform_router):
    """On at least 2 of 3 seeds. One trajectory is not a verdict here: the start weights
    moved by 1e-7 (as float rounding moves them between processes: the same seed failed
    in one process and passed in another) left hard tasks on K = 1 in 1 of 8 tries
    (issue 64), which one seed would have called a failure of the rule."""
    share = router_task.share
    learned = {}
    for seed in (0, 1, 2):
        start, end = router_task.train_router(copy.deepcopy(uniform_router), seed)
        assert share(start["easy"], [1]) < 0.55 and share(start["hard"], [2, 3]) < 0.85, (
            start, "the start is not near uniform")
        learned[seed] = (router_task.learned(start, end), start, end)
    assert sum(ok for ok, _, _ in learned.values()) >= 2, learned


# -- the diagnostics, end to end ---------------------------------------------------------
@pytest.mark.parametrize("per_role", [False, True])
def test_routed_training_run_reports_routing(tmp_path, per_role):
    """A routed run writes the routing figures every step; with ``per_role_policies``
    the router is its own policy."""
    env = math_v0.parallel_env(workflow="parallel", seed=0)
    texts = [env.task(i).question + env.task(i).solution for i in range(100)] + ["ROUTE: 123+v"]
    tiny = tmp_path / "tiny"
    build_tiny_policy(texts, tiny, hidden_size=32, num_layers=1, num_heads=2, seed=0)
    config = TrainConfig(env="SRPO-Math-v0", workflow="routed", n_agents=3,
                         model=str(tiny), compact_prompts=True, steps=2, group_size=2,
                         tasks_per_step=3, eval_tasks=3, eval_k=2, max_new_tokens=8,
                         cost_per_token=0.001, per_role_policies=per_role,
                         out=str(tmp_path / "run"))
    summary = train(config, log=lambda *_: None)
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text()
            .splitlines()]
    for row in rows:
        counts = row["route_k_counts"]
        assert sum(counts.values()) == 6 and set(counts) <= {"1", "2", "3"}
        assert sum(v["episodes"] for v in row["by_route_k"].values()) == 6
        assert 1 <= row["route_mean_k"] <= 3 and row["mean_set_size"] >= 1
    held_out = summary["after"]["routing"]
    # every held-out episode (3 tasks x k = 2) was routed, and an unreadable reply is one
    # of the routes counted (it took the default route), never an extra one
    assert sum(v["episodes"] for v in held_out["by_route_k"].values()) == 6
    assert held_out["route_parse_failures"] <= sum(held_out["route_k_counts"].values())
    assert (tmp_path / "run" / "routing.png").is_file()
    assert (tmp_path / "run" / "policy-router").is_dir() == per_role
    assert np.isfinite(rows[-1]["reward"])
