"""The math demo's setting (``srpo_bench/math_team.py``, the demo until issue 36) with one LoRA
per role (issue 27), from the repository root:

    python benchmarks/labs/demo_lora.py

``demo_config`` with ``per_role_adapters="lora"`` and lr 3e-4 (10x the demo's full-model
lr), fixed before the run, from the demo's seed-0 warm start: copy the compare preset's
``warmstart/SRPO-Math-v0-parallel/warmstart`` to ``runs/demo-lora/warm/warmstart`` first
(the run then finds it cached; without it the warm start is built, about 5 minutes).
Results: ``benchmarks/results/demo_lora.md``."""

import json
import time

from srpo_agents.running.train import train
from srpo_bench.math_team import math_demo_config as demo_config  # the math demo's

config = demo_config("runs/demo-lora/run", 0, per_role_adapters="lora", lr=3e-4,
                     warmstart_dir="runs/demo-lora/warm")
start = time.monotonic()
summary = train(config)
print(json.dumps({"difference": summary["difference"], "before": summary["before"]["avg_at_k"],
                  "after": summary["after"]["avg_at_k"], "wall": time.monotonic() - start,
                  "time": summary["time_breakdown"]}), flush=True)
