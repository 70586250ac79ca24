"""What machine a benchmark ran on, for the header of its results table, and writing
the table with its data."""

from __future__ import annotations

import json
import os
import platform
from pathlib import Path


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def describe() -> str:
    return f"{cpu_model()}, {os.cpu_count()} cores, python {platform.python_version()}"


# The committed results folder (the package sits beside benchmarks/ in the repository).
RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results"


def write_results(name: str, lines: list[str], data) -> None:
    """Write ``results/NAME.md`` (the lines) and ``results/NAME.json`` (the data), and
    print the table."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{name}.md").write_text("\n".join(lines) + "\n")
    (RESULTS / f"{name}.json").write_text(json.dumps(data, indent=2) + "\n")
    print("\n".join(lines))
