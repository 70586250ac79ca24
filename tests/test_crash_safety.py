"""Crash safety: a training run killed with SIGKILL during generation, during the update
or while a checkpoint is written resumes with ``--resume`` to exactly the metrics of an
uninterrupted run; corrupt checkpoints are refused by name and the previous good one is
used; a torn metrics line is dropped; nothing is ever unpickled."""

import json
import os
import pickle
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from srpo_agents.running.checkpoint import CheckpointError, checkpoint_dirs, read_checkpoint

pytestmark = [pytest.mark.slow, pytest.mark.heavy]  # make test-heavy runs it

ROOT = Path(__file__).resolve().parents[1]
STEPS = 4
KILL_POINTS = ("generation@2", "update@2", "checkpoint@2")


def _train(out: Path, warm: Path, *extra: str, kill_at: str = "", cwd: Path):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT),
           "SRPO_CACHE_DIR": str(cwd / "cache")}
    env.pop("SRPO_KILL_AT", None)
    if kill_at:
        env["SRPO_KILL_AT"] = kill_at
    args = ["--env", "SRPO-Countdown-v0", "--workflow", "parallel", "--n-agents", "2",
            "--steps", str(STEPS), "--group-size", "2", "--tasks-per-step", "2",
            "--eval-tasks", "4", "--eval-k", "2", "--max-new-tokens", "6", "--lr", "1e-3",
            "--model", "tiny", "--warmstart-steps", "2", "--warmstart-target", "1.0",
            "--warmstart-dir",
            str(warm), "--save-every", "1", "--out", str(out), *extra]
    return subprocess.run([sys.executable, "-m", "srpo_agents.cli", "train", *args],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def _resume_in_process(run: Path) -> None:
    """What ``srpo train --resume`` does with ``run``'s checkpoints (no subprocess)."""
    from srpo_agents.running.checkpoint import load_checkpoint
    from srpo_agents.tiny import build_tiny_policy

    policy = build_tiny_policy(["0123456789+-*/()"], run.parent / f"{run.name}-tiny",
                               hidden_size=32, num_layers=1, num_heads=2)
    optimizer = torch.optim.AdamW(policy.model.parameters())
    load_checkpoint(run, policies={"shared": policy}, optimizers={"shared": optimizer},
                    generators={}, log=lambda *_: None)


def _rows(run: Path) -> list[dict]:
    lines = (run / "metrics.jsonl").read_text().splitlines()
    return [{k: v for k, v in json.loads(line).items() if not k.endswith("seconds")}
            for line in lines]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """An uninterrupted run (and the warm start every run here shares)."""
    root = tmp_path_factory.mktemp("crash")
    done = _train(root / "straight", root / "warm", cwd=root)
    assert done.returncode == 0, done.stderr[-3000:]
    yield root, _rows(root / "straight")
    shutil.rmtree(root, ignore_errors=True)  # a checkpoint folder a killed run


@pytest.mark.parametrize("point", KILL_POINTS)
def test_a_killed_run_resumes_to_the_uninterrupted_metrics(reference, point):
    root, straight = reference
    run = root / f"killed-{point.replace('@', '-')}"
    killed = _train(run, root / "warm", kill_at=point, cwd=root)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    steps_done = [row["step"] for row in _rows(run)]
    assert steps_done == [0, 1] + ([2] if point == "checkpoint@2" else [])
    if point == "checkpoint@2":  # the kill left a half-written checkpoint behind
        assert list((run / "checkpoints").glob(".tmp-step-00000003-*"))
        assert [d.name for d in checkpoint_dirs(run)] == ["step-00000002", "step-00000001"]
    # the checkpoint keeps the run's seconds so far (its steps, evaluation, loading)
    kept = json.loads((checkpoint_dirs(run)[0] / "state.json").read_text())["payload"]
    earlier = kept["extra"]["wall_s"]
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert earlier > sum(row["seconds"] for row in rows[:kept["step"]])
    resumed = _train(run, root / "warm", "--resume", cwd=root)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resumed from" in resumed.stdout + resumed.stderr
    assert _rows(run) == straight
    assert not list((run / "checkpoints").glob(".tmp-*"))  # swept by the next save
    summary = json.loads((run / "summary.json").read_text())
    reference_summary = json.loads((root / "straight" / "summary.json").read_text())
    assert summary["after"]["per_task_avg"] == reference_summary["after"]["per_task_avg"]
    # the wall time spans both invocations: what ran before the kill, up to the
    # checkpoint, and the resumed part (its before evaluation counted once)
    assert summary["time_breakdown"]["total"] == round(summary["wall_time_s"], 2) > earlier
    assert summary["time_breakdown"]["evaluation"] >= kept["extra"]["eval_seconds"] > 0


ASYNC = ("--max-staleness", "2")


@pytest.mark.parametrize("point", ["update@2", "checkpoint@2"])
def test_a_killed_async_run_resumes_to_the_uninterrupted_metrics(reference, point):
    """Asynchronous SRPO (two batches ahead, rollouts in their own process): a checkpoint
    holds the batches made but not yet used and the process's samplers, so a resumed run
    uses each batch once and generates the rest as the uninterrupted run did."""
    root, _ = reference
    straight = root / "async-straight"
    if not straight.exists():
        done = _train(straight, root / "warm", *ASYNC, cwd=root)
        assert done.returncode == 0, done.stderr[-3000:]
    run = root / f"async-killed-{point.replace('@', '-')}"
    killed = _train(run, root / "warm", *ASYNC, kill_at=point, cwd=root)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    state = json.loads(sorted((run / "checkpoints").glob("step-*/state.json"))[-1]
                       .read_text())
    assert [b["step"] for b in state["payload"]["extra"]["async"]["batches"]] == [2, 3]
    resumed = _train(run, root / "warm", *ASYNC, "--resume", cwd=root)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    rows = _rows(run)
    assert rows == _rows(straight)
    assert [r["generated_with_version"] for r in rows] == [0, 0, 0, 1]


def test_corrupt_checkpoints_are_refused_by_name_and_the_previous_is_used(reference):
    root, straight = reference
    run = root / "corrupt"
    shutil.copytree(root / "straight", run)
    newest, previous = checkpoint_dirs(run)
    assert [newest.name, previous.name] == ["step-00000004", "step-00000003"]
    tensors = newest / "tensors.safetensors"
    tensors.write_bytes(tensors.read_bytes()[: tensors.stat().st_size // 2])  # truncated
    with pytest.raises(CheckpointError, match=r"step-00000004/tensors.safetensors is "
                                              r"missing, truncated or corrupt"):
        read_checkpoint(newest)
    # resume from step 3 with a budget of 4: step 3 is replayed exactly
    metrics = run / "metrics.jsonl"
    metrics.write_text(metrics.read_text() + '{"step": 4, "accur')  # a torn last line
    resumed = _train(run, root / "warm", "--resume", cwd=root)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    output = resumed.stdout + resumed.stderr
    assert "checkpoint skipped" in output and "step-00000004/tensors.safetensors" in output
    assert "resumed from" in output and "step-00000003 at step 3" in output
    assert _rows(run) == straight

    state = previous / "state.json"  # now the older one; corrupt its JSON payload
    data = json.loads(state.read_text())
    data["payload"]["step"] = 99
    state.write_text(json.dumps(data))
    with pytest.raises(CheckpointError, match="payload does not match its checksum"):
        read_checkpoint(previous)


def test_no_usable_checkpoint_is_a_clear_error(reference, tmp_path):
    root, _ = reference
    run = tmp_path / "none-good"
    shutil.copytree(root / "straight", run)
    for folder in checkpoint_dirs(run):
        (folder / "state.json").write_text("{not json")
    with pytest.raises(CheckpointError, match=r"no usable checkpoint.*state.json"):
        _resume_in_process(run)


def test_a_malicious_pickle_is_never_loaded(reference, tmp_path):
    root, _ = reference
    run = tmp_path / "planted"
    run.mkdir()
    marker = tmp_path / "pwned"

    class Exploit:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    (run / "checkpoint.pt").write_bytes(pickle.dumps({"step": 1, "x": Exploit()}))
    with pytest.raises(CheckpointError, match=r"old pickle format.*arbitrary code"):
        _resume_in_process(run)
    assert not marker.exists()
