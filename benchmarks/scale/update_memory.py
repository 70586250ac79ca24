"""Peak memory of one update on SmolLM2-135M-Instruct on the CPU: 32 rows of 512 tokens
(64 prompt + 448 response) in micro-batches of 8 rows (all 32 at once outgrow this
machine's 24 GiB on activations alone), the learner's log-probs and entropy over its
49,152-token vocabulary, float32.

    python benchmarks/scale/update_memory.py                        # this checkout
    python benchmarks/scale/update_memory.py --code /tmp/before --label before

Each measurement runs in a fresh process (``--code``: the folder whose ``srpo_agents`` it
imports, so an older checkout can be measured the same way) and reports the process's
peak resident memory after loading the model and after one SRPO update, and the
update's seconds. Results go to ``benchmarks/results/update_memory.json`` (one entry per
label) and ``.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[1] / "results"
ROWS, PROMPT, RESPONSE, MICRO = 32, 64, 448, 8


def measure(checkpointing: bool = False, micro: int = MICRO) -> dict:
    import resource
    import time

    import numpy as np
    import torch

    from srpo_agents.learning.events import ActionUnit
    from srpo_agents.learning.learner import Learner, LearnerConfig
    from srpo_agents.learning.objective import ALGORITHMS, UnitInfo
    from srpo_agents.models.policy import load_policy
    from srpo_agents.rollout.engine import Sample

    def peak_gib() -> float:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20

    torch.manual_seed(0)
    policy = load_policy("smollm2-135m-instruct")
    vocab = policy.model.config.vocab_size
    loaded = peak_gib()
    generator = torch.Generator().manual_seed(0)
    units = []
    for row in range(ROWS):  # distinct prompts: no prompt is shared, the full-row path
        ids = torch.randint(0, vocab, (PROMPT + RESPONSE,), generator=generator).tolist()
        sample = Sample(f"e{row}", 0, "solver_0", "solver", ids[:PROMPT], ids[PROMPT:],
                        [-10.0] * RESPONSE, False, "", 0)
        units.append(ActionUnit(UnitInfo(f"t{row // 4}", f"e{row}", "solve", 0, "", "p",
                                         1.0), [sample]))
    learner = Learner(policy, ALGORITHMS["srpo"],
                      LearnerConfig(lr=1e-5, microbatch_rows=micro,
                                    gradient_checkpointing=checkpointing))
    start = time.perf_counter()
    figures = learner.update(units, np.array([1.0 if i % 2 else -1.0 for i in range(ROWS)]))
    return {"peak_gib_after_load": loaded, "peak_gib_after_update": peak_gib(),
            "update_seconds": time.perf_counter() - start, "entropy": figures["entropy"],
            "loss": figures["loss"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--code", default=str(Path(__file__).resolve().parents[2]),
                        help="the checkout whose srpo_agents is measured")
    parser.add_argument("--label", default="after")
    parser.add_argument("--gradient-checkpointing", action="store_true")
    parser.add_argument("--micro", type=int, default=MICRO, help="rows per micro-batch")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.gradient_checkpointing, args.micro)
                         | {"micro": args.micro}))
        return
    flags = ["--micro", str(args.micro)] + (["--gradient-checkpointing"]
                                            if args.gradient_checkpointing else [])
    done = subprocess.run([sys.executable, __file__, "--child", *flags], capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": args.code}, check=True)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    path = RESULTS / "update_memory.json"
    results = json.loads(path.read_text()) if path.exists() else {}
    results[args.label] = result
    path.write_text(json.dumps(results, indent=1) + "\n")
    lines = ["# Peak memory of one update (CPU, SmolLM2-135M-Instruct)", "",
             f"`python benchmarks/scale/update_memory.py`: one SRPO update of {ROWS} rows x "
             f"{PROMPT + RESPONSE} tokens ({PROMPT} prompt + {RESPONSE} response) in "
             f"micro-batches of {MICRO} rows unless the table says otherwise (all 32 at once "
             "outgrow this machine's 24 GiB without checkpointing), float32, each in a fresh "
             "process; peak resident memory (the process's maximum RSS). \"before\" is the "
             "checkout before the learner took its log-probs without a full-vocabulary "
             "log-softmax; `--gradient-checkpointing` rows: "
             "`python benchmarks/scale/update_memory.py "
             "--gradient-checkpointing [--micro N] --label ...`.", "",
             "| code | rows per micro-batch | peak after loading (GiB) | peak after the update "
             "(GiB) | update seconds | entropy | loss |", "|---|---:|---:|---:|---:|---:|---:|"]
    for label, r in results.items():
        lines.append(f"| {label} | {r.get('micro', MICRO)} | {r['peak_gib_after_load']:.2f} | "
                     f"{r['peak_gib_after_update']:.2f} | {r['update_seconds']:.1f} | "
                     f"{r['entropy']:.4f} | {r['loss']:.6f} |")
    (RESULTS / "update_memory.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
