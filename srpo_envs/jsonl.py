"""Reading task files: JSON Lines with errors that name the file, the line and why."""

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
