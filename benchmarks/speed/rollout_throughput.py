"""Rollout throughput: generated tokens/s of the batched RolloutEngine versus one
``model.generate`` call per agent, on the same SRPO-Math-v0 parallel episodes; and the
engine's generation backend against one batched ``model.generate`` call per round of
the same prompts (the Hugging Face bound).

Both sides play the same episodes (task i, env seed i) with the same tiny policy (built
on the fly in a temp dir: Qwen2-style, hidden 128, 4 layers), the same sampling
(temperature 1, no top-k/top-p) and the same ``max_new_tokens``:

- reference: every due agent of every episode gets its own
  ``model.generate(do_sample=True, use_cache=True)`` call (the loop a per-agent
  multi-agent framework runs);
- engine: ``RolloutEngine.run`` gathers every due agent of all live episodes into one
  generation call per round (all K solvers of all episodes, then all aggregators).

Texts differ between the two (independent samples), so the runs generate different
token counts; the comparison is tokens per second. The reference runs first, in the
same process. Timings include everything between reset and the last step (prompt
building, envs, decoding).

    python benchmarks/speed/rollout_throughput.py [--episodes 64] [--solvers 3]
        [--max-new-tokens 48]

Writes benchmarks/results/rollout_throughput.md.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

import torch
import transformers

from srpo_agents.rollout.engine import RolloutEngine
from srpo_agents.tiny import build_tiny_policy
from srpo_envs import math_v0

RESULTS = Path(__file__).resolve().parents[1] / "results" / "rollout_throughput.md"


def make_envs(episodes: int, solvers: int) -> tuple[list, list[dict]]:
    envs = [math_v0.parallel_env(workflow="parallel", n_solvers=solvers, seed=i)
            for i in range(episodes)]
    return envs, [{"task_index": i} for i in range(episodes)]


def run_reference(policy, envs, options, max_new_tokens: int) -> dict:
    """One ``model.generate`` call per due agent, episode after episode."""
    model = policy.model.eval()
    torch.manual_seed(0)
    tokens = calls = 0
    start = time.perf_counter()
    for env, opt in zip(envs, options, strict=True):
        observations, _ = env.reset(options=opt)
        while env.agents:
            actions = {}
            for agent in env.due_agents:
                prompt = torch.tensor([policy.prompt_ids(env.roles[agent], observations[agent])])
                with torch.inference_mode():
                    out = model.generate(
                        prompt, attention_mask=torch.ones_like(prompt), do_sample=True,
                        temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=max_new_tokens,
                        use_cache=True, pad_token_id=policy.pad_token_id,
                        eos_token_id=sorted(policy.eos_token_ids))
                response = out[0, prompt.shape[1]:].tolist()
                tokens += len(response)
                calls += 1
                actions[agent] = policy.decode(response)
            observations, *_ = env.step(actions)
    return {"tokens": tokens, "calls": calls, "seconds": time.perf_counter() - start}


def run_engine(policy, envs, options, max_new_tokens: int) -> dict:
    engine = RolloutEngine(policy, max_new_tokens=max_new_tokens, max_batch=256, seed=0)
    calls = []
    generate = engine.generate
    engine.generate = lambda prompts: calls.append(len(prompts)) or generate(prompts)
    start = time.perf_counter()
    rollouts = engine.run(envs, options)
    seconds = time.perf_counter() - start
    return {"tokens": sum(r.generated_tokens for r in rollouts), "calls": len(calls),
            "batch_sizes": calls, "seconds": seconds}


def engine_prompts(policy, envs, options, max_new_tokens: int) -> list[list[list[int]]]:
    """The prompt ids of every generation call the engine makes on these episodes, one
    list per call (round): the K solvers of all episodes, then all aggregators."""
    engine = RolloutEngine(policy, max_new_tokens=max_new_tokens, max_batch=256, seed=1)
    rounds = []
    generate = engine.generate
    engine.generate = lambda prompts: rounds.append(prompts) or generate(prompts)
    engine.run(envs, options)
    return rounds


def run_batched_generate(policy, rounds, max_new_tokens: int) -> dict:
    """One left-padded ``model.generate`` call per round: the Hugging Face bound."""
    model = policy.model.eval()
    eos = sorted(policy.eos_token_ids)
    torch.manual_seed(0)
    tokens = 0
    start = time.perf_counter()
    for prompts in rounds:
        width = max(len(p) for p in prompts)
        ids = torch.tensor([[policy.pad_token_id] * (width - len(p)) + p for p in prompts])
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
        with torch.inference_mode():
            out = model.generate(ids, attention_mask=mask, do_sample=True, temperature=1.0,
                                 top_k=0, top_p=1.0, max_new_tokens=max_new_tokens,
                                 use_cache=True, pad_token_id=policy.pad_token_id,
                                 eos_token_id=eos)
        for row in out[:, width:].tolist():
            ends = [i for i, t in enumerate(row) if t in eos]
            tokens += ends[0] + 1 if ends else len(row)
    return {"tokens": tokens, "seconds": time.perf_counter() - start}


def run_generator(policy, rounds, max_new_tokens: int) -> dict:
    """The engine's own generation backend on the same rounds of prompts."""
    engine = RolloutEngine(policy, max_new_tokens=max_new_tokens, max_batch=256, seed=0)
    start = time.perf_counter()
    tokens = sum(len(ids) for prompts in rounds for ids, _, _ in engine.generate(prompts))
    return {"tokens": tokens, "seconds": time.perf_counter() - start}


def machine() -> str:
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return (f"{os.cpu_count()} CPU(s) ({cpu}), torch {torch.__version__} "
            f"({torch.get_num_threads()} threads), transformers {transformers.__version__}, "
            f"Python {platform.python_version()}, {platform.platform()}; load average at "
            f"the start {load} (the CPUs are shared with other jobs)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--episodes", type=int, default=64)
    parser.add_argument("--solvers", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--repeats", type=int, default=3,
                        help="alternating timings of the engine's backend and one batched "
                             "model.generate per round")
    args = parser.parse_args()
    host = machine()

    with tempfile.TemporaryDirectory() as tmp:
        envs, options = make_envs(args.episodes, args.solvers)
        texts = [obs for env, opt in zip(envs, options, strict=True)
                 for obs in env.reset(options=opt)[0].values()]
        policy = build_tiny_policy(texts, Path(tmp) / "tiny", hidden_size=128, num_layers=4)
        # Untimed warm-up of both paths (first-call allocations, lazy imports).
        warm_envs, warm_options = make_envs(2, args.solvers)
        run_reference(policy, warm_envs, warm_options, 4)
        run_engine(policy, warm_envs, warm_options, 4)

        reference = run_reference(policy, *make_envs(args.episodes, args.solvers),
                                  args.max_new_tokens)
        batched = run_engine(policy, *make_envs(args.episodes, args.solvers),
                             args.max_new_tokens)
        # The Hugging Face bound: the same rounds of prompts, one batched generate each.
        rounds = engine_prompts(policy, *make_envs(args.episodes, args.solvers),
                                args.max_new_tokens)
        bound, ours = [], []
        for _ in range(args.repeats):
            bound.append(run_batched_generate(policy, rounds, args.max_new_tokens))
            ours.append(run_generator(policy, rounds, args.max_new_tokens))
    n_params = sum(p.numel() for p in policy.model.parameters())
    rate = {name: r["tokens"] / r["seconds"] for name, r in
            (("reference", reference), ("engine", batched))}
    speedup = rate["engine"] / rate["reference"]
    command = ("OMP_NUM_THREADS unset; .venv/bin/python benchmarks/speed/rollout_throughput.py "
               f"--episodes {args.episodes} --solvers {args.solvers} "
               f"--max-new-tokens {args.max_new_tokens} --repeats {args.repeats}")
    bound_s = statistics.median(r["seconds"] for r in bound)
    ours_s = statistics.median(r["seconds"] for r in ours)
    ratio = ours_s / bound_s
    lines = [
        "# Rollout throughput: batched RolloutEngine vs per-agent `model.generate`",
        "",
        f"Command: `{command}`  ",
        f"Date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M:%S} UTC",
        "",
        f"Machine: {host}",
        "",
        f"Workload: {args.episodes} SRPO-Math-v0 episodes, workflow `parallel`, "
        f"K={args.solvers} solvers + 1 aggregator ({args.episodes * (args.solvers + 1)} "
        f"generations per side); tiny Qwen2 policy ({n_params / 1e6:.2f}M parameters, "
        f"hidden 128, 4 layers, byte-level vocabulary), float32, temperature 1, "
        f"max_new_tokens {args.max_new_tokens}.",
        "",
        "| generation | calls | generated tokens | seconds | tokens/s |",
        "|---|---|---|---|---|",
        f"| reference: `model.generate` per agent (do_sample, KV cache) | "
        f"{reference['calls']} | {reference['tokens']} | {reference['seconds']:.2f} | "
        f"{rate['reference']:.0f} |",
        f"| RolloutEngine (`hf` backend), every due agent of all episodes per call | "
        f"{batched['calls']} (batch sizes {batched['batch_sizes']}) | {batched['tokens']} | "
        f"{batched['seconds']:.2f} | {rate['engine']:.0f} |",
        "",
        f"Speed-up (engine tokens/s / reference tokens/s): **{speedup:.1f}x** "
        f"(target >= 3x: {'met' if speedup >= 3 else 'not met'}).",
        "",
        "Both sides run in one process, reference first, after an untimed warm-up of each; "
        "timings cover the whole episode loop (prompt ids, generation, decoding, env steps).",
        "",
        "## Against one batched `model.generate` (the Hugging Face bound)",
        "",
        f"The same {len(rounds)} rounds of prompts the engine sent ("
        f"{', '.join(str(len(r)) for r in rounds)} prompts), each given to one left-padded "
        "`model.generate(do_sample=True)` call, against the engine's own backend "
        "(`HFGenerator.generate`) on the same rounds; same sampling and max_new_tokens. "
        f"Median of {args.repeats} alternating repeats.",
        "",
        "| generation | generated tokens | seconds (median) |",
        "|---|---:|---:|",
        f"| one batched `model.generate` per round | {bound[0]['tokens']} | {bound_s:.2f} |",
        f"| engine backend (`HFGenerator`) | {ours[0]['tokens']} | {ours_s:.2f} |",
        "",
        f"Engine time / `generate` time: **{ratio:.2f}** (target <= 1.5: "
        f"{'met' if ratio <= 1.5 else 'not met'}).",
    ]
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
