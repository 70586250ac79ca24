"""``srpo train --per-role-adapters lora`` end to end: checkpoints hold the adapters only
(one PEFT folder per role plus the base's name), a run killed mid-update resumes to the
uninterrupted run's metrics and weights, and ``srpo eval`` and ``srpo rollout`` load the
adapters back."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("peft")

from srpo_agents.running.checkpoint import checkpoint_dirs, read_checkpoint  # noqa: E402

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
ROLES = ["aggregator", "solver"]


def _srpo(command: str, *args: str, cwd: Path, kill_at: str = ""):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT),
           "SRPO_CACHE_DIR": str(cwd / "cache")}
    env.pop("SRPO_KILL_AT", None)
    if kill_at:
        env["SRPO_KILL_AT"] = kill_at
    return subprocess.run([sys.executable, "-m", "srpo_agents.cli", command, *args], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=600)


def _train(out: Path, warm: Path, *extra: str, cwd: Path, kill_at: str = ""):
    return _srpo("train", "--env", "SRPO-Countdown-v0", "--workflow", "parallel",
                 "--n-agents", "2", "--steps", "3", "--group-size", "2",
                 "--tasks-per-step", "2", "--eval-tasks", "4", "--eval-k", "2",
                 "--max-new-tokens", "6", "--lr", "1e-2", "--model", "tiny",
                 "--warmstart-steps", "2",
                 "--warmstart-target", "1.0", "--warmstart-episodes", "50",
                 "--warmstart-dir", str(warm), "--save-every", "1",
                 # a token cost: advantages even where no answer of a fresh policy is right
                 "--cost-per-token", "0.01", "--per-role-adapters", "lora", "--lora-rank", "4",
                 "--out", str(out), *extra,
                 cwd=cwd, kill_at=kill_at)


def _rows(run: Path) -> list[dict]:
    return [{k: v for k, v in json.loads(line).items() if not k.endswith("seconds")}
            for line in (run / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
    root = tmp_path_factory.mktemp("adapters")
    done = _train(root / "straight", root / "warm", cwd=root)
    assert done.returncode == 0, done.stderr[-3000:]
    return root


def test_checkpoints_hold_the_adapters_only(straight):
    run = straight / "straight"
    payload, tensors = read_checkpoint(checkpoint_dirs(run)[0])
    assert tensors and all("lora_" in k for k in tensors if k.startswith("model/"))
    assert any(k.startswith("optimizer/") for k in tensors)
    policy = run / "policy"
    manifest = json.loads((policy / "role_adapters.json").read_text())
    assert manifest["roles"] == ROLES and manifest["format"] == "peft-lora"
    assert Path(manifest["base"]).resolve() == (straight / "warm" / "warmstart").resolve()
    for role in ROLES:
        assert (policy / role / "adapter_model.safetensors").is_file()
    assert not (policy / "model.safetensors").exists(), "the base was saved with them"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["config"]["per_role_adapters"] == "lora"
    # every role's adapter moved off LoRA's zero start: the policy is no longer the base
    for role in ROLES:
        moved = [float(v.abs().max()) for k, v in tensors.items()
                 if k.startswith("model/") and "lora_B" in k and f".{role}." in k]
        assert moved and max(moved) > 0, role


@pytest.mark.heavy
def test_a_run_killed_mid_update_resumes_exactly(straight):
    run = straight / "killed"
    killed = _train(run, straight / "warm", cwd=straight, kill_at="update@1")
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    resumed = _train(run, straight / "warm", "--resume", cwd=straight)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resumed from" in resumed.stdout + resumed.stderr
    assert _rows(run) == _rows(straight / "straight")
    a = read_checkpoint(checkpoint_dirs(run)[0])[1]
    b = read_checkpoint(checkpoint_dirs(straight / "straight")[0])[1]
    assert a.keys() == b.keys() and all((a[k] == b[k]).all() for k in a if "rng" not in k)


def test_eval_and_rollout_load_the_adapters(straight, tmp_path):
    run = straight / "straight"
    done = _srpo("eval", "--checkpoint", str(run), "--k", "2", "--tasks", "4", "--json",
                 str(tmp_path / "eval.json"), cwd=straight)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads((tmp_path / "eval.json").read_text())
    after = json.loads((run / "summary.json").read_text())["after"]
    assert result["tasks"] == after["tasks"]
    out = tmp_path / "episodes.jsonl"
    done = _srpo("rollout", "--checkpoint", str(run), "--tasks", "2", "--group-size", "2",
                 "--out", str(out), cwd=straight)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert rows and {s["role"] for r in rows for s in r["samples"].values()} == set(ROLES)
