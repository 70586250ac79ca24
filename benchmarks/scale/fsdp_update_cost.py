"""One learner update of SmolLM2-135M-Instruct on the same rows: one process and 2 gloo
ranks on FSDP2 (full_shard, no_shard): update seconds, each rank's own weights and AdamW
bytes, and each rank's resident memory. The committed table also holds the hand-written
all-reduce that data parallelism was before FSDP2 (9c4f45c is the last commit that has
it; a run of this script now measures the variants below).

    python benchmarks/scale/fsdp_update_cost.py [--model smollm2-135m-instruct] [--repeats 2]

Every variant runs ``benchmarks/scale/ddp_update.py update`` with one thread a process (a rank
gets one of the 2 cores, as one process on one of them), the variants interleaved and
repeated, so that whatever else runs on the machine weighs on each alike. The rows are
``ddp_update.py prepare``'s Countdown episodes of the tiny policy: their token ids are
valid SmolLM2 ids, and pi_old is scored by the model itself, so the update is a real
SmolLM2 update on meaningless text, which is all a time and memory figure needs.
Writes ``benchmarks/results/fsdp_update_cost.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from srpo_agents.rollout.weight_sync import free_port

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "scale" / "ddp_update.py"
RESULTS = ROOT / "benchmarks" / "results"
VARIANTS = {"1 process": (1, "full_shard"),  # one process: the strategy is unused
            "2 ranks, FSDP2 full_shard": (2, "full_shard"),
            "2 ranks, FSDP2 no_shard": (2, "no_shard")}
ALL_REDUCE = "2 ranks, all-reduce"  # in the committed table only: the path is gone


def _run(args: list[str], nproc: int) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    launch = ([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(nproc),
               "--master_addr", "127.0.0.1", "--master_port", str(free_port())] if nproc > 1 else
              [sys.executable])
    subprocess.run([*launch, str(SCRIPT), *args], check=True, env=env, cwd=ROOT)


def measure(out: Path, model: str, repeats: int, microbatch_rows: int) -> dict:
    data = out / "data"
    if not (data / "advantages.npy").is_file():
        _run(["prepare", "--out", str(data), "--tasks", "8", "--group", "4"], 1)
    runs: dict[str, list[dict]] = {name: [] for name in VARIANTS}
    for repeat in range(repeats):
        for name, (nproc, fsdp) in VARIANTS.items():
            folder = out / f"{name.replace(' ', '_').replace(',', '')}-{repeat}"
            _run(["update", "--data", str(data), "--out", str(folder), "--model", model,
                  "--microbatch-rows", str(microbatch_rows), "--fsdp", fsdp], nproc)
            runs[name].append(json.loads((folder / "result.json").read_text()))
    first = {name: out / f"{name.replace(' ', '_').replace(',', '')}-0" for name in VARIANTS}
    differences = {name: _max_weight_difference(first["1 process"], folder)
                   for name, folder in first.items() if name != "1 process"}
    return {"model": model, "microbatch_rows": microbatch_rows, "repeats": repeats,
            "units": runs["1 process"][0]["units"], "runs": runs,
            "max_weight_difference_to_1_process": differences}


def _max_weight_difference(one: Path, two: Path) -> float:
    from safetensors.torch import load_file

    a, b = (load_file(str(d / "result.safetensors")) for d in (one, two))
    return max(float((a[k] - b[k]).abs().max()) for k in a if k.startswith("weight/"))


def write(result: dict) -> None:
    (RESULTS / "fsdp_update_cost.json").write_text(json.dumps(result, indent=1) + "\n")
    runs = result["runs"]
    reference = sum(r["seconds"] for r in runs["1 process"]) / len(runs["1 process"])
    lines = ["# One update, one process against 2 ranks on FSDP2", "",
             f"`python benchmarks/scale/fsdp_update_cost.py --model {result['model']}`: "
             f"{result['units']} SRPO units of Countdown rows, micro-batches of "
             f"{result['microbatch_rows']} rows, one AdamW step; one thread a process, "
             f"the variants interleaved, {result['repeats']} repeats. "
             f"{result.get('conditions', '')} Under FSDP2 each micro-batch runs one pass "
             "a row (one process runs each distinct prompt once, which these rows "
             "repeat).", "",
             "| variant | update seconds | against 1 process | weights + AdamW a rank "
             "(GiB) | peak resident a rank (GiB) |",
             "|---|---:|---:|---:|---:|"]
    for name, rows in runs.items():
        seconds = [r["seconds"] for r in rows]
        mean = sum(seconds) / len(seconds)
        state = max(rank["state_gib"] for r in rows for rank in r["ranks"])
        peak = max(rank["peak_rss_gib"] for r in rows for rank in r["ranks"])
        lines.append(f"| {name} | {', '.join(f'{s:.1f}' for s in seconds)} | "
                     f"{mean / reference:.2f} | {state:.2f} | {peak:.2f} |")
    lines += ["", "Weights + AdamW: the rank's own tensors after the step (its shards "
              "under full_shard). Peak resident: the process's largest resident set, "
              "which includes loading the whole model before sharding it. That the "
              "updates agree: fsdp_equality.md (tests/test_distributed.py)."]
    if ALL_REDUCE in runs:
        lines += ["", f"\"{ALL_REDUCE}\": the hand-written gradient all-reduce that data "
                  "parallelism was before FSDP2 replaced it (measured with the rest of "
                  "this table; 9c4f45c is the last commit that has it; it runs each "
                  "distinct prompt once too)."]
    if result.get("note"):
        lines += ["", result["note"]]
    (RESULTS / "fsdp_update_cost.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--microbatch-rows", type=int, default=4)
    parser.add_argument("--out", default="runs/fsdp-cost")
    parser.add_argument("--conditions", default="Measured on an otherwise idle machine.",
                        help="what else ran beside it, for the table")
    parser.add_argument("--table-only", action="store_true",
                        help="rewrite the table from the committed JSON")
    args = parser.parse_args()
    if args.table_only:
        write(json.loads((RESULTS / "fsdp_update_cost.json").read_text()))
        return
    result = measure(Path(args.out), args.model, args.repeats, args.microbatch_rows)
    write({**result, "conditions": args.conditions})


if __name__ == "__main__":
    main()
