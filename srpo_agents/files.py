"""Files that are either the old version or the whole new one: what checkpoints, run
records and the model cache write. Stdlib only."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from srpo_envs.retrieval.cache import atomic_write  # tmp, fsync, replace


def write_json_atomic(path: Path, payload: Any) -> None:
    """A JSON file that is either the old one or the complete new one, never half."""
    data = json.dumps(payload, indent=2).encode("utf-8")
    atomic_write(Path(path), lambda handle: handle.write(data))


def swap_in(directory: Path, write) -> None:
    """``write(tmp)`` into a temporary sibling folder, then swap it in for ``directory``."""
    directory.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=directory.parent, prefix=f".{directory.name}."))
    try:
        write(tmp)
        old = directory.with_name(directory.name + ".old")
        if directory.exists():
            shutil.rmtree(old, ignore_errors=True)
            directory.rename(old)
        tmp.rename(directory)
        shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def fsync_dir(path: Path) -> None:
    """Make a rename inside ``path`` durable (where the OS lets a folder be opened)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
