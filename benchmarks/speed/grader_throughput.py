"""Throughput of ``srpo_envs.grading.grade``, single thread, on gold solutions.

Sets graded (each once, in file order, so nothing is served from a warm cache twice):

* GSM8K test solutions with their ``#### N`` line rewritten as ``\\boxed{N}`` (a synthetic
  list of numeric answers when the file is absent);
* MATH-500 solutions against their ``answer`` field;
* MATH-500 solutions against the *next* problem's answer: mismatched pairs, as most
  sampled answers are in RL, which exercise the numeric rejections and math-verify.

The math-verify zygote is started before timing (its start-up is reported on its own).
Prints markdown tables and the command that produced them.

    .venv/bin/python benchmarks/speed/grader_throughput.py [--data-dir DIR] [--limit N]
"""

import argparse
import json
import os
import platform
import re
import shlex
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

from srpo_envs import grading

DEFAULT_DATA_DIR = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "math"
_GSM8K_FINAL = re.compile(r"####\s*(.+?)\s*$")

Case = tuple[str, str]


def _read_jsonl(path: Path, limit: int | None) -> list[dict]:
    with path.open() as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return rows[:limit]


def _synthetic_numeric(n: int) -> list[Case]:
    # Deterministic GSM8K-like endings covering the number forms the grader normalizes.
    forms = ("{v}", "{v:,}", "\\${v}", "{v}.00", "-{v}", "{v}\\%")
    cases = []
    for i in range(n):
        value = (i * 7919) % 100_000
        form = forms[i % len(forms)]
        gold = f"-{value}" if form.startswith("-") else str(value)
        answer = form.format(v=value)
        cases.append((f"Step one. Step two gives {i}. So the answer is \\boxed{{{answer}}}.", gold))
    return cases


def gsm8k_cases(data_dir: Path, limit: int | None) -> tuple[str, list[Case]]:
    path = data_dir / "gsm8k_test.jsonl"
    if not path.exists():
        return "synthetic numeric (GSM8K absent)", _synthetic_numeric(limit or 1319)
    cases = [
        (_GSM8K_FINAL.sub(lambda m: f"\\boxed{{{m[1]}}}", row["solution"].strip()), row["answer"])
        for row in _read_jsonl(path, limit)
    ]
    return "GSM8K test, gold solutions", cases


def math500_cases(data_dir: Path, limit: int | None) -> list[tuple[str, list[Case]]]:
    path = data_dir / "math500.jsonl"
    if not path.exists():
        print(f"note: {path} is absent; MATH-500 rows skipped\n")
        return []
    rows = _read_jsonl(path, limit)
    gold = [(row["solution"], row["answer"]) for row in rows]
    shifted = [(row["solution"], rows[(i + 1) % len(rows)]["answer"]) for i, row in enumerate(rows)]
    return [
        ("MATH-500, gold solutions", gold),
        ("MATH-500, next problem's answer", shifted),
    ]


def measure(cases: list[Case], latencies: dict[str, list[float]]) -> dict:
    methods: Counter[str] = Counter()
    correct = 0
    started = time.perf_counter()
    for text, gold in cases:
        t0 = time.perf_counter()
        result = grading.grade(text, gold)
        latencies[result.method].append(time.perf_counter() - t0)
        methods[result.method] += 1
        correct += result.correct
    elapsed = time.perf_counter() - started
    return {
        "n": len(cases),
        "correct": correct / len(cases),
        "rate": len(cases) / elapsed,
        "methods": methods,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    parser.add_argument("--limit", type=int, default=None, help="rows per file (default all)")
    args = parser.parse_args()

    t0 = time.perf_counter()
    grading.warm_up()
    startup = time.perf_counter() - t0

    sets = [gsm8k_cases(args.data_dir, args.limit), *math500_cases(args.data_dir, args.limit)]
    latencies: dict[str, list[float]] = defaultdict(list)
    results = [(name, measure(cases, latencies)) for name, cases in sets]

    print("| set | answers | graded correct | answers/s | decided by |")
    print("|---|---:|---:|---:|---|")
    for name, r in results:
        decided = ", ".join(f"{m} {c}" for m, c in r["methods"].most_common())
        print(f"| {name} | {r['n']} | {r['correct']:.1%} | {r['rate']:,.0f} | {decided} |")
    print()
    print("| method | calls | mean ms | max ms |")
    print("|---|---:|---:|---:|")
    for method, times in sorted(latencies.items(), key=lambda item: -len(item[1])):
        mean_ms = 1000 * sum(times) / len(times)
        print(f"| {method} | {len(times)} | {mean_ms:.3f} | {1000 * max(times):.1f} |")
    print()
    print(
        f"Single thread, default timeout 1 s; math-verify zygote start-up {startup:.2f} s "
        f"(not timed above). Python {platform.python_version()}, {os.cpu_count()} CPUs."
    )
    python = os.path.relpath(sys.executable)
    python = sys.executable if python.startswith("..") else python
    print(f"Command: {shlex.join([python, *sys.argv])}")


if __name__ == "__main__":
    main()
