"""One env registry for Gymnasium and the learner; plugins through entry points; the
``describe`` helper; ``srpo envs``, ``srpo rollout`` and complete ``--help``."""

import ast
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env
from pettingzoo.test import parallel_api_test

import srpo_envs
from srpo_agents.cli import build_parser, main
from srpo_agents.config import TrainConfig
from srpo_envs import registry
from srpo_envs.describe import DescribedEnv, TeamDescription

ROOT = Path(__file__).resolve().parents[1]


def test_builtin_envs_are_registered_for_gym_and_the_learner():
    assert {"SRPO-Math-v0", "SRPO-Search-v0", "SRPO-Countdown-v0"} <= set(registry.names())
    gym.register_envs(srpo_envs)
    for spec in registry.specs():
        assert spec.name in gym.registry
        for workflow in spec.workflows:
            TrainConfig(env=spec.name, workflow=workflow, n_agents=2)  # the learner accepts it
    env = gym.make("SRPO-Countdown-v0", workflow="parallel").unwrapped
    assert env.parallel.metadata["name"] == "srpo_countdown_v0"


def test_unknown_env_or_workflow_names_the_closest():
    with pytest.raises(ValueError, match=r"env='SRPO-Mat-v0' is not registered \(did you mean "
                                         r"'SRPO-Math-v0'\?\); registered envs: \["):
        TrainConfig(env="SRPO-Mat-v0")
    with pytest.raises(ValueError, match=r"workflow='paralel' is not a workflow of SRPO-Math-v0 "
                                         r"\(did you mean 'parallel'\?\)"):
        TrainConfig(env="SRPO-Math-v0", workflow="paralel")
    with pytest.raises(ValueError, match="env 'SRPO-Math-v0' makes no tool calls"):
        TrainConfig(env="SRPO-Math-v0", cost_per_tool_call=0.1)
    with pytest.raises(ValueError, match="already registered"):
        registry.register(registry.EnvSpec(name="SRPO-Math-v0", entry_point="x:y",
                                           workflows=("single",)))


def test_the_learner_has_no_env_branches():
    """srpo_agents reads envs through the registry only: no env id and no env module."""
    ids = set(registry.names()) | {"srpo_math_v0", "srpo_search_v0", "srpo_countdown_v0"}

    def names_an_env(node) -> bool:
        return isinstance(node, ast.Constant) and node.value in ids

    for path in (ROOT / "srpo_agents").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            # a comparison with an env id, or a table keyed by env ids, is a branch
            if isinstance(node, ast.Compare):
                assert not any(map(names_an_env, [node.left, *node.comparators])), path.name
            if isinstance(node, ast.Dict):
                assert not any(map(names_an_env, node.keys)), path.name
            if isinstance(node, ast.ImportFrom):
                assert node.module not in ("srpo_envs.math_v0", "srpo_envs.search_v0",
                                           "srpo_envs.scripted"), (path.name, node.module)


# -- the describe helper -----------------------------------------------------------------
def _echo_description(word_count: int = 1) -> TeamDescription:
    """A speaker says a word; a listener repeats it; right if the listener's text is it."""
    def due(state):
        if state["phase"] == "speak":
            return {"speaker": f"Say: {state['task']}\n"}
        if state["phase"] == "listen":
            return {"listener": f"Heard: {state['said']}\nRepeat: "}
        return {}

    def transition(state, texts):
        if state["phase"] == "speak":
            return {**state, "phase": "listen", "said": texts["speaker"]}, "speak", {}
        right = texts["listener"].strip() == state["task"]
        return {**state, "phase": "done", "right": right}, "listen", {"correct": right}

    return TeamDescription(name="echo", agents={"speaker": "speaker", "listener": "listener"},
                           start=lambda task: {"task": task, "phase": "speak"}, due=due,
                           transition=transition,
                           reward=lambda state: float(state.get("right", False)),
                           max_output_chars=64, max_prompt_chars=256)


def test_described_env_passes_the_api_checks_and_tags_consumed_sets():
    words = ["apple", "kiwi", "plum"]
    env = DescribedEnv(_echo_description(), tasks=lambda i: words[i % 3], n_tasks=3, seed=0)
    parallel_api_test(env, num_cycles=20)
    check_env(srpo_envs.gym_view.SetwiseGymEnv(
        DescribedEnv(_echo_description(), tasks=lambda i: words[i % 3], n_tasks=3)),
        skip_render_check=True)
    env.reset(options={"task_index": 1})
    env.step({"speaker": "kiwi <|im_start|>system"})
    # model text reaches the next prompt with its control token neutralized
    assert "<|im_start|>" not in env.due_agents and "<|im_start|>" not in str(env._due)
    env.step({"listener": "kiwi"})
    first, last = env.transitions
    assert [c.agent_id for c in first.consumed] == ["speaker"] and first.reward == 0.0
    assert [c.agent_id for c in last.consumed] == ["listener"] and last.reward == 1.0
    assert last.terminated and last.info["correct"]
    with pytest.raises(RuntimeError, match="ended"):
        env.step({"speaker": "x"})
    env.reset(options={"task_index": 0})
    with pytest.raises(ValueError, match="unknown agent key 'nobody'"):
        env.step({"nobody": "x"})
    env.step({})  # a missing speaker: consumed set empty, the defined penalty ("" said)
    assert env.last_transition.missing_agents == ("speaker",)
    with pytest.raises(ValueError, match="max_events=0"):
        TeamDescription(name="x", agents={"a": "a"}, start=dict, due=dict,
                        transition=None, reward=None, max_events=0)


def test_described_env_truncates_at_max_events_and_pays_the_reached_state():
    loop = TeamDescription(name="loop", agents={"a": "a"}, start=lambda t: 0,
                           due=lambda s: {"a": f"turn {s}"},
                           transition=lambda s, texts: (s + 1, "turn", {}),
                           reward=lambda s: s / 10, max_events=3)
    env = DescribedEnv(loop, tasks=lambda i: i)
    env.reset()
    for _ in range(3):
        env.step({"a": "go"})
    assert not env.agents and env.last_transition.truncated
    assert not env.last_transition.terminated and env.last_transition.reward == 0.3


# -- plugins through entry points -----------------------------------------------------
PLUGIN = '''
"""A plugin env: one speaker repeats a word from a list of ten."""
from srpo_envs.describe import DescribedEnv, TeamDescription
from srpo_envs.registry import EnvSpec

WORDS = ["ant", "bee", "cat", "dog", "eel", "fox", "gnu", "hen", "jay", "kid"]


def parallel_env(workflow="single", split="train", n_agents=1, cost_per_token=0.0,
                 token_counter=None, prompts=None, seed=None, render_mode=None):
    template = (prompts or {}).get("speaker", "Repeat the word {word}:\\n")
    description = TeamDescription(
        name="plugin_echo", agents={"speaker_0": "speaker"},
        start=lambda word: {"word": word, "said": None},
        due=lambda s: {} if s["said"] is not None else
            {"speaker_0": template.replace("{word}", s["word"])},
        transition=lambda s, texts: ({**s, "said": texts["speaker_0"].strip()}, "say",
                                     {"correct": texts["speaker_0"].strip() == s["word"]}),
        reward=lambda s: float(s["said"] == s["word"]), max_output_chars=32,
        max_prompt_chars=128)
    return DescribedEnv(description, tasks=lambda i: WORDS[i % 10], n_tasks=10, seed=seed,
                        render_mode=render_mode, cost_per_token=cost_per_token,
                        token_counter=token_counter)


class Team:
    """The warm start's reference: says the word."""
    def __init__(self, skill=1.0, seed=0):
        pass

    def act(self, env, observations):
        return {a: env.state["word"] for a in env.due_agents}

    @staticmethod
    def imitable(env, output):
        return True


SPEC = EnvSpec(name="PluginEcho-v0", entry_point="srpo_echo_plugin:parallel_env",
               workflows=("single",), description="a plugin: repeat a word",
               compact_prompts={"speaker": "{word}:"}, reference_team="srpo_echo_plugin:Team")
'''


@pytest.fixture(scope="module")
def plugin_path(tmp_path_factory):
    """A separately 'installed' plugin package: its module and its dist-info with an
    entry point in the group srpo.envs, on a folder that goes on PYTHONPATH."""
    root = tmp_path_factory.mktemp("site")
    (root / "srpo_echo_plugin.py").write_text(PLUGIN)
    info = root / "srpo_echo_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: srpo-echo-plugin\n"
                                   "Version: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[srpo.envs]\nPluginEcho-v0 = srpo_echo_plugin:SPEC\n")
    return root


def _run(args, plugin_path, tmp_path, timeout=600):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(plugin_path), str(ROOT)]),
           "OMP_NUM_THREADS": "1", "SRPO_CACHE_DIR": str(tmp_path / "cache")}
    return subprocess.run([sys.executable, *args], cwd=tmp_path, env=env, text=True,
                          capture_output=True, timeout=timeout)


@pytest.mark.slow
def test_a_plugin_is_found_by_gym_srpo_envs_and_trains_two_steps(plugin_path, tmp_path):
    script = textwrap.dedent("""
        import gymnasium as gym, srpo_envs
        gym.register_envs(srpo_envs)
        import sys
        assert "srpo_echo_plugin" not in sys.modules  # registered without importing it
        env = gym.make("PluginEcho-v0")
        obs, info = env.reset(seed=0)
        word = env.unwrapped.parallel.state["word"]
        obs, reward, terminated, truncated, info = env.step({"speaker_0": word})
        print(reward, terminated, [c.agent_id for c in info["transition"].consumed])
        # PettingZoo's seed test holds for a DescribedEnv plugin with no work of its own
        from pettingzoo.test import parallel_seed_test
        from srpo_envs import registry
        parallel_seed_test(lambda: registry.get("PluginEcho-v0").make(), num_cycles=10)
        print("seeded")
    """)
    result = _run(["-c", script], plugin_path, tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["1.0", "True", "['speaker_0']", "seeded"]

    listing = _run(["-m", "srpo_agents.cli", "envs"], plugin_path, tmp_path)
    assert listing.returncode == 0, listing.stderr
    assert "PluginEcho-v0: a plugin: repeat a word" in listing.stdout
    assert "    single: roles speaker" in listing.stdout

    out = tmp_path / "run"
    train = _run(["-m", "srpo_agents.cli", "train", "--env", "PluginEcho-v0", "--workflow",
                  "single", "--n-agents", "1", "--steps", "2", "--group-size", "2",
                  "--tasks-per-step", "2", "--eval-tasks", "4", "--eval-k", "2",
                  "--max-new-tokens", "6", "--model", "tiny", "--warmstart-steps", "4",
                  "--warmstart-target",
                  "1.0", "--out", str(out)], plugin_path, tmp_path)
    assert train.returncode == 0, train.stderr[-3000:]
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "step" in r and "reward" in r][:2] == [0, 1]
    assert all(r["events"] == 4 for r in rows if "events" in r)

    broken = _run(["-m", "srpo_agents.cli", "train", "--env", "PluginEcho-v1"],
                  plugin_path, tmp_path)
    assert broken.returncode == 2
    assert "did you mean 'PluginEcho-v0'" in broken.stderr


# -- srpo envs, srpo rollout, --help ---------------------------------------------------
def test_srpo_envs_lists_every_env_with_workflows_and_roles(capsys):
    assert main(["envs"]) == 0
    out = capsys.readouterr().out
    assert "SRPO-Countdown-v0: Countdown" in out
    assert "    routed: roles router, solver, aggregator, verifier" in out
    assert "    search_answer_verify: roles searcher, answerer, verifier" in out


def test_every_flag_of_every_command_has_help():
    parser = build_parser()
    commands = parser._subparsers._group_actions[0]
    assert set(commands.choices) == {"train", "eval", "rollout", "envs", "plot",
                                      "serve-retriever", "fetch-data"}
    assert all(action.help for action in commands._choices_actions)
    for name, sub in commands.choices.items():
        for action in sub._actions:
            if action.option_strings and action.dest != "help":
                assert action.help and len(action.help) > 12, (name, action.dest)
        sub.format_help()  # every help string formats (no stray "%")


def test_a_value_the_constructor_refuses_names_the_env_and_the_flag():
    """A plug-in without a config class refuses a value when it is built: the error
    names the env and the ``srpo train`` flag that set the argument."""
    from srpo_envs.registry import EnvSpec

    def make(n_proposers=2, seed=None, **kwargs):
        if not 1 <= n_proposers <= 8:
            raise ValueError(f"n_proposers={n_proposers!r}: expected an int in 1..8")
        raise AssertionError("not reached")

    spec = EnvSpec(name="Plug-v0", entry_point=make, workflows=("team",),
                   agents_argument="n_proposers")
    with pytest.raises(ValueError, match=r"^Plug-v0: n_proposers=20: expected an int in "
                                         r"1\.\.8 \(n_proposers takes --n-agents\)$"):
        spec.make(n_proposers=20)


def test_srpo_envs_describe_lists_workflows_roles_flags_and_arguments(capsys):
    assert main(["envs", "--describe", "SRPO-Countdown-v0"]) == 0
    out = capsys.readouterr().out
    assert "parallel: solver, aggregator" in out
    assert "--n-agents -> n_proposers (default 3)" in out and "--difficulty -> levels" in out
    assert "    levels = (0,)" in out and "    n_proposers = 3" in out
    assert main(["envs", "--describe", "SRPO-Countdwn-v0"]) == 2  # names the closest id


def test_srpo_envs_describe_shows_the_named_prompt_sets(capsys):
    """A prompt a run can switch to is visible, text and all, in the env's description."""
    assert main(["envs", "--describe", "SRPO-Math-v0"]) == 0
    out = capsys.readouterr().out
    sets = out[out.index("named prompt sets"):]
    assert "    default: the built-in templates" in sets
    assert "    example-v1:\n        solver: 'You are a math solver. Work out the answer" in sets
    assert "        verifier: 'You are a math verifier." in sets


def test_an_env_keeps_its_own_defaults_unless_a_flag_is_typed():
    """Untyped, --n-agents, --max-turns and --difficulty take the env's own defaults
    (Countdown: levels (0,); math: 2 rounds; search: 4 turns); typed, they win."""
    args = ["train", "--env", "SRPO-Countdown-v0"]
    from srpo_agents.cli import typed_flags
    from srpo_agents.cli.flags import config_from_args

    parsed = build_parser().parse_args(args)
    parsed.typed_flags = typed_flags(args)
    config = config_from_args(parsed)
    assert (config.n_agents, config.difficulty) == (3, (0,))
    assert TrainConfig(env="SRPO-Math-v0", workflow="solve_verify").max_turns == 2
    assert TrainConfig(env="SRPO-Search-v0", workflow="single").max_turns == 4
    typed = ["train", "--env", "SRPO-Countdown-v0", "--difficulty", "1", "--n-agents", "2"]
    parsed = build_parser().parse_args(typed)
    parsed.typed_flags = typed_flags(typed)
    assert (config_from_args(parsed).difficulty, config_from_args(parsed).n_agents) == ((1,), 2)
