"""On-disk cache of built indexes and embeddings.

- Location: the ``cache_dir`` argument, else ``$SRPO_CACHE_DIR``, else ``~/.cache/srpo``;
  files live in its ``retrieval/`` subfolder.
- Keys: each backend passes a dict (corpus content hash, backend, library version,
  tokenizer/model version, parameters, file format). The file name is the backend plus a
  digest of that dict, and the dict is also stored inside the file and compared on load,
  so a renamed or copied file can never be served for another key.
- Writes are atomic: a temp file in the same folder, fsync, then ``os.replace``. A reader
  sees the old file or the new one, never half of one, and two processes building the
  same index at once both end with a valid file (the last rename wins).
- Reads are forgiving: any error while loading (truncated file, bad zip, bad JSON, key
  mismatch, wrong shapes) logs a warning and rebuilds. A cache that cannot be written
  (read-only disk) is also only a warning: the index is still used from memory.
- Formats are ``.npz`` (``allow_pickle=False``) and JSON, never pickle, so a cache
  file cannot execute code when loaded.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, Any, TypeVar

logger = logging.getLogger(__name__)

T = TypeVar("T")

_META = "__meta__"


def default_cache_dir() -> Path:
    env = os.environ.get("SRPO_CACHE_DIR")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "srpo"


def cache_file(cache_dir: str | Path, backend: str, key: Mapping[str, Any], suffix: str) -> Path:
    digest = hashlib.sha256(json.dumps(dict(key), sort_keys=True).encode()).hexdigest()[:24]
    return Path(cache_dir).expanduser() / "retrieval" / f"{backend}-{digest}{suffix}"


def atomic_write(path: Path, write: Callable[[IO[bytes]], None]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def load_or_build(path: Path, load: Callable[[Path], T], build: Callable[[], T],
                  save: Callable[[T, IO[bytes]], None]) -> tuple[T, bool]:
    """Return ``(value, from_cache)``: the loaded file, or a fresh build that is then saved."""
    if path.exists():
        try:
            return load(path), True
        # Whatever a damaged file makes the parser raise, the remedy is the same: rebuild.
        except Exception as exc:
            logger.warning("cache file %s is unusable (%s: %s); rebuilding it",
                           path, type(exc).__name__, exc)
    value = build()
    try:
        atomic_write(path, lambda handle: save(value, handle))
    except OSError as exc:
        logger.warning("could not write cache file %s (%s); using the index from memory",
                       path, exc)
    return value, False


def _check_meta(stored: Any, expected: Mapping[str, Any]) -> None:
    if stored != dict(expected):
        raise ValueError(f"cache key mismatch: file has {stored!r}")


def save_npz(handle: IO[bytes], key: Mapping[str, Any], arrays: Mapping[str, Any]) -> None:
    import numpy as np

    meta = np.frombuffer(json.dumps(dict(key), sort_keys=True).encode(), dtype=np.uint8)
    np.savez(handle, **{_META: meta}, **arrays)


def load_npz(path: Path, key: Mapping[str, Any]) -> dict[str, Any]:
    """The arrays of ``path`` (minus the key), after checking its stored key."""
    import numpy as np

    with np.load(path, allow_pickle=False) as archive:
        arrays = {name: archive[name] for name in archive.files}
    _check_meta(json.loads(arrays.pop(_META).tobytes().decode()), key)
    return arrays


def save_json(handle: IO[bytes], key: Mapping[str, Any], payload: Any) -> None:
    # ASCII escapes keep lone surrogates (valid in a Python str, invalid in UTF-8) writable.
    handle.write(json.dumps({"key": dict(key), "payload": payload}).encode("ascii"))


def load_json(path: Path, key: Mapping[str, Any]) -> Any:
    document = json.loads(path.read_bytes())
    _check_meta(document["key"], key)
    return document["payload"]
