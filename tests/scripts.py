"""The benchmark scripts as modules (they are scripts, not a package)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def bench_module(name: str, folder: str = "real_model"):
    """``benchmarks/<folder>/<name>.py`` as a module."""
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / folder / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
