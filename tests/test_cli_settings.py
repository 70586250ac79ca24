"""What a command runs with: ``srpo eval``/``srpo rollout`` on a run directory play the
run's recorded settings under the flags typed; ``srpo train --quick``; ``--group-size 1``
for rollouts; ``--drop-unfinished``; env constructor arguments named by their EnvSpec
field; and the tutorial's programs (docs/new-environment.md) run as written."""

import ast
import doctest
import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from srpo_agents.cli import build_parser, main, typed_flags
from srpo_agents.cli.evaluate import recorded_config, sampling_config
from srpo_agents.cli.flags import config_from_args
from srpo_agents.cli.train import QUICK, QUICK_TINY, apply_quick, apply_train_eval_sizes
from srpo_agents.config import TrainConfig
from srpo_agents.running import checkpoint
from srpo_agents.running.plan import TRAIN_EVAL_SIZES
from srpo_agents.tiny import build_tiny_policy
from srpo_envs import registry

ROOT = Path(__file__).resolve().parents[1]
TUTORIAL = ROOT / "docs" / "new-environment.md"


def parsed(argv: list[str]):
    """The namespace ``main`` hands a command: parsed, with the typed flags recorded."""
    args = build_parser().parse_args(argv)
    args.typed_flags = typed_flags(argv)
    return args


def rows_of(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def proposers_per_episode(rows: list[dict]) -> set[int]:
    return {len(r["transition"]["expected_agents"]) for r in rows
            if r["transition"]["event_type"] == "propose"}


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    """A bare model folder (no run around it)."""
    path = tmp_path_factory.mktemp("tiny-model")
    build_tiny_policy(["0123456789+-*/() to\nFinal: P"] * 4, path, hidden_size=32,
                      num_layers=1, num_heads=2)
    return path


def fake_run(folder: Path, config: dict, where: str = "checkpoint") -> Path:
    """A run directory that recorded ``config`` as ``train`` does: in a checkpoint's
    state.json, or in summary.json only."""
    full = TrainConfig(**config).to_dict()
    if where == "checkpoint":
        step = folder / "checkpoints" / "step-00000001"
        step.mkdir(parents=True)
        payload = {"config": full}
        digest = hashlib.sha256(checkpoint._canonical(payload)).hexdigest()
        (step / "state.json").write_text(json.dumps(
            {"format": checkpoint.FORMAT, "payload": payload, "payload_sha256": digest}))
    else:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "summary.json").write_text(json.dumps({"config": full}))
    return folder


# -- typed flags and the recorded settings ---------------------------------------------
def test_typed_flags_are_told_apart_from_defaults():
    typed = typed_flags(["rollout", "--checkpoint", "r", "--out", "x.jsonl", "--n-agents",
                         "3", "--drop-unfinished"])
    assert typed == {"checkpoint", "out", "n_agents", "drop_unfinished"}
    # a flag typed with its default value is typed all the same
    assert "group_size" in typed_flags(["train", "--group-size", "8"])
    assert typed_flags(["train"]) == set()


def test_a_run_directory_records_its_settings_and_typed_flags_override_them(tmp_path):
    run = fake_run(tmp_path / "run", {"env": "SRPO-Countdown-v0", "workflow": "parallel",
                                      "n_agents": 2, "difficulty": (0,), "max_new_tokens": 7,
                                      "temperature": 0.5, "seed": 4, "device": "cpu",
                                      "group_size": 3})
    recorded = recorded_config(run)
    assert recorded[1] == run / "checkpoints" / "step-00000001" / "state.json"
    base = ["rollout", "--checkpoint", str(run), "--out", "x.jsonl"]
    config = sampling_config(parsed(base), recorded, model="tiny")
    assert (config.env, config.workflow, config.n_agents, config.difficulty,
            config.max_new_tokens, config.temperature, config.seed, config.group_size) == (
        "SRPO-Countdown-v0", "parallel", 2, (0,), 7, 0.5, 4, 3)
    assert config.device == "auto"  # the machine's setting comes from the flags
    # typed flags win, even one typed with its default value (3 is --n-agents' default)
    config = sampling_config(parsed(base + ["--n-agents", "3", "--max-new-tokens", "9"]),
                             recorded, model="tiny")
    assert (config.n_agents, config.max_new_tokens, config.difficulty) == (3, 9, (0,))


def test_a_summary_only_run_is_read_and_a_bare_folder_takes_the_flags(tmp_path):
    run = fake_run(tmp_path / "run", {"env": "SRPO-Countdown-v0", "n_agents": 2},
                   where="summary")
    assert recorded_config(run)[1] == run / "summary.json"
    assert sampling_config(parsed(["eval", "--checkpoint", str(run)]), recorded_config(run),
                           model="tiny").n_agents == 2
    assert recorded_config(tmp_path) is None
    config = sampling_config(parsed(["eval", "--checkpoint", str(tmp_path)]), None,
                             model="tiny")
    assert (config.env, config.n_agents) == ("SRPO-Math-v0", 3)


def test_a_recorded_setting_that_no_longer_holds_names_its_record(tmp_path):
    data = tmp_path / "tasks.jsonl"
    data.write_text('{"numbers": [1, 2], "target": 3}\n')
    run = fake_run(tmp_path / "run", {"env": "SRPO-Countdown-v0", "dataset": str(data)})
    data.unlink()
    with pytest.raises(FileNotFoundError, match=r"dataset=.*no such JSONL file \(recorded in "
                                                r".*state.json; --dataset overrides it\)"):
        sampling_config(parsed(["eval", "--checkpoint", str(run)]), recorded_config(run),
                        model="tiny")


# -- rollouts: G = 1, drop_unfinished ---------------------------------------------------
def test_a_rollout_takes_group_size_one_and_training_still_needs_two(tiny_model, tmp_path,
                                                                    capsys):
    out = tmp_path / "episodes.jsonl"
    assert main(["rollout", "--checkpoint", str(tiny_model), "--env", "SRPO-Countdown-v0",
                 "--workflow", "parallel", "--n-agents", "2", "--tasks", "3",
                 "--group-size", "1", "--max-new-tokens", "4", "--out", str(out)]) == 0
    rows = rows_of(out)
    assert len({r["transition"]["episode_id"] for r in rows}) == 3  # 3 tasks x 1
    assert proposers_per_episode(rows) == {2}  # a bare model folder: the flags apply
    with pytest.raises(ValueError, match=r"group_size=1: a relative advantage needs at "
                                         r"least 2 rollouts per task"):
        TrainConfig(group_size=1)
    assert TrainConfig(group_size=1, training=False).group_size == 1
    assert main(["train", "--group-size", "1", "--out", str(tmp_path / "t")]) == 2
    assert "group_size=1" in capsys.readouterr().err


def test_drop_unfinished_reaches_the_engine_from_train_and_rollout(tiny_model, tmp_path):
    from srpo_agents.models.policy import load_policy
    from srpo_agents.rollout.engine import engine_for

    policy = load_policy(str(tiny_model))
    on = config_from_args(parsed(["train", "--drop-unfinished"]))
    assert on.drop_unfinished and engine_for(on, policy).drop_unfinished
    assert not engine_for(config_from_args(parsed(["train"])), policy).drop_unfinished
    # a Ray rollout worker builds its engine from the same config (here in process)
    from srpo_agents.rollout.ray_engine import _Worker

    config = TrainConfig(drop_unfinished=True, rollout_workers=2, model=str(tiny_model),
                         env="SRPO-Countdown-v0", workflow="single")
    worker = _Worker(0, config.to_dict(), policy, pool_size=1)
    assert worker.engine.drop_unfinished

    def missing(extra: list[str]) -> tuple[int, int]:
        """(proposer outputs the env did not consume, unfinished samples)."""
        out = tmp_path / "e.jsonl"
        assert main(["rollout", "--checkpoint", str(tiny_model), "--env", "SRPO-Countdown-v0",
                     "--workflow", "parallel", "--n-agents", "2", "--tasks", "4",
                     "--group-size", "2", "--max-new-tokens", "1", "--out", str(out),
                     *extra]) == 0
        rows = [r for r in rows_of(out) if r["transition"]["event_type"] == "propose"]
        lost = sum(len(r["transition"]["expected_agents"]) - len(r["transition"]["consumed"])
                   for r in rows)
        unfinished = sum(not s["finished"] for r in rows for s in r["samples"].values())
        return lost, unfinished

    lost, unfinished = missing(["--drop-unfinished"])
    assert unfinished > 0 and lost == unfinished  # every cut-off response sent as None
    assert missing([])[0] == 0


# -- env constructor arguments named by their EnvSpec field ------------------------------
def PluginEnv(workflow="single", split="train", cost_per_token=0.0, prompts=None,
              seed=None, render_mode=None):
    raise AssertionError("not reached: the arguments are checked first")


def KeywordEnv(**kwargs):
    def build(workflow, split, cost_per_token, seed=None):
        raise TypeError("a bug inside the env")  # not about its arguments

    return build(**kwargs)


@pytest.fixture
def scratch_registry(monkeypatch):
    """Specs registered in a test leave the registry as it was (srpo envs lists all)."""
    monkeypatch.setattr(registry, "_SPECS", dict(registry._SPECS))


def test_a_constructor_without_the_agents_argument_names_the_spec_field(scratch_registry,
                                                                         capsys, tmp_path):
    registry.register(registry.EnvSpec(name="Plugin-Args-v0", entry_point=PluginEnv,
                                       workflows=("single",)))
    message = (r"env 'Plugin-Args-v0': EnvSpec.agents_argument='n_agents' but PluginEnv\(\) "
               r"takes no argument 'n_agents': set agents_argument to the constructor's name "
               r"for the agent count \(--n-agents\), or None")
    with pytest.raises(registry.EnvArgumentError, match=message):
        TrainConfig(env="Plugin-Args-v0", workflow="single")
    assert main(["train", "--env", "Plugin-Args-v0", "--workflow", "single", "--out",
                 str(tmp_path / "run")]) == 2
    assert re.search(message, capsys.readouterr().err)
    registry.register(registry.EnvSpec(name="Plugin-Args-v1", entry_point=PluginEnv,
                                       workflows=("single",), agents_argument=None))
    TrainConfig(env="Plugin-Args-v1", workflow="single")  # accepted


def test_a_keyword_constructor_is_caught_when_built_and_its_own_bugs_stay_its_own(
        scratch_registry):
    spec = registry.register(registry.EnvSpec(name="Plugin-Kwargs-v0", entry_point=KeywordEnv,
                                              workflows=("single",), agents_argument=None,
                                              levels_argument="levels"))
    with pytest.raises(registry.EnvArgumentError,
                       match=r"EnvSpec.levels_argument='levels' but "
                             r"KeywordEnv.<locals>.build\(\) takes no argument 'levels'"):
        spec.make(workflow="single", split="train", cost_per_token=0.0, levels=(1,))
    with pytest.raises(registry.EnvArgumentError,
                       match=r"takes no argument 'hops', passed from extra_env_kwargs"):
        spec.make(workflow="single", split="train", cost_per_token=0.0, hops=[1])
    with pytest.raises(TypeError, match="a bug inside the env") as caught:
        spec.make(workflow="single", split="train", cost_per_token=0.0)
    assert not isinstance(caught.value, registry.EnvArgumentError)


# -- srpo train --quick -----------------------------------------------------------------
def test_quick_sets_the_preset_and_typed_flags_keep_their_values():
    args = parsed(["train", "--quick", "--group-size", "4", "--env", "SRPO-Search-v0",
                   "--model", "tiny"])
    applied = apply_quick(args)
    assert "group_size" not in applied
    assert set(applied) == (set(QUICK) | set(QUICK_TINY)) - {"group_size"}
    config = config_from_args(args)
    assert (config.steps, config.tasks_per_step, config.group_size, config.eval_tasks,
            config.eval_k, config.max_new_tokens, config.model_options["warmstart_steps"]
            ) == (2, 2, 4, 4, 2, 16, 2)
    plain = config_from_args(parsed(["train"]))
    assert (plain.steps, plain.group_size) == (20, 8)  # no --quick: the defaults
    assert plain.model == "smollm2-135m-instruct" and plain.model_options == {}
    real = parsed(["train", "--quick"])
    assert set(apply_quick(real)) == set(QUICK)  # no warm start to shorten
    assert config_from_args(real).model == "smollm2-135m-instruct"


def test_train_sizes_its_evaluations_for_the_machine_unless_told():
    args = parsed(["train", "--device", "cpu"])
    assert apply_train_eval_sizes(args) == "cpu"
    config = config_from_args(args)
    assert (config.eval_tasks, config.eval_k) == TRAIN_EVAL_SIZES["cpu"] == (200, 2)
    typed = parsed(["train", "--device", "cpu", "--eval-k", "8"])
    assert apply_train_eval_sizes(typed) == ""
    assert (config_from_args(typed).eval_tasks, typed.eval_k) == (200, 8)
    quick = parsed(["train", "--quick", "--device", "cpu"])
    apply_quick(quick)
    assert apply_train_eval_sizes(quick) == ""  # --quick's own sizes stay
    assert (quick.eval_tasks, quick.eval_k) == (4, 2)
    untracked = build_parser().parse_args(["train"])  # built by code: no typed flags known
    assert apply_train_eval_sizes(untracked) == "" and untracked.eval_k == 8


def test_tiny_flags_go_to_the_tiny_model_only():
    config = config_from_args(parsed(["train", "--model", "tiny", "--tiny-vocab", "300"]))
    assert config.model_options["tiny_vocab"] == 300
    assert config.model_options["warmstart_steps"] == 0  # every option recorded
    with pytest.raises(ValueError, match="--warmstart-steps is an option of --model tiny, "
                                         "not of --model x/y"):
        config_from_args(parsed(["train", "--model", "x/y", "--warmstart-steps", "3"]))


def _run_cli(args: list[str], cwd: Path, extra_path: str = "") -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join(p for p in (extra_path, str(ROOT)) if p),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    return subprocess.run(args, cwd=cwd, env=env, text=True, capture_output=True,
                          timeout=600)


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    """``srpo train --quick`` on Countdown parallel with 2 proposers, 1 step."""
    root = tmp_path_factory.mktemp("quick")
    result = _run_cli([sys.executable, "-m", "srpo_agents.cli", "train", "--quick", "--env",
                       "SRPO-Countdown-v0", "--n-agents", "2", "--steps", "1", "--model",
                       "tiny", "--out", str(root / "run")], root)
    assert "--quick: model tiny (typed)" in result.stderr
    assert result.returncode == 0, result.stderr[-3000:]
    plan = result.stdout + result.stderr
    assert "plan on cpu" in plan and "1 steps x 2 tasks x G=2 = 4 training episodes" in plan
    assert plan.index("plan on cpu") < plan.index("estimate: a step") < plan.index("step 1/1")
    return root / "run"


@pytest.mark.slow
def test_a_quick_run_completes_with_the_preset_and_the_typed_flags(quick_run):
    summary = json.loads((quick_run / "summary.json").read_text())
    config = summary["config"]
    # the plan and its estimate, made from the "before" evaluation and a timed update
    estimate = summary["estimate"]
    assert estimate["probe"]["rows"] > 0 and estimate["probe"]["seconds"] > 0
    assert estimate["total_s"] >= estimate["after_s"] > 0
    assert estimate["step_update_s"] > 0 and estimate["seconds_per_episode"] > 0
    assert (config["steps"], config["n_agents"], config["group_size"],
            config["tasks_per_step"], config["max_new_tokens"]) == (1, 2, 2, 2, 16)
    assert config["model"] == "tiny" and config["model_options"]["warmstart_batch_size"] == 16
    warm = json.loads((quick_run / "warmstart" / "warmstart.json").read_text())
    assert warm["settings"]["episodes"] == QUICK_TINY["warmstart_episodes"]
    assert len(rows_of(quick_run / "metrics.jsonl")) == 1


@pytest.mark.slow
def test_rollout_on_a_run_plays_its_team_unless_a_flag_says_otherwise(quick_run, tmp_path):
    out = tmp_path / "episodes.jsonl"
    base = ["rollout", "--checkpoint", str(quick_run), "--tasks", "2", "--out", str(out)]
    assert main(base) == 0  # no --env, --workflow, --n-agents: the run's
    rows = rows_of(out)
    assert proposers_per_episode(rows) == {2}
    assert len({r["transition"]["episode_id"] for r in rows}) == 2 * 2  # the run's G = 2
    assert max(len(s["response_ids"]) for r in rows for s in r["samples"].values()) <= 16
    assert main(base + ["--n-agents", "3", "--group-size", "1"]) == 0
    rows = rows_of(out)
    assert proposers_per_episode(rows) == {3}
    assert len({r["transition"]["episode_id"] for r in rows}) == 2


@pytest.mark.slow
def test_eval_on_a_run_reads_its_settings(quick_run, monkeypatch):
    import srpo_agents.running.evaluate

    seen = []
    real = srpo_agents.running.evaluate.held_out

    def spy(config, *rest):
        seen.append((config.env, config.workflow, config.n_agents, config.max_new_tokens))
        return real(config, *rest)

    monkeypatch.setattr(srpo_agents.running.evaluate, "held_out", spy)
    assert main(["eval", "--checkpoint", str(quick_run), "--tasks", "2", "--k", "1"]) == 0
    assert main(["eval", "--checkpoint", str(quick_run), "--tasks", "2", "--k", "1",
                 "--max-new-tokens", "8"]) == 0
    assert seen == [("SRPO-Countdown-v0", "parallel", 2, 16),
                    ("SRPO-Countdown-v0", "parallel", 2, 8)]


# -- the tutorial's programs --------------------------------------------------------------
def tutorial_blocks() -> list[tuple[str, str, str]]:
    """(marker, language, code) of every fenced block; the marker is the
    ``<!-- test: ... -->`` comment right above it ("" when none)."""
    pattern = re.compile(r"(?:<!-- test: (?P<marker>[^>]*?) -->\n)?```(?P<lang>\w*)\n"
                         r"(?P<code>.*?)```", re.S)
    return [(m["marker"] or "", m["lang"], m["code"])
            for m in pattern.finditer(TUTORIAL.read_text())]


def test_every_python_snippet_of_the_tutorial_parses_and_the_programs_run(tmp_path):
    blocks = tutorial_blocks()
    for marker, lang, code in blocks:
        if lang == "python" and marker != "doctest":
            ast.parse(code)  # excerpts too: every snippet is valid Python
    markers = [m for m, _, _ in blocks if m]
    assert markers == ["doctest", "python", "write my_judge_env.py", "python", "bash"]
    for marker, _, code in blocks:
        if marker == "doctest":
            test = doctest.DocTestParser().get_doctest(code, {}, "tutorial", None, 0)
            assert doctest.DocTestRunner().run(test).failed == 0
        elif marker.startswith("write "):
            (tmp_path / marker.split()[1]).write_text(code)
        elif marker == "python":
            result = _run_cli([sys.executable, "-c", code], tmp_path, str(tmp_path))
            assert result.returncode == 0, result.stderr[-3000:]
    assert "['propose', 'judge'] 1.0" in result.stdout  # the last program's printout


@pytest.mark.slow
def test_the_tutorial_plugin_installs_without_pip_and_trains_quick(tmp_path):
    blocks = {marker: code for marker, _, code in tutorial_blocks() if marker}
    (tmp_path / "my_judge_env.py").write_text(blocks["write my_judge_env.py"])
    result = _run_cli(["bash", "-e", "-c", blocks["bash"]], tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "MyJudge-v0: proposers add two numbers" in result.stdout
    assert "parallel: roles proposer, judge" in result.stdout
    rows = rows_of(tmp_path / "runs" / "judge" / "episodes.jsonl")
    assert proposers_per_episode(rows) == {2}  # the run's --n-agents 2
