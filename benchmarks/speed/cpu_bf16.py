"""bfloat16 autocast against float32 on this CPU, for the tiny model's shape and a
SmolLM2-like one (issue 61: "bf16 autocast on the CPU where it wins").

    python benchmarks/speed/cpu_bf16.py [--rounds 2]

One forward and backward of 8 rows x 224 tokens (logits for the last 32, as the learner
keeps), float32 and under bf16 autocast, interleaved after one untimed pass of each, one
thread. Random weights: the arithmetic, not the values, sets the time. Machines differ
(this workplace lends AMD EPYC with AVX512-BF16 and Intel Xeon without it), so each
machine's rows are kept beside the others' in ``benchmarks/results/cpu_bf16.json`` and
the table shows them all.
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from srpo_agents.models.policy import native_bf16
from srpo_bench.machine import RESULTS, cpu_model, describe, write_results

SHAPES = {"tiny (hidden 128, 4 layers, vocab 260)": dict(hidden_size=128, intermediate_size=512,
                                                         num_attention_heads=4,
                                                         num_key_value_heads=4, vocab_size=260),
          "SmolLM2-like (hidden 576, 4 of its 30 layers, vocab 49152)":
              dict(hidden_size=576, intermediate_size=1536, num_attention_heads=9,
                   num_key_value_heads=3, vocab_size=49152)}


def seconds(model, ids: torch.Tensor, bf16: bool) -> float:
    tick = time.perf_counter()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        logits = model(input_ids=ids, use_cache=False, logits_to_keep=32).logits
    logits.float().log_softmax(-1).mean().backward()
    model.zero_grad(set_to_none=True)
    return time.perf_counter() - tick


def measure(rounds: int) -> list[dict]:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.set_num_threads(1)
    torch.manual_seed(0)
    rows = []
    for name, shape in SHAPES.items():
        model = Qwen2ForCausalLM(Qwen2Config(num_hidden_layers=4, tie_word_embeddings=True,
                                             **shape)).eval()
        ids = torch.randint(1, shape["vocab_size"], (8, 224))
        times = {False: [], True: []}
        seconds(model, ids, False), seconds(model, ids, True)  # untimed: allocations
        for _ in range(rounds):
            for bf16 in (False, True):
                times[bf16].append(seconds(model, ids, bf16))
        rows.append({"cpu": cpu_model(), "native_bf16": native_bf16(), "shape": name,
                     "float32_s": times[False], "bf16_s": times[True],
                     "speedup": sum(times[False]) / sum(times[True])})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--note", default="", help="a sentence on how the run shared the CPU")
    args = parser.parse_args()
    new = measure(args.rounds)
    path = RESULTS / "cpu_bf16.json"
    kept = json.loads(path.read_text()) if path.is_file() else []
    rows = [r for r in kept if (r["cpu"], r["native_bf16"]) != (new[0]["cpu"],
                                                                new[0]["native_bf16"])] + new
    lines = ["# bfloat16 autocast against float32 on the CPU", "",
             f"Command: `python benchmarks/speed/cpu_bf16.py --rounds {args.rounds}` "
             "(latest machine: "
             f"{describe()}; one thread; each row's two columns ran interleaved). "
             f"{args.note}".rstrip(), "",
             "One forward and backward of 8 rows x 224 tokens, float32 against bf16 autocast.", "",
             "| CPU | native bf16 | shape | float32 s | bf16 s | float32 / bf16 |",
             "|---|---|---|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['cpu']} | {'yes' if r['native_bf16'] else 'no'} | {r['shape']} | "
                     + " / ".join(f"{s:.2f}" for s in r["float32_s"]) + " | "
                     + " / ".join(f"{s:.2f}" for s in r["bf16_s"]) + f" | {r['speedup']:.2f} |")
    write_results("cpu_bf16", lines, rows)


if __name__ == "__main__":
    main()
