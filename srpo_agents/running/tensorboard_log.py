"""Optional TensorBoard logging (``srpo train --tensorboard``): every number of each
``metrics.jsonl`` row, under the same key, at step ``row["step"] + 1``; nested figures
(``by_route_k``, ``route_k_counts``) as ``key/sub``. Held-out evaluations before and after
go under ``eval/``. Needs the ``tensorboard`` package (in the ``tensorboard`` extra)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any


def scalars(row: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, float]]:
    """(key, value) of every number in ``row``, nested keys joined with "/"."""
    for key, value in row.items():
        name = f"{prefix}{key}"
        if isinstance(value, bool):
            yield name, float(value)
        elif isinstance(value, int | float):
            yield name, float(value)
        elif isinstance(value, Mapping):
            yield from scalars(value, name + "/")


class TensorBoardLog:
    def __init__(self, log_dir: str | Path):
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as err:
            raise ImportError("--tensorboard needs the tensorboard package: pip install "
                              "tensorboard (or the srpo extra 'tensorboard')") from err
        self.writer = SummaryWriter(log_dir=str(log_dir))

    def row(self, row: Mapping[str, Any]) -> None:
        step = int(row["step"]) + 1
        for key, value in scalars(row):
            if key != "step":
                self.writer.add_scalar(key, value, step)
        self.writer.flush()

    def evaluation(self, tag: str, result: Mapping[str, Any], step: int) -> None:
        for key in ("avg_at_k", "pass_at_k", "tokens_per_task", "tool_calls_per_task"):
            if key in result:
                self.writer.add_scalar(f"eval/{key}", float(result[key]), step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()
