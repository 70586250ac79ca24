"""Learner update time: srpo's ``Learner.update`` against TRL's ``GRPOTrainer`` loss on
the same tiny model, the same sampled rows and the same micro-batch size.

Both sides take one optimizer step over one batch of rollouts (16 tasks x G=8 episodes
of SRPO-Math-v0's parallel workflow: 3 solvers + 1 aggregator = 512 sampled rows):
forward over prompt + response, the clipped loss, backward in micro-batches of 32 rows,
gradient clipping and AdamW. TRL gets the rows as GRPO completions
(``prompt_ids``/``completion_ids`` with masks and advantages) through
``GRPOTrainer.compute_loss``; its generation is not timed, as ours is not. Same process,
TRL first, each after one untimed warm-up step; the median of ``--repeats`` is reported.

    pip install trl   # the `bench` extra
    python benchmarks/speed/learner_vs_trl.py [--repeats 3]
    python benchmarks/speed/learner_vs_trl.py --real [--repeats 2]

``--real``: the same comparison on SmolLM2-135M-Instruct (the pinned
``smollm2-135m-instruct`` source) and the batch of ``real_model_run.py``'s team: 4 tasks
x G=8 SRPO-Math-v0 ``solve_verify`` episodes (one round, level 1, chat template, 128 new
tokens), in micro-batches of 8 rows (32 do not fit 24 GB on this model).

Writes benchmarks/results/learner_vs_trl.md (``--real``: learner_vs_trl_real.md).
"""

from __future__ import annotations

import argparse
import platform
import statistics
import tempfile
import time
from pathlib import Path

import torch

from srpo_agents.learning.learner import Learner, LearnerConfig
from srpo_agents.learning.objective import ALGORITHMS
from srpo_agents.tiny import build_tiny_policy
from srpo_bench.batches import make_batch

MICRO = 32


REAL = dict(model="smollm2-135m-instruct", workflow="solve_verify", max_turns=1,
            difficulty=(1,))


def time_srpo(policy, units, advantages, repeats: int) -> list[float]:
    learner = Learner(policy, ALGORITHMS["srpo"], LearnerConfig(lr=1e-6, microbatch_rows=MICRO))
    learner.update(units, advantages)  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        learner.update(units, advantages)
        times.append(time.perf_counter() - start)
    return times


def trl_inputs(policy, rows, advantages):
    pad = policy.pad_token_id
    prompt_width = max(len(r.prompt_ids) for r in rows)
    completion_width = max(len(r.response_ids) for r in rows)
    prompt_ids = torch.tensor([[pad] * (prompt_width - len(r.prompt_ids)) + r.prompt_ids
                               for r in rows])
    prompt_mask = torch.tensor([[0] * (prompt_width - len(r.prompt_ids)) + [1] * len(r.prompt_ids)
                                for r in rows])
    completion_ids = torch.tensor([r.response_ids + [pad] * (completion_width - len(r.response_ids))
                                   for r in rows])
    completion_mask = torch.tensor([[1] * len(r.response_ids)
                                    + [0] * (completion_width - len(r.response_ids))
                                    for r in rows])
    return {"prompt_ids": prompt_ids, "prompt_mask": prompt_mask,
            "completion_ids": completion_ids, "completion_mask": completion_mask,
            "advantages": torch.tensor(advantages, dtype=torch.float32)}


def time_trl(policy, units, advantages, repeats: int, workdir: str) -> tuple[list[float], str]:
    import trl
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    rows = [m for u in units for m in u.members]
    row_adv = [float(a) for u, a in zip(units, advantages, strict=True) for _ in u.members]
    args = GRPOConfig(output_dir=workdir, per_device_train_batch_size=MICRO, num_generations=8,
                      max_completion_length=max(len(r.response_ids) for r in rows),
                      learning_rate=1e-6, use_cpu=True, report_to=[], beta=0.0,
                      logging_steps=10**9, save_strategy="no", bf16=False, fp16=False,
                      loss_type="grpo")
    trainer = GRPOTrainer(model=policy.model, reward_funcs=[lambda completions, **_: [0.0] * len(completions)],
                          args=args, train_dataset=Dataset.from_list([{"prompt": "x"}] * 64),
                          processing_class=policy.tokenizer)
    model = trainer.model
    model.train()
    # Set by TRL's training loop; we call compute_loss directly and accumulate ourselves.
    trainer.current_gradient_accumulation_steps = 1
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6)
    # The same micro-batches of whole units as srpo's learner, sorted by length.
    order = sorted(range(len(rows)), key=lambda i: len(rows[i].prompt_ids) + len(rows[i].response_ids))
    micro = [order[i:i + MICRO] for i in range(0, len(order), MICRO)]
    batches = [trl_inputs(policy, [rows[i] for i in idx], [row_adv[i] for i in idx])
               for idx in micro]

    def step():
        optimizer.zero_grad(set_to_none=True)
        for inputs in batches:
            (trainer.compute_loss(model, inputs) / len(batches)).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()

    step()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return times, trl.__version__


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--real", action="store_true",
                        help="SmolLM2-135M-Instruct on the real-model run's batch")
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    global MICRO
    name = "learner_vs_trl_real" if args.real else "learner_vs_trl"
    args.out = args.out or str(Path(__file__).resolve().parents[1] / "results" / f"{name}.md")
    with tempfile.TemporaryDirectory() as workdir:
        if args.real:
            from srpo_agents.models.policy import load_policy

            MICRO = 8
            policy = load_policy(REAL["model"])
            units, advantages = make_batch(policy, tasks=4, group=8, max_new_tokens=128,
                                           **REAL)
            what = ("SRPO-Math-v0 solve_verify episodes (one round, level 1, 128 new tokens); "
                    "SmolLM2-135M-Instruct")
        else:
            policy = build_tiny_policy(["x"], Path(workdir) / "tiny", seed=0)
            units, advantages = make_batch(policy, tasks=16, group=8, max_new_tokens=32)
            what = "SRPO-Math-v0 parallel episodes; tiny Qwen2 policy"
        tasks = 4 if args.real else 16
        rows = [m for u in units for m in u.members]
        tokens = sum(len(r.prompt_ids) + len(r.response_ids) for r in rows)
        trl_times, trl_version = time_trl(policy, units, advantages, args.repeats, workdir)
        srpo_times = time_srpo(policy, units, advantages, args.repeats)
    trl_s, srpo_s = statistics.median(trl_times), statistics.median(srpo_times)
    import transformers

    lines = [
        "# Learner update time: srpo vs TRL GRPOTrainer", "",
        f"Command: `python benchmarks/speed/learner_vs_trl.py --repeats {args.repeats}"
        f"{' --real' if args.real else ''}`  ",
        f"Machine: {platform.machine()}, 2-core CPU, torch {torch.__version__} "
        f"({torch.get_num_threads()} threads), transformers {transformers.__version__}, "
        f"trl {trl_version}, python {platform.python_version()}", "",
        f"Batch: {len(rows)} sampled rows ({len(units)} events) from {tasks} tasks x G=8 "
        f"{what.split('; ')[0]}, {tokens} prompt+response tokens; {what.split('; ')[1]} "
        f"({sum(p.numel() for p in policy.model.parameters()):,} parameters); micro-batches "
        f"of {MICRO} rows; one AdamW step.", "",
        "| learner | loss | seconds per update (median) | all runs | tokens/s |",
        "|---|---|---:|---|---:|",
        f"| TRL GRPOTrainer.compute_loss | GRPO (loss_type grpo), token-level clip | {trl_s:.2f} | "
        f"{', '.join(f'{t:.2f}' for t in trl_times)} | {tokens / trl_s:,.0f} |",
        f"| srpo Learner.update | SRPO set clip | {srpo_s:.2f} | "
        f"{', '.join(f'{t:.2f}' for t in srpo_times)} | {tokens / srpo_s:,.0f} |", "",
        f"srpo time / TRL time: **{srpo_s / trl_s:.2f}** (target: no slower, i.e. <= 1).",
    ]
    text = "\n".join(lines) + "\n"
    Path(args.out).write_text(text, encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
