"""The device and dtype path: "auto" picks CUDA and bfloat16 when a GPU is present, the
CPU and float32 otherwise. The bfloat16 path is exercised on the CPU here (CPUs run
bf16 matmuls), with the same results contract as float32; the CUDA run is skipped
without a GPU (benchmarks/gpu_check.sh runs it on a GPU machine)."""

import json
import math

import pytest
import torch

from srpo_agents.config import TrainConfig
from srpo_agents.models.policy import resolve_device, resolve_dtype
from srpo_agents.running.train import train
from srpo_agents.tiny.config import tiny_run

BASE = dict(env="SRPO-Countdown-v0", workflow="single", steps=2, group_size=2,
            tasks_per_step=2, eval_tasks=4, eval_k=2, max_new_tokens=6, lr=1e-3,
            warmstart_steps=2, warmstart_target=1.0, save_every=1)


def test_auto_resolution_and_bad_values():
    assert resolve_device("auto") == ("cuda" if torch.cuda.is_available() else "cpu")
    assert resolve_device("cpu") == "cpu"
    assert resolve_dtype("auto", "cpu") is torch.float32
    assert resolve_dtype("auto", "cuda:1") is torch.bfloat16
    assert resolve_dtype("float16", "cpu") is torch.float16
    with pytest.raises(ValueError, match="dtype='fp8'"):
        resolve_dtype("fp8", "cpu")
    with pytest.raises(ValueError, match="dtype='half'"):
        TrainConfig(dtype="half")


def _summary_keys(summary):
    return {k: sorted(v) if isinstance(v, dict) else None for k, v in summary.items()
            if k != "warm_start"}  # the second run finds the warm start cached


@pytest.mark.slow
def test_bfloat16_trains_and_resumes_with_the_float32_contract(tmp_path):
    warm = str(tmp_path / "warm")
    fp32 = train(TrainConfig(**tiny_run(BASE, device="cpu", warmstart_dir=warm, out=str(tmp_path / "a"))),
                 log=lambda *_: None)
    bf16 = train(TrainConfig(**tiny_run(BASE, device="cpu", dtype="bfloat16", warmstart_dir=warm,
                             out=str(tmp_path / "b"))), log=lambda *_: None)
    assert _summary_keys(bf16) == _summary_keys(fp32)
    rows = [json.loads(x) for x in (tmp_path / "b" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1] and all(r["updates"] >= 1 for r in rows)
    assert all(abs(v) < 1e6 for r in rows for v in r.values() if isinstance(v, float))
    config = json.loads((tmp_path / "b" / "policy" / "config.json").read_text())
    assert config.get("dtype", config.get("torch_dtype")) == "bfloat16"
    again = train(TrainConfig(**tiny_run({**BASE, "steps": 3}, device="cpu", dtype="bfloat16",
                              warmstart_dir=warm, out=str(tmp_path / "b"), resume=True)),
                  log=lambda *_: None)
    assert again["after"]["tasks"] == 4


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this machine")
def test_cuda_bfloat16_training(tmp_path):
    summary = train(TrainConfig(**tiny_run(BASE, device="auto", out=str(tmp_path / "gpu"))),
                    log=lambda *_: None)
    assert summary["after"]["tasks"] == 4
    # "auto" found the GPU and trained in bfloat16 there (the CPU default is float32)
    config = json.loads((tmp_path / "gpu" / "policy" / "config.json").read_text())
    assert config.get("dtype", config.get("torch_dtype")) == "bfloat16"
    rows = [json.loads(x) for x in (tmp_path / "gpu" / "metrics.jsonl").read_text().splitlines()]
    assert all(r["updates"] >= 1 and math.isfinite(r["loss"]) for r in rows)
