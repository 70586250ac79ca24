#!/usr/bin/env bash
# The GPU check: run on a machine with an NVIDIA GPU, within 20 minutes, needing nothing
# from the network (the tiny policy is built locally; no hub, no datasets download).
#
#     bash benchmarks/gpu_check.sh            # writes runs/gpu_check/ (commit its report.md)
#
# 1. the environment: GPU, driver, torch/transformers versions, CUDA availability;
# 2. a short SRPO training of the tiny policy on CUDA in bfloat16 (SRPO-Math-v0 parallel);
# 3. rollout tokens/s of the hf backend on the CPU and on the GPU, same prompts;
# 4. the vLLM path (tests/test_vllm.py) where vLLM is importable.
# Other torch/transformers versions than this repository pins may be installed there:
# the report records them.
set -uo pipefail
OUT=${OUT:-runs/gpu_check}
PY=${PY:-python}
mkdir -p "$OUT"
REPORT="$OUT/report.md"
export PYTHONPATH="${PYTHONPATH:-}:$(pwd)" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1

{
  echo "# GPU check ($(date -u +%Y-%m-%dT%H:%MZ))"
  echo
  echo '```'
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1 | head -3
  $PY - <<'PY'
import importlib, torch
print("torch", torch.__version__, "cuda available", torch.cuda.is_available())
for name in ("transformers", "gymnasium", "pettingzoo", "math_verify", "bm25s", "vllm"):
    try:
        print(name, importlib.import_module(name).__version__)
    except Exception as err:  # report, do not stop: later steps say what they need
        print(name, "not importable:", type(err).__name__)
PY
  echo '```'
} > "$REPORT" 2>&1

echo "## 2. SRPO training of the tiny policy on CUDA (bf16)" >> "$REPORT"
start=$(date +%s)
timeout 300 $PY -m srpo_agents.cli train --env SRPO-Math-v0 --workflow parallel --n-agents 3 \
  --model tiny --device cuda --dtype auto --steps 10 --group-size 8 --tasks-per-step 16 \
  --difficulty 0 --warmstart-steps 200 --warmstart-target 1.0 --eval-tasks 200 --eval-k 4 \
  --max-new-tokens 32 --out "$OUT/train" > "$OUT/train.log" 2>&1
echo "exit $? after $(( $(date +%s) - start )) s; table:" >> "$REPORT"
tail -8 "$OUT/train.log" >> "$REPORT"

echo "## 3. Rollout tokens/s, hf backend, CPU against GPU" >> "$REPORT"
timeout 180 $PY - >> "$REPORT" 2>&1 <<'PY'
import time, torch
from srpo_agents.rollout import RolloutEngine
from srpo_agents.tiny import build_tiny_policy
from srpo_envs import math_v0

env = math_v0.parallel_env(workflow="single", prompts=math_v0.COMPACT_PROMPTS, seed=0)
texts = [env.reset(options={"task_index": i})[0]["solver_0"] for i in range(256)]
rates = {}
for device in ("cpu", "cuda"):
    policy = build_tiny_policy(texts, f"runs/gpu_check/tiny-{device}")
    policy.model.to(device)
    engine = RolloutEngine(policy, max_new_tokens=48, seed=0)
    prompts = [policy.prompt_ids("solver", t) for t in texts]
    engine._generate_by_role(["solver"] * 8, prompts[:8])  # warm-up
    start = time.perf_counter()
    outs = engine._generate_by_role(["solver"] * len(prompts), prompts)
    rates[device] = sum(len(o[0]) for o in outs) / (time.perf_counter() - start)
print(f"tokens/s: cpu {rates['cpu']:,.0f}, cuda {rates['cuda']:,.0f}, "
      f"ratio {rates['cuda'] / rates['cpu']:.1f}")
PY

echo "## 4. vLLM" >> "$REPORT"
if $PY -c "import vllm" 2>/dev/null; then
  SRPO_REQUIRE_VLLM=1 timeout 900 $PY -m pytest -q tests/test_vllm.py >> "$REPORT" 2>&1
else
  echo "vLLM is not importable here: skipped" >> "$REPORT"
fi
cat "$REPORT"
