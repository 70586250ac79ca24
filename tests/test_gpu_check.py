"""benchmarks/scale/gpu_check.sh runs on the CPU at test size (``DEVICE=cpu SMALL=1``), so
its commands and flags are proven before a GPU session spends minutes on them: every phase
reports, and each phase's budgets sum under the check's 8 minutes."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "scale" / "gpu_check.sh"


def test_the_budgets_sum_under_eight_minutes():
    text = SCRIPT.read_text()
    budgets = {name: int(value) for name, value in
               re.findall(r"BUDGET_(\w+)=\$\{BUDGET_\w+:-(\d+)\}", text)}
    assert set(budgets) == {"ENV", "TRAIN", "RATE", "VLLM"}
    assert sum(budgets.values()) <= 450 < 8 * 60


@pytest.mark.slow
@pytest.mark.heavy
def test_the_check_runs_end_to_end_on_the_cpu(math_tiny_dir, tmp_path):
    out = tmp_path / "check"
    done = subprocess.run(["bash", str(SCRIPT)], cwd=ROOT, capture_output=True, text=True,
                          timeout=600,
                          env={**os.environ, "MODEL": str(math_tiny_dir), "DEVICE": "cpu",
                               "SMALL": "1", "OUT": str(out), "PY": sys.executable,
                               "SRPO_CACHE_DIR": str(tmp_path / "cache")})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = (out / "report.md").read_text()
    for heading in ("## 1. The environment", "## 2. SRPO on the real model",
                    "## 3. Rollout tokens/s", "## 4. vLLM"):
        assert heading in report, report
    train, rate = report.split("## 2.")[1], report.split("## 3.")[1]
    assert "exit 0 after" in train and "steps done: 2;" in train, report
    assert "update_to_weight" in train and "memory peak:" in train and "after: avg@1" in train
    for loop in ("hf, host reads every step", "hf", "hf --hf-compile"):
        assert re.search(rf"cpu, {loop}: [\d,]+ tokens/s at batch 4", rate), rate
    assert "exit 0 after" in rate
    assert "total " in report
