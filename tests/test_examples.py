"""Run files (``srpo train --config``) and the ``examples/`` that hold each documented
setting: a file and the flags typed with it make the config, a run's own config.json
repeats it, a mistyped key names the closest valid one, and every example is exactly
the setting its code defines (``srpo_bench.examples``)."""

import json
from pathlib import Path

import pytest
import yaml

from srpo_agents.cli import build_parser
from srpo_agents.cli import typed_flags as typed_of
from srpo_agents.cli.flags import apply_run_file, config_from_args, read_run_file
from srpo_agents.config import TrainConfig
from srpo_bench.examples import EXAMPLES, example_configs, run_file

ROOT = Path(__file__).resolve().parents[1]


def config_of(argv: list[str]) -> TrainConfig:
    """What ``srpo train ARGV`` trains (``cmd_train``'s steps, without training)."""
    args = build_parser().parse_args(["train", *argv])
    args.typed_flags = typed_of(["train", *argv])
    if args.config:
        apply_run_file(args, read_run_file(args.config))
    return config_from_args(args)


def test_a_run_file_sets_values_and_typed_flags_win(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("env: SRPO-Countdown-v0\nworkflow: single\nsteps: 7\nlr: 1.0e-4\n"
                    "difficulty: [0, 1]\nmodel: tiny\nwarmstart_steps: 3\n")
    config = config_of(["--config", str(path), "--steps", "9"])
    assert (config.env, config.workflow, config.steps, config.lr) == (
        "SRPO-Countdown-v0", "single", 9, 1e-4)
    assert config.difficulty == (0, 1) and config.model_options["warmstart_steps"] == 3
    as_json = tmp_path / "run.json"
    as_json.write_text(json.dumps({"env": "SRPO-Countdown-v0", "steps": 4}))
    assert config_of(["--config", str(as_json)]).steps == 4


def test_a_runs_own_config_repeats_it_with_another_seed(tmp_path):
    """A run folder's config.json (what ``TrainingRun.open`` writes) is a run file; its
    folder and resume flag are not taken, so the new run writes its own folder."""
    first = TrainConfig(env="SRPO-Countdown-v0", steps=3, lr=3e-4, model="tiny",
                        model_options={"warmstart_steps": 5}, out=str(tmp_path / "x"),
                        resume=True)
    run = tmp_path / "x"
    run.mkdir()
    (run / "config.json").write_text(json.dumps(first.to_dict()))
    (run / "metrics.jsonl").write_text("")
    again = config_of(["--config", str(run / "config.json"), "--seed", "1"])
    assert again.seed == 1 and not again.resume
    assert again.out == "runs/SRPO-Countdown-v0-parallel-srpo-s1"
    differ = {k for k, v in again.to_dict().items() if v != first.to_dict()[k]}
    assert differ == {"seed", "out", "resume"}


@pytest.mark.parametrize("text,message", [
    ("stpes: 3\n", r"unknown setting 'stpes'; did you mean 'steps'\?"),
    ("- 3\n", r"expected a mapping of settings, got list"),
    ("steps: [3\n", r"not valid yaml"),
    ("steps: three\n", r"steps='three': expected an int >= 0"),
])
def test_bad_run_files_are_named(tmp_path, text, message):
    path = tmp_path / "run.yaml"
    path.write_text(text)
    with pytest.raises(ValueError, match=message):
        config_of(["--config", str(path)])


def test_a_missing_run_file_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"--config .*nope.yaml: no such file"):
        config_of(["--config", str(tmp_path / "nope.yaml")])


@pytest.mark.parametrize("name", sorted(example_configs()))
def test_each_example_is_its_setting(name, monkeypatch):
    """examples/NAME.yaml, read as ``srpo train --config`` reads it (from the repository
    root), is the code's setting exactly; the file is what ``srpo_bench.examples``
    writes."""
    monkeypatch.chdir(ROOT)
    code = example_configs()[name]
    path = EXAMPLES / f"{name}.yaml"
    assert yaml.safe_load(path.read_text()) == run_file(code), (
        f"{path} is out of date: python -m srpo_bench.examples")
    assert config_of(["--config", str(path)]).to_dict() == code.to_dict()


def test_the_step_line_says_what_a_step_did_and_the_time_left():
    from srpo_agents.running.training_run import step_line

    row = {"step": 4, "reward": 0.5, "accuracy": 0.25, "approx_kl": 0.0123, "clip_fraction":
           0.04, "seconds": 7.25}
    # 5 of 20 steps done in 100 s: 15 left at 20 s each
    assert step_line(row, 20, 100.0, 5) == ("step 5/20: reward 0.500, accuracy 0.250, kl "
                                            "0.0123, clip 0.040, 7.2 s; ETA 05m00s")
    assert step_line(row, 400, 100.0, 5).endswith("ETA 2h11m40s")
