"""The hf decode loop on a GPU's terms, checked on the CPU: the host looks at the batch
only every ``sync_every`` steps (each look stalls a GPU), and ``compile=True`` decodes
with a static cache whose steps all have one shape (what ``torch.compile`` and CUDA
graphs need). Both must emit what the step-by-step loop emits."""

from __future__ import annotations

import pytest
import torch

from srpo_agents.config import TrainConfig
from srpo_agents.rollout.engine import RolloutEngine
from srpo_agents.rollout.hf_generator import HFGenerator, _bucket
from srpo_agents.rollout.sampling import Sampling
from srpo_agents.tiny import build_tiny_policy

TEXTS = ["What is 2+2?", "Hi", "You are a math solver.\nProblem: 17 * 3 = ?\n", "x"]
LIMIT = 24


@pytest.fixture(scope="module")
def policy(tmp_path_factory):
    texts = TEXTS + ["Solution: 4 + 7 = 11, so the answer is \\boxed{11}."]
    policy = build_tiny_policy(texts, tmp_path_factory.mktemp("tiny") / "policy")
    # Spread the weights: the fresh tiny model repeats one token under greedy decoding,
    # and rows that differ are what these tests compare.
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for parameter in policy.model.parameters():
            parameter.add_(0.3 * torch.randn(parameter.shape, generator=generator))
    return policy


@pytest.fixture
def scattered_stops(policy, monkeypatch):
    """Eight extra EOS ids, so rows end at scattered steps and finished rows must be
    handled (dropped, or decoded unrecorded) while others go on."""
    stops = [policy.tokenizer.eos_token_id] + policy.tokenizer.encode("abcdefgh")
    monkeypatch.setattr(policy.model.generation_config, "eos_token_id", stops)
    return stops


def _prompts(policy) -> list[list[int]]:
    texts = TEXTS + [f"Problem {i}: what is {i} + {i}?" for i in range(8)] + TEXTS[:2]
    return [policy.prompt_ids("solver", t) for t in texts]   # duplicates share a prefill


def _generator(policy, temperature: float, **kwargs) -> HFGenerator:
    generator = HFGenerator(policy, max_new_tokens=LIMIT, temperature=temperature, top_p=1.0,
                            max_batch=64, seed=2, **{k: v for k, v in kwargs.items()
                                                     if k != "backend"})
    generator.compile_backend = kwargs.get("backend")
    return generator


def _teacher_forced(policy, prompt, ids, temperature):
    with torch.no_grad():
        logits = policy.model(torch.tensor([prompt + ids])).logits[0].float()
    scores = torch.log_softmax(logits[len(prompt) - 1:-1] / temperature, dim=-1)
    return scores.gather(-1, torch.tensor(ids)[:, None]).squeeze(-1)


LOOPS = {"host looks every 5 steps": {"sync_every": 5},
         "compiled, static cache": {"compile": True, "backend": "eager"}}


@pytest.mark.parametrize("loop", list(LOOPS))
def test_greedy_tokens_and_logprobs_are_the_step_by_step_loops(policy, monkeypatch, loop):
    prompts = _prompts(policy)
    unstopped = _generator(policy, 0.0, sync_every=1).generate(prompts)
    # Greedy rows end where a token of theirs is made an EOS id: a few rows' tokens at
    # scattered steps, so rows end at different steps and others run to the limit.
    stops = {unstopped[row][0][step] for row, step in ((0, 3), (2, 9), (5, 14))}
    monkeypatch.setattr(policy.model.generation_config, "eos_token_id",
                        [policy.tokenizer.eos_token_id, *stops])
    reference = _generator(policy, 0.0, sync_every=1).generate(prompts)
    outputs = _generator(policy, 0.0, **LOOPS[loop]).generate(prompts)
    assert len({len(ids) for ids, _, _ in reference}) >= 3
    assert any(done for _, _, done in reference) and not all(d for _, _, d in reference)
    for (ids, logprobs, done), (ref_ids, ref_logprobs, ref_done) in zip(
            outputs, reference, strict=True):
        assert ids == ref_ids and done == ref_done
        torch.testing.assert_close(torch.tensor(logprobs), torch.tensor(ref_logprobs),
                                   rtol=0, atol=1e-4)


@pytest.mark.parametrize("loop", list(LOOPS))
def test_sampled_rows_match_their_own_teacher_forced_forward(policy, scattered_stops,
                                                             loop):
    """Finished rows decoding unrecorded, spare rows of the padded batch and shared
    prefills must not leak into any row: each row's log-probs are its own forward's."""
    prompts = _prompts(policy)
    outputs = _generator(policy, 1.0, **LOOPS[loop]).generate(prompts)
    assert len({len(ids) for ids, _, _ in outputs}) > 3   # rows ended at scattered steps
    for prompt, (ids, logprobs, done) in zip(prompts, outputs, strict=True):
        assert done == (ids[-1] in scattered_stops) and not set(ids[:-1]) & set(scattered_stops)
        assert done or len(ids) == LIMIT
        torch.testing.assert_close(torch.tensor(logprobs),
                                   _teacher_forced(policy, prompt, ids, 1.0),
                                   rtol=0, atol=1e-4)


def test_the_host_reads_the_batch_every_sync_every_steps(policy, monkeypatch):
    """A GPU stalls whenever the host reads a device value (``int``, ``bool``, ``.item``,
    ``.tolist``); the loop did once per token (``int(live.sum())``), and now once per
    ``sync_every`` steps, plus the final collection."""
    reads = []
    for name in ("__int__", "__bool__", "item", "tolist"):
        original = getattr(torch.Tensor, name)
        monkeypatch.setattr(torch.Tensor, name,
                            lambda self, *a, _o=original, _n=name, **k:
                            reads.append(_n) or _o(self, *a, **k))
    prompts = _prompts(policy)

    def count(every: int, tokens: int) -> int:
        reads.clear()
        generator = _generator(policy, 0.0, sync_every=every)
        generator.default = Sampling(0.0, 1.0, tokens)
        generator.generate(prompts)
        return len(reads)

    fixed = count(8, 1)      # the prefill's and the final collection's, once per batch
    assert count(1, LIMIT) - fixed >= LIMIT - 1
    assert count(8, LIMIT) - fixed <= LIMIT // 8


def test_a_compiled_step_is_traced_once_per_shape(policy):
    """Every decode step of the compiled loop has the same shapes and reads no Python
    number that changes, so dynamo traces it once and a second batch of the same bucket
    reuses it (a retrace per step would make it slower than the plain loop)."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    generator = _generator(policy, 1.0, compile=True, backend="eager")
    prompts = _prompts(policy)
    generator.generate(prompts)
    traced = counters["stats"]["unique_graphs"]
    generator.generate(prompts[:-1])   # 13 rows: the same bucket of 16
    assert 1 <= traced <= 2 and counters["stats"]["unique_graphs"] == traced
    assert len(generator._static_caches) == 1


def test_batch_shapes_are_bucketed():
    assert [_bucket(n, 8) for n in (1, 8, 9, 33, 64, 65, 130)] == [8, 8, 16, 64, 64, 128, 192]
    assert _bucket(200, 128) == 256 and _bucket(1100, 128) == 2048


def test_the_flags_reach_the_engine_and_pi_old(policy):
    config = TrainConfig(model="x", max_batch=48, hf_compile=True, device="cpu")
    assert config.learner().pi_old == "learner"     # compiled kernels round differently
    assert TrainConfig(model="x", device="cpu").learner().pi_old == "sampler"
    engine = RolloutEngine(policy, max_batch=48, hf_compile=True)
    assert engine._generator.max_batch == 48 and engine._generator.compile
    with pytest.raises(ValueError, match="max_batch=0: expected"):
        TrainConfig(model="x", max_batch=0)
    with pytest.raises(ValueError, match="hf_compile with backend='vllm'"):
        TrainConfig(model="x", hf_compile=True, backend="vllm")
    with pytest.raises(ValueError, match="vllm_compile with backend='hf'"):
        TrainConfig(model="x", vllm_compile=True)


def test_the_compiled_loop_leaves_stop_strings_to_the_step_by_step_loop(policy):
    """Stop strings need the host to read every token's text: with them the compiled
    generator decodes step by step, and stops where the plain loop stops."""
    prompts = _prompts(policy)[:4]
    stop = Sampling(1.0, 1.0, LIMIT, stop=("a",))
    compiled = _generator(policy, 1.0, compile=True, backend="eager")
    plain = _generator(policy, 1.0)
    assert compiled.generate(prompts, sampling=[stop] * 4) == \
        plain.generate(prompts, sampling=[stop] * 4)
    assert compiled._static_caches == {}


def test_static_caches_kept_are_bounded(policy):
    generator = _generator(policy, 1.0, compile=True, backend="eager")
    generator.static_caches_kept = 2
    for rows, capacity in ((8, 128), (16, 128), (8, 256), (16, 128)):
        generator._static_cache(rows, capacity)
    assert list(generator._static_caches) == [(8, 256), (16, 128)]   # most recent last
