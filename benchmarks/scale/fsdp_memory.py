"""Memory per GPU of a full-parameter SRPO run on FSDP2 (``--data-parallel --fsdp
full_shard``), by arithmetic: Qwen2.5 1.5B, 7B and 14B on 8 GPUs. Not measured; no GPU
has run this recipe yet.

    python benchmarks/scale/fsdp_memory.py    # writes benchmarks/results/fsdp_memory.md

What lives on one GPU (N parameters, W ranks), as ``srpo_agents/models/sharding.py``
keeps it:

- **always**: the float32 master weights and AdamW's two float32 moments, sharded:
  12 N / W bytes;
- **while generating and scoring pi_old** (``full_weights``): every layer gathered in
  bf16 (2 N bytes) and hf's KV cache (2 x layers x KV heads x head dim x 2 bytes a
  token, for every token of every sequence in flight);
- **while updating**: the float32 gradients, sharded (4 N / W), two decoder blocks
  gathered in bf16 (the one running and the one prefetched), the logits of a
  micro-batch and their gradient in float32 (2 x rows x tokens x vocabulary x 4), and,
  with activation checkpointing, one bf16 hidden state a layer (layers x rows x tokens
  x hidden x 2).

The peak is the larger phase. Left out: the CUDA context and allocator slack (a few
GiB), one block's own activations during its recomputation, and a KL reference
(``--beta`` > 0): sharded as the policy is, in the masters' dtype (4 N / W bytes a rank,
3.5 GiB at 7B), and gathered in bf16 once an update to score (2 N, inside the
generation phase's peak).
"""

from __future__ import annotations

from pathlib import Path

# Qwen2.5 model cards' configs: parameters, layers, hidden size, KV heads, head dim, vocab
MODELS = {
    "Qwen2.5-1.5B": dict(params=1.54e9, layers=28, hidden=1536, kv_heads=2, head_dim=128,
                         vocab=151_936),
    "Qwen2.5-7B": dict(params=7.62e9, layers=28, hidden=3584, kv_heads=4, head_dim=128,
                       vocab=151_936),
    "Qwen2.5-14B": dict(params=14.8e9, layers=48, hidden=5120, kv_heads=8, head_dim=128,
                        vocab=152_064),
}
GPUS = 8
GPU_GIB = 80
SEQUENCES = 64            # sequences a rank generates at once
PROMPT, NEW = 512, 1024   # tokens a sequence: its prompt and at most this many new ones
ROWS = 4                  # rows a training micro-batch
GIB = 2**30


def per_gpu(model: dict) -> dict[str, float]:
    n, layers = model["params"], model["layers"]
    tokens = PROMPT + NEW
    state = 12 * n / GPUS
    kv = 2 * layers * model["kv_heads"] * model["head_dim"] * 2 * SEQUENCES * tokens
    generation = state + 2 * n + kv
    block = 2 * (n / layers) * 2
    logits = 2 * ROWS * tokens * model["vocab"] * 4
    hidden = layers * ROWS * tokens * model["hidden"] * 2
    update = state + 4 * n / GPUS + block + logits + hidden
    return {"state": state / GIB, "whole_bf16": 2 * n / GIB, "kv": kv / GIB,
            "generation": generation / GIB, "grads": 4 * n / GPUS / GIB,
            "logits": logits / GIB, "hidden": hidden / GIB, "update": update / GIB,
            "peak": max(generation, update) / GIB, "one_gpu": 16 * n / GIB}


def main() -> None:
    lines = ["# Memory per GPU of full-parameter SRPO on FSDP2, by arithmetic", "",
             f"`python benchmarks/scale/fsdp_memory.py`: {GPUS} GPUs of {GPU_GIB} GiB, "
             f"`--fsdp full_shard`, bf16 compute over float32 masters; {SEQUENCES} "
             f"sequences of {PROMPT} + {NEW} tokens generated at once a rank; training "
             f"micro-batches of {ROWS} rows of {PROMPT + NEW} tokens with activation "
             "checkpointing. Not yet run on GPUs: arithmetic only (the script's docstring "
             "says what each term is and what is left out). GiB.", "",
             "| model | masters + AdamW, sharded | whole bf16 weights | KV cache | "
             "generating | gradients, sharded | logits + grad | hidden states | "
             "updating | peak | fits | one GPU, unsharded state |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|"]
    for name, model in MODELS.items():
        m = per_gpu(model)
        fits = "yes" if m["peak"] < GPU_GIB * 0.9 else "no: fewer sequences at once"
        lines.append(
            f"| {name} | {m['state']:.1f} | {m['whole_bf16']:.1f} | {m['kv']:.1f} | "
            f"{m['generation']:.1f} | {m['grads']:.1f} | {m['logits']:.1f} | "
            f"{m['hidden']:.1f} | {m['update']:.1f} | {m['peak']:.1f} | {fits} | "
            f"{m['one_gpu']:.0f} |")
    lines += ["", "Fits: the peak under 90% of the card (the rest for the CUDA context and "
              "allocator slack). The last column is masters, gradients and AdamW on one "
              "device (16 bytes a parameter), before any activation: why 7B and 14B "
              "need the state sharded."]
    out = Path(__file__).resolve().parents[1] / "results" / "fsdp_memory.md"
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
