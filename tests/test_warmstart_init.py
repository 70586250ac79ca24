"""A warm start that begins from another finished one (``warmstart_init``).

The search track's routed team starts from the search_answer_verify team's policy, which
already copies names and answers: the build must start from those very weights, keep
their tokenizer, and key its cache by them, so that a changed init rebuilds.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import srpo_agents.tiny.warmstart as warmstart
from srpo_agents.config import TrainConfig
from srpo_agents.rollout.envs import env_factory
from srpo_agents.tiny.config import tiny_run
from srpo_agents.tiny.source import warm_start_key
from tests.test_warmstart_phases import _weights

pytestmark = pytest.mark.usefixtures("one_torch_thread")

CONFIG = {"env": "SRPO-Math-v0", "workflow": "solve_verify", "model": "tiny"}
BUILD = {"minutes": 5, "target": 1.0, "seed": 0, "max_new_tokens": 8, "steps": 2,
         "episodes": 12, "eval_tasks": 2, "batch_size": 8, "env_name": "SRPO-Math-v0"}


def _build(run_dir: Path, log=print, **changes):
    config = TrainConfig(**CONFIG)
    return warmstart.warm_start(run_dir, env_factory(config, "train"),
                                env_factory(config, "validation"),
                                key=warm_start_key(config), log=log, **{**BUILD, **changes})


def test_a_build_begins_from_the_init_weights(tmp_path, monkeypatch):
    _build(tmp_path / "base")
    init = tmp_path / "base" / "warmstart"
    started = {}
    real_step = warmstart.sft_step

    def first_step(policy, *args, **kwargs):  # the weights the first update starts from
        started.setdefault("weights", {k: v.clone() for k, v in
                                       policy.model.state_dict().items()})
        return real_step(policy, *args, **kwargs)

    monkeypatch.setattr(warmstart, "sft_step", first_step)
    _, meta = _build(tmp_path / "from-init", init=init)
    base = _weights(init)
    assert all(torch.equal(started["weights"][k], base[k]) for k in base)
    assert meta["settings"]["model"]["init"] == warmstart.init_model(init)
    assert not (tmp_path / "from-init" / "tiny-init").exists(), "a fresh model was built"
    after = _weights(tmp_path / "from-init" / "warmstart")
    assert any(not torch.equal(after[k], base[k]) for k in base), "no step was taken"
    saved = json.loads((tmp_path / "from-init" / "warmstart" / "tokenizer.json").read_text())
    assert saved == json.loads((init / "tokenizer.json").read_text())


def test_the_init_weights_are_part_of_the_key(tmp_path):
    _build(tmp_path / "a")
    _build(tmp_path / "b", seed=1)
    fresh = _build(tmp_path / "fresh")[1]["settings"]
    assert "init" not in fresh["model"], "a fresh build's key changed"
    key_a = warmstart.init_model(tmp_path / "a" / "warmstart")
    key_b = warmstart.init_model(tmp_path / "b" / "warmstart")
    assert key_a != key_b

    _build(tmp_path / "run", init=tmp_path / "a" / "warmstart")
    logs: list[str] = []
    _build(tmp_path / "run", log=logs.append, init=tmp_path / "b" / "warmstart")
    assert any("rebuilding" in line and "model.init.weights" in line for line in logs), logs


def test_an_init_that_is_not_a_tiny_warm_start_is_refused(tmp_path):
    with pytest.raises(ValueError, match="init=.*expected a finished warm start"):
        warmstart.init_model(tmp_path)
    _build(tmp_path / "a")
    other = tmp_path / "other"
    other.mkdir()
    config = json.loads((tmp_path / "a" / "warmstart" / "config.json").read_text())
    (other / "config.json").write_text(json.dumps({**config, "hidden_size": 64}))
    (other / "model.safetensors").write_bytes(b"")
    with pytest.raises(ValueError, match="shape .*'hidden_size': 64.*expected the tiny shape"):
        warmstart.init_model(other)


@pytest.mark.parametrize("changes", [{"warmstart_init": 3},
                                     {"warmstart_init": "x", "tiny_vocab": 400}])
def test_init_settings_are_validated(changes):
    with pytest.raises(ValueError, match="warmstart_init="):
        TrainConfig(**tiny_run(CONFIG, **changes))


def test_a_run_from_the_built_warm_start_drops_the_tiny_options():
    """The harness's runs load the finished warm start as their model: the pair's
    warm-start settings shaped only that start, so a preset's run from the folder drops
    them, and a config that gives them to another model is refused by name."""
    config = TrainConfig(**tiny_run(CONFIG, model="some/warmstart", warmstart_init="x"))
    assert config.model_options == {}
    with pytest.raises(ValueError, match="--model some/warmstart takes no options"):
        TrainConfig(**{**CONFIG, "model": "some/warmstart"},
                    model_options={"warmstart_init": "x"})
