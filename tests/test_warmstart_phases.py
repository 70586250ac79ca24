"""The warm start's focus phase and its resumable build.

The search track's warm start is some 1,800 supervised steps (about 55 minutes on two
cores): a build that is killed must resume where it was, with the weights, optimizer and
random numbers it would have had, and its focus phase (the readers' examples, every 4th
batch of every role's) must draw what it says.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import srpo_agents.tiny.warmstart as warmstart
from srpo_agents.config import TrainConfig
from srpo_agents.rollout.envs import env_factory
from srpo_agents.tiny.config import tiny_run
from srpo_agents.tiny.source import warm_start_key

ROOT = Path(__file__).resolve().parents[1]
CONFIG = {"env": "SRPO-Math-v0", "workflow": "solve_verify", "model": "tiny"}
BUILD = {"minutes": 5, "target": 1.0, "seed": 0, "max_new_tokens": 8, "steps": 6,
         "episodes": 12, "eval_tasks": 2, "batch_size": 8, "warmup": 2, "decay": True,
         "focus_roles": ("verifier",), "focus_steps": 5, "save_every": 3,
         "env_name": "SRPO-Math-v0"}


# One thread here and in the killed subprocess: a resume is proven bit-exact only where
# the kernels are deterministic (with two, the embedding's backward once summed in
# another order in a full `make test`).
pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _build(run_dir: Path, log=print, **changes):
    config = TrainConfig(**CONFIG)
    return warmstart.warm_start(run_dir, env_factory(config, "train"),
                                env_factory(config, "validation"),
                                key=warm_start_key(config), log=log, **{**BUILD, **changes})


def _weights(folder: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(folder / "model.safetensors"))


@pytest.mark.slow
@pytest.mark.heavy
def test_a_killed_build_resumes_to_the_same_weights(tmp_path):
    _, meta = _build(tmp_path / "whole")
    assert meta["steps"] == 11  # 6 main + 5 focus
    assert not (tmp_path / "whole" / warmstart.BUILD).exists(), "the build folder stays"

    # killed after step 7 (the focus phase's first; the last checkpoint is at step 6)
    script = (f"from pathlib import Path; from tests import test_warmstart_phases as t; "
              f"t._build(Path({str(tmp_path / 'killed')!r}))")
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True,
                          text=True, timeout=300,
                          env={**os.environ, "SRPO_KILL_AT": "warmstart@7",
                               "OMP_NUM_THREADS": "1"})
    assert done.returncode == -9, done.stderr[-2000:]
    build = tmp_path / "killed" / warmstart.BUILD
    assert sorted(d.name for d in (build / "checkpoints").iterdir()) == [
        "step-00000003", "step-00000006"]
    assert not (tmp_path / "killed" / "warmstart" / warmstart.META).exists()

    logs: list[str] = []
    _, resumed = _build(tmp_path / "killed", log=logs.append)
    assert any("resuming" in line and "step 6" in line for line in logs), logs
    assert resumed["steps"] == 11
    whole, again = (_weights(tmp_path / name / "warmstart") for name in ("whole", "killed"))
    assert whole.keys() == again.keys()
    for name in whole:
        assert torch.equal(whole[name], again[name]), name
    assert resumed["accuracy"] == meta["accuracy"]


def test_a_build_of_other_settings_is_not_resumed(tmp_path, monkeypatch):
    original, calls = warmstart.sft_step, []

    def stop_at_the_5th(*args, **kwargs):
        if len(calls) == 4:
            raise RuntimeError("stopped")
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(warmstart, "sft_step", stop_at_the_5th)
    with pytest.raises(RuntimeError, match="stopped"):
        _build(tmp_path)
    assert (tmp_path / warmstart.BUILD / "checkpoints" / "step-00000003").is_dir()
    monkeypatch.setattr(warmstart, "sft_step", original)
    logs: list[str] = []
    _, meta = _build(tmp_path, log=logs.append, lr=1e-3)
    assert any("other settings; starting over" in line for line in logs), logs
    assert not any("resuming" in line for line in logs), logs
    assert meta["steps"] == 11


def test_the_focus_phase_draws_the_focus_roles_but_every_4th_batch(tmp_path, monkeypatch):
    drawn: list[list] = []
    original = warmstart.sft_step

    def record(policy, optimizer, batch, scheduler=None, **kwargs):
        drawn.append([tuple(ids) for ids, _ in batch])
        return original(policy, optimizer, batch, scheduler, **kwargs)

    monkeypatch.setattr(warmstart, "sft_step", record)
    config = TrainConfig(**CONFIG)
    examples = warmstart.reference_examples(env_factory(config, "train"), episodes=12,
                                            seed=0, env_name=config.env)
    _build(tmp_path, focus_steps=8)
    policy = warmstart.load_policy(str(tmp_path / "warmstart"))
    role_of = {tuple(ids): role for (ids, _), (role, _, _) in
               zip(warmstart._encode(policy, examples), examples, strict=True)}
    roles = [{role_of[row] for row in batch} for batch in drawn]
    assert len(roles) == 6 + 8
    focus = roles[6:]
    for i, batch_roles in enumerate(focus, start=1):
        if i % warmstart.FOCUS_MIX_EVERY:
            assert batch_roles == {"verifier"}, (i, batch_roles)
    mixed = set().union(*(focus[i - 1] for i in (4, 8)))
    assert mixed > {"verifier"}, mixed  # the mixed batches hold other roles too


def test_the_focus_phase_is_part_of_the_key_only_when_used(tmp_path):
    _, plain = _build(tmp_path / "plain", focus_roles=(), focus_steps=0)
    assert "focus_steps" not in plain["settings"], "unused, it would stale existing caches"
    _, focused = _build(tmp_path / "focused")
    assert focused["settings"]["focus_steps"] == 5
    assert focused["settings"]["focus_roles"] == ["verifier"]
    meta = json.loads((tmp_path / "focused" / "warmstart" / warmstart.META).read_text())
    assert meta["steps"] == 11


@pytest.mark.parametrize("changes, field", [
    ({"warmstart_focus_roles": ("verifier",)}, "warmstart_focus_roles"),
    ({"warmstart_focus_steps": 5}, "warmstart_focus_roles"),
    ({"warmstart_focus_roles": ("verifier",), "warmstart_focus_steps": 5},
     "warmstart_focus_steps"),
    ({"warmstart_focus_steps": -1}, "warmstart_focus_steps"),
    ({"warmstart_first_target": 0.5}, "warmstart_first_target"),
    ({"warmstart_first_target": -0.5, "warmstart_first_roles": ("solver",),
      "warmstart_first_steps": 5}, "warmstart_first_target"),
    ({"warmstart_focus_target": float("nan")}, "warmstart_focus_target"),
])
def test_focus_settings_are_validated(changes, field):
    with pytest.raises(ValueError, match=field):
        TrainConfig(**tiny_run(CONFIG, **changes))


def test_focus_roles_must_exist(tmp_path):
    with pytest.raises(ValueError, match="focus_roles=.*'searcher'"):
        _build(tmp_path, focus_roles=("searcher",))


def test_a_focus_target_stops_the_phase_at_the_first_check_that_reaches_it(tmp_path, monkeypatch):
    # validation accuracies of the successive checks: the skill "appears" at the second
    accuracies = iter([0.1, 0.5, 0.9, 0.9])
    checked_at: list[int] = []

    def fake_evaluate(engine, envs, tasks, k, tag):
        checked_at.append(len(checked_at))
        return {"avg_at_k": next(accuracies)}

    monkeypatch.setattr(warmstart, "evaluate", fake_evaluate)
    monkeypatch.setattr(warmstart, "FOCUS_CHECK_EVERY", 2)
    logs: list[str] = []
    _, meta = _build(tmp_path, log=logs.append, focus_steps=8, focus_target=0.4)
    assert meta["steps"] == 6 + 4, logs  # stopped at focus step 4, not 8
    assert meta["accuracy"] == 0.5
    assert len(checked_at) == 2
    assert meta["settings"]["focus_target"] == 0.4
    assert any("validation avg@2 0.100" in line for line in logs), logs


def _with_first_target(monkeypatch, rates):
    """A first phase on the solver's examples whose exact-response checks (every 2 steps)
    return ``rates`` in turn."""
    values = iter(rates)
    monkeypatch.setattr(warmstart, "exact_response_rate", lambda policy, pool: next(values))
    monkeypatch.setattr(warmstart, "FIRST_CHECK_EVERY", 2)
    return {"first_roles": ("solver",), "first_steps": 20, "first_target": 0.4}


def test_a_first_target_ends_the_first_phase_when_the_skill_appears(tmp_path, monkeypatch):
    drawn: list[tuple[list, float]] = []
    original = warmstart.sft_step

    def record(policy, optimizer, batch, scheduler=None, **kwargs):
        drawn.append(([tuple(ids) for ids, _ in batch], optimizer.param_groups[0]["lr"]))
        return original(policy, optimizer, batch, scheduler, **kwargs)

    monkeypatch.setattr(warmstart, "sft_step", record)
    first = _with_first_target(monkeypatch, [0.0, 0.1, 0.5, 0.9])
    logs: list[str] = []
    _, meta = _build(tmp_path, log=logs.append, **first)
    # checks at first-phase steps 2, 4, 6: the third reaches 0.4; then 6 main + 5 focus
    assert meta["steps"] == 6 + 6 + 5, logs
    assert meta["first_roles_exact"] == 0.9  # measured once more at the end
    assert meta["settings"]["first_target"] == 0.4
    assert any("main phase after 6 first-phase steps" in line for line in logs), logs
    config = TrainConfig(**CONFIG)
    examples = warmstart.reference_examples(env_factory(config, "train"), episodes=12,
                                            seed=0, env_name=config.env)
    policy = warmstart.load_policy(str(tmp_path / "warmstart"))
    role_of = {tuple(ids): role for (ids, _), (role, _, _) in
               zip(warmstart._encode(policy, examples), examples, strict=True)}
    roles = [{role_of[row] for row in batch} for batch, _ in drawn]
    assert all(r == {"solver"} for r in roles[:6]), roles[:6]
    assert set().union(*roles[6:12]) > {"solver"}  # the main phase draws every role
    lrs = [lr for _, lr in drawn]
    # warm-up over 2 steps, then constant in the first phase; a fresh warm-up after it
    assert lrs[1:6] == [BUILD_LR] * 5, lrs[:6]
    assert lrs[6] < BUILD_LR and lrs[11] < lrs[7], lrs[6:12]


BUILD_LR = 3e-3  # warm_start's default lr (BUILD leaves it)


@pytest.mark.slow
@pytest.mark.heavy
def test_a_build_killed_after_its_first_phase_resumes_into_the_main_phase(tmp_path,
                                                                          monkeypatch):
    _, meta = _build(tmp_path / "whole", **_with_first_target(monkeypatch, [0.0, 0.5, 0.9]))
    assert meta["steps"] == 4 + 6 + 5
    original, calls = warmstart.sft_step, []

    def stop_at_the_8th(*args, **kwargs):
        if len(calls) == 7:
            raise RuntimeError("stopped")
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(warmstart, "sft_step", stop_at_the_8th)
    with pytest.raises(RuntimeError, match="stopped"):
        _build(tmp_path / "killed", **_with_first_target(monkeypatch, [0.0, 0.5, 0.9]))
    monkeypatch.setattr(warmstart, "sft_step", original)
    logs: list[str] = []
    # no first-phase check runs after the resume (the rates left would say 0.0 again)
    _, resumed = _build(tmp_path / "killed", log=logs.append,
                        **_with_first_target(monkeypatch, [0.9]))
    assert any("resuming" in line and "main phase, step 2" in line for line in logs), logs
    assert resumed["steps"] == meta["steps"]
    whole, again = (_weights(tmp_path / name / "warmstart") for name in ("whole", "killed"))
    for name in whole:
        assert torch.equal(whole[name], again[name]), name


def test_the_exact_response_rate_counts_what_greedy_decoding_reproduces(tmp_path):
    policy, _ = _build(tmp_path, steps=2, focus_roles=(), focus_steps=0)
    prompt = policy.prompt_ids_batch("solver", ["What is 2 + 3?"])[0]
    ids = list(prompt)
    with torch.no_grad():
        for _ in range(4):  # greedy continuation, one token at a time
            ids.append(int(policy.model(input_ids=torch.tensor([ids])).logits[0, -1].argmax()))
    greedy = (ids, len(prompt))
    wrong_last = (ids[:-1] + [(ids[-1] + 1) % policy.model.config.vocab_size], len(prompt))
    assert warmstart.exact_response_rate(policy, [greedy]) == 1.0
    assert warmstart.exact_response_rate(policy, [wrong_last]) == 0.0
    assert warmstart.exact_response_rate(policy, [greedy, wrong_last, greedy]) == 2 / 3
