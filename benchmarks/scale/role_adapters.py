"""One LoRA per role against one full copy per role: memory and time.

    python benchmarks/scale/role_adapters.py [--repeats 3] [--rank 8]

Measured, in one process:
- **trainable parameters and optimizer bytes** of the tiny policy's team on
  SRPO-Math-v0's parallel workflow (two roles: solver and aggregator), read off the real
  learners after one update:
  ``per_role_policies`` (a full copy and its AdamW state per role) against
  ``per_role_adapters="lora"`` (one frozen base, an adapter per role);
- the same counts for a **Qwen2.5-3B-shaped** team of three roles, built on PyTorch's
  meta device from the model's published shape (no weights are downloaded or allocated),
  with bf16 weights as the trainer loads them on a GPU (PEFT keeps the adapters in
  float32);
- **update time per event** of both on the tiny team: the same 16 x G=8 batch, each
  update after an untimed warm-up, interleaved, the median of ``--repeats``, and their
  ratio;
- **sampling with mixed-role batches** against one batch per role (hf backend): the
  same prompts, median of ``--repeats``, and the ratio.

Writes ``benchmarks/results/role_adapters.md`` and ``.json``.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import tempfile
import time
from pathlib import Path

import torch

from srpo_agents.learning.events import UnitBatch
from srpo_agents.learning.learner import Learner, LearnerConfig
from srpo_agents.learning.objective import ALGORITHMS
from srpo_agents.models.adapters import attach_role_adapters
from srpo_agents.rollout.engine import RolloutEngine
from srpo_agents.running.step import update_policies
from srpo_agents.tiny import build_tiny_policy
from srpo_agents.tiny.warmstart import TINY_SHAPE
from srpo_bench.batches import make_batch
from srpo_bench.machine import describe, write_results
from srpo_bench.memory import optimizer_bytes, trainable, weights_bytes

QWEN25_3B = {"hidden_size": 2048, "intermediate_size": 11008, "num_hidden_layers": 36,
             "num_attention_heads": 16, "num_key_value_heads": 2, "vocab_size": 151936,
             "tie_word_embeddings": True, "max_position_embeddings": 32768}
"""Qwen2.5-3B's shape (its config.json on the Hugging Face hub)."""

ROLES = ("solver", "aggregator", "verifier")


def qwen_counts(rank: int) -> dict:
    """Parameters and bytes of a Qwen2.5-3B-shaped team of three roles, on the meta
    device: full copies (bf16 weights, bf16 AdamW moments: the learner's optimizer state
    is in the model's dtype) against one bf16 base and three float32 adapters with
    float32 moments."""
    from peft import LoraConfig, get_peft_model
    from transformers import Qwen2Config, Qwen2ForCausalLM

    with torch.device("meta"):
        model = Qwen2ForCausalLM(Qwen2Config(**QWEN25_3B)).to(torch.bfloat16)
    base = sum(p.numel() for p in model.parameters())
    for i, role in enumerate(ROLES):
        config = LoraConfig(r=rank, lora_alpha=2 * rank, target_modules="all-linear",
                            lora_dropout=0.0, task_type="CAUSAL_LM")
        if i == 0:
            model = get_peft_model(model, config, adapter_name=role)
        else:
            model.add_adapter(role, config)
    lora = sum(p.numel() for n, p in model.named_parameters() if "lora_" in n)
    return {
        "base_parameters": base, "roles": len(ROLES), "rank": rank,
        "full": {"trainable": len(ROLES) * base, "weights_bytes": len(ROLES) * base * 2,
                 "optimizer_bytes": len(ROLES) * base * 2 * 2},
        "lora": {"trainable": lora, "weights_bytes": base * 2 + lora * 4,
                 "optimizer_bytes": lora * 4 * 2},
    }


def timed(function, repeats: int) -> list[float]:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rank", type=int, default=8)
    args = parser.parse_args()
    torch.manual_seed(0)
    folder = Path(tempfile.mkdtemp(prefix="srpo-adapters-"))
    digits = ["0123456789+-*/=() Solve. Answer: The answer is"]
    base = build_tiny_policy(digits, folder / "tiny", **TINY_SHAPE)
    units, advantages = make_batch(base, tasks=16, group=8, max_new_tokens=32)
    batch = UnitBatch(units, advantages)
    roles = sorted({u.members[0].role for u in units})
    events = len(units)
    config = LearnerConfig(lr=1e-6, microbatch_rows=32)
    algorithm = ALGORITHMS["srpo"]

    full = {role: Learner(copy.deepcopy(base), algorithm, config) for role in roles}
    adapters = attach_role_adapters(copy.deepcopy(base), roles, rank=args.rank,
                                    alpha=2 * args.rank)
    lora = {"shared": Learner(adapters, algorithm, config)}
    for learners in (full, lora):  # warm-up, and the optimizer state exists after it
        update_policies(learners, batch)
    seconds = {"full": [], "lora": []}
    for _ in range(args.repeats):  # interleaved: drift in the machine hits both
        for name, learners in (("full", full), ("lora", lora)):
            seconds[name] += timed(lambda learners=learners: update_policies(
                learners, batch), 1)
    tiny = {
        "roles": roles, "events": events, "rank": args.rank,
        "full": {"trainable": trainable(lrn.policy.model for lrn in full.values()),
                 "weights_bytes": weights_bytes(lrn.policy.model for lrn in full.values()),
                 "optimizer_bytes": optimizer_bytes(lrn.optimizer for lrn in full.values()),
                 "update_seconds": statistics.median(seconds["full"])},
        "lora": {"trainable": trainable([adapters.model]),
                 "weights_bytes": weights_bytes([adapters.model]),
                 "optimizer_bytes": optimizer_bytes([lora["shared"].optimizer]),
                 "update_seconds": statistics.median(seconds["lora"])},
    }
    # sampling: every row under its role's adapter in one batch, or one batch per role
    engine = RolloutEngine(adapters, max_new_tokens=32, seed=0)
    samples = [m for u in units for m in u.members]
    prompts, row_roles = [s.prompt_ids for s in samples], [s.role for s in samples]

    def per_role() -> None:
        for role in roles:
            index = [i for i, r in enumerate(row_roles) if r == role]
            engine._generator.generate([prompts[i] for i in index], [role] * len(index))

    engine._generator.generate(prompts, row_roles)  # warm-up
    sampling = {"rows": len(prompts), "mixed": [], "per_role": []}
    for _ in range(args.repeats):
        sampling["mixed"] += timed(lambda: engine._generator.generate(prompts, row_roles), 1)
        sampling["per_role"] += timed(per_role, 1)
    sampling = {"rows": sampling["rows"], "mixed_seconds": statistics.median(sampling["mixed"]),
                "per_role_seconds": statistics.median(sampling["per_role"])}
    qwen = qwen_counts(args.rank)
    results = {"tiny": tiny, "sampling": sampling, "qwen2.5-3b": qwen}

    def mib(n: int) -> str:
        return f"{n / 2**20:,.1f} MiB" if n < 2**30 else f"{n / 2**30:,.2f} GiB"

    t, q = tiny, qwen
    lines = ["# One LoRA per role against one full copy per role", "",
             f"Command: `python benchmarks/scale/role_adapters.py --repeats {args.repeats} "
             f"--rank {args.rank}`", "", f"Machine: {describe()}.", "",
             f"## The tiny team ({', '.join(roles)}; SRPO-Math-v0 parallel, 16 x G=8, "
             f"{events} events, rank {args.rank}, all linear layers)", "",
             "| | trainable parameters | weights | AdamW state | update of one batch | "
             "per event |", "|---|---:|---:|---:|---:|---:|"]
    for name, label in (("full", "per_role_policies"), ("lora", "per_role_adapters lora")):
        row = t[name]
        lines.append(f"| {label} | {row['trainable']:,} | {mib(row['weights_bytes'])} | "
                     f"{mib(row['optimizer_bytes'])} | {row['update_seconds']:.2f} s | "
                     f"{1000 * row['update_seconds'] / events:.1f} ms |")
    lines += ["", f"Update time, adapters / full copies: "
              f"{t['lora']['update_seconds'] / t['full']['update_seconds']:.2f} "
              f"(median of {args.repeats}, interleaved).", "",
              f"Sampling the batch's {sampling['rows']} rows (hf backend, 32 new tokens): "
              f"mixed-role batches {sampling['mixed_seconds']:.2f} s, one batch per role "
              f"{sampling['per_role_seconds']:.2f} s (ratio "
              f"{sampling['mixed_seconds'] / sampling['per_role_seconds']:.2f}).", "",
              f"## A Qwen2.5-3B-shaped team of {q['roles']} roles (meta device, rank "
              f"{q['rank']}, all linear layers)", "",
              f"Base: {q['base_parameters'] / 1e9:.2f} B parameters.", "",
              "| | trainable parameters | weights | AdamW state |", "|---|---:|---:|---:|"]
    for name, label in (("full", "per_role_policies (bf16)"),
                        ("lora", "per_role_adapters lora (bf16 base, fp32 adapters)")):
        row = q[name]
        lines.append(f"| {label} | {row['trainable'] / 1e6:,.1f} M | "
                     f"{mib(row['weights_bytes'])} | {mib(row['optimizer_bytes'])} |")
    ratio = (q["full"]["weights_bytes"] + q["full"]["optimizer_bytes"]) / (
        q["lora"]["weights_bytes"] + q["lora"]["optimizer_bytes"])
    lines += ["", f"Weights and optimizer state together: {ratio:.1f}x less with adapters "
              f"(activations and the KV cache not counted)."]
    write_results("role_adapters", lines, results)


if __name__ == "__main__":
    main()
