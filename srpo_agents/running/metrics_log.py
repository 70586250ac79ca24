"""A run's ``metrics.jsonl``: appended one whole, fsynced line per step, read back with a
line torn by a kill dropped, rewritten atomically on resume. Stdlib only, so ``srpo plot``
and the harness read runs without importing torch."""

from __future__ import annotations

import json
import os
from pathlib import Path

from srpo_envs.retrieval.cache import atomic_write


def append_json_line(path: Path, row: dict) -> None:
    """One whole line per write, flushed to disk: a kill leaves the file without the row
    or with it, at worst with a torn last line that ``read_metrics_rows`` drops."""
    with path.open("a", encoding="utf-8") as handle:
        handle.write(json.dumps(row) + "\n")
        handle.flush()
        os.fsync(handle.fileno())


def read_metrics_rows(path: Path) -> list[dict]:
    """The rows of a ``metrics.jsonl``; a torn last line (a kill mid-write) is dropped."""
    if not path.is_file():
        return []
    lines = path.read_text(encoding="utf-8").splitlines()
    rows = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            if number != len(lines):
                raise ValueError(f"{path}:{number}: not a JSON row (only the last line can "
                                 f"be torn by a kill)") from None
    return rows


def write_json_lines_atomic(path: Path, rows: list[dict]) -> None:
    data = "".join(json.dumps(row) + "\n" for row in rows).encode("utf-8")
    atomic_write(path, lambda handle: handle.write(data))


def time_breakdown(metrics_path: Path, warm: dict, before_after_eval: float,
                   wall: float) -> dict[str, float]:
    """Seconds of the run by phase: the warm start (0 when it was cached), generation and
    env stepping of the training rollouts, updates, held-out evaluations (the ones
    during training, and ``before_after_eval``: the before and after evaluations this
    invocation ran; a "before" shared with other runs counts 0 here) and the rest."""
    rows = read_metrics_rows(metrics_path)
    out = {"warm_start": float(warm.get("seconds", 0.0)) if not warm.get("cached") else 0.0,
           "generation": sum(r.get("generation_seconds", 0.0) for r in rows),
           "env": sum(r.get("env_seconds", 0.0) for r in rows),
           "update": sum(r.get("update_seconds", 0.0) for r in rows),
           "evaluation": before_after_eval + sum(r.get("eval_seconds", 0.0) for r in rows)}
    out["other"] = max(0.0, wall - sum(out.values()))
    out["total"] = wall
    return {k: round(v, 2) for k, v in out.items()}
