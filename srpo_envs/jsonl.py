"""Reading task sources: JSON Lines files (errors name the file, the line and why) and
Hugging Face ``datasets`` names (for users who are online)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def read_jsonl(path: str | Path, field: str = "dataset") -> Iterator[tuple[Any, str, int]]:
    """Yield ``(record, "file:line", 0-based row)`` for every non-blank line of ``path``.

    ``field`` names the argument the path came from, for the error messages."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{field}={str(path)!r}: no such JSONL file")
    row = 0
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            where = f"{path}:{number}"
            try:
                record = json.loads(line)
            except json.JSONDecodeError as err:
                raise ValueError(f"{where}: not valid JSON ({err.msg})") from None
            yield record, where, row
            row += 1


def read_hf_dataset(name: str, config: str | None, split: str) -> Iterator[tuple[Any, str, str]]:
    """Yield ``(record, where, fallback id)`` for each row of a ``datasets`` dataset."""
    try:
        import datasets
    except ImportError as err:
        raise ImportError(f"dataset={name!r} looks like a Hugging Face dataset name; loading "
                          f"it needs `pip install datasets` (or pass a JSONL path)") from err
    for i, row in enumerate(datasets.load_dataset(name, config, split=split)):
        yield dict(row), f"{name}[{split}][{i}]", f"{name}-{split}-{i}"
