"""The learner's weights to rollout workers by a collective (``rollout.weight_sync``):
two processes on gloo, a model with a tied head, buckets smaller than the model."""

from __future__ import annotations

import multiprocessing

import pytest
import torch


def _model(seed: int):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    return Qwen2ForCausalLM(Qwen2Config(vocab_size=64, hidden_size=32, intermediate_size=64,
                                        num_hidden_layers=2, num_attention_heads=4,
                                        num_key_value_heads=2, tie_word_embeddings=True))


def _member(rank: int, port: int, dtype: str, results) -> None:
    from srpo_agents.rollout import weight_sync

    weight_sync.BUCKET_BYTES = 4096  # several buckets for a model of a few hundred KB
    group = weight_sync.WeightGroup("127.0.0.1", port, rank, 2, generation=3)
    model = _model(seed=rank)  # the worker starts from other weights
    if rank == 0:
        results.put(("sent", group.send(model, getattr(torch, dtype))))
    else:
        group.receive(model, getattr(torch, dtype))
    # numpy arrays travel by value (a tensor through a queue is shared memory, which a
    # process that has exited no longer serves)
    results.put((rank, {k: v.numpy().copy() for k, v in model.state_dict().items()}))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_a_worker_receives_the_learners_weights(dtype):
    from srpo_agents.rollout.weight_sync import free_port

    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    port = free_port()
    members = [context.Process(target=_member, args=(rank, port, dtype, results))
               for rank in (0, 1)]
    for member in members:
        member.start()
    got = dict(results.get(timeout=120) for _ in range(3))
    for member in members:
        member.join(timeout=60)
        assert member.exitcode == 0
    learner, worker = ({k: torch.from_numpy(v) for k, v in got[r].items()} for r in (0, 1))
    assert not torch.equal(_model(1).model.embed_tokens.weight, learner["model.embed_tokens.weight"])
    for name, tensor in learner.items():
        expected = tensor.to(getattr(torch, dtype)).to(tensor.dtype)  # the wire's rounding
        assert torch.equal(worker[name], expected), name
    assert torch.equal(worker["lm_head.weight"], worker["model.embed_tokens.weight"])  # tied
    # the tied head went once: bytes of the unique tensors in the wire's dtype
    unique = sum(t.numel() for n, t in learner.items() if n != "lm_head.weight")
    assert got["sent"] == unique * torch.tensor([], dtype=getattr(torch, dtype)).element_size()
