"""Checkpoints of a model and its AdamW state sharded over ranks (FSDP2), with
``torch.distributed.checkpoint`` (DCP).

A folder holds DCP's files (one ``.distcp`` per rank and ``.metadata``), written by
every rank at once, and ``state.json``: the JSON payload (step, config, ...) and the
SHA-256 of every DCP file. Neither format unpickles anything this code reads: DCP keeps
tensors as raw bytes and its metadata as its own serialized plan.

- **Atomic.** Every rank writes into ``.tmp-<name>``; after a barrier rank 0 checksums
  the files, writes ``state.json`` last, fsyncs and renames the folder into place. A
  kill at any point leaves either the previous checkpoint or a ``.tmp-`` folder, which
  is swept on the next save.
- **Any number of ranks.** The state is keyed by parameter name (``get_state_dict``),
  so a checkpoint of 2 ranks loads into 1 and the reverse: DCP reads each rank's pieces
  from wherever they were written. One process without a process group reads and
  writes the same format.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import warnings
from pathlib import Path
from typing import Any

import torch

from srpo_agents.running.checkpoint import CheckpointError, _fsync_dir, _sha256

STATE = "state.json"


def _distributed() -> bool:
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized()


def _rank() -> int:
    import torch.distributed as dist

    return dist.get_rank() if _distributed() else 0


def _barrier() -> None:
    import torch.distributed as dist

    if _distributed():
        dist.barrier()


@contextlib.contextmanager
def _one_process_is_meant():
    """DCP warns that it assumes one process whenever no group is initialized, even when
    told so (``no_dist``): here that is the intent."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        yield


def _state(model: torch.nn.Module, optimizer) -> dict[str, Any]:
    from torch.distributed.checkpoint.state_dict import get_state_dict

    weights, moments = get_state_dict(model, optimizer)
    return {"model": weights, "optimizer": moments}


def save_sharded(folder: Path, model: torch.nn.Module, optimizer, payload: dict) -> Path:
    """Every rank calls it. Writes ``folder`` atomically; returns it."""
    import torch.distributed.checkpoint as dcp

    folder = Path(folder)
    tmp = folder.parent / f".tmp-{folder.name}"
    if _rank() == 0:
        folder.parent.mkdir(parents=True, exist_ok=True)
        for stale in folder.parent.glob(".tmp-*"):  # left by a kill mid-write
            shutil.rmtree(stale, ignore_errors=True)
    _barrier()
    with _one_process_is_meant():
        dcp.save(_state(model, optimizer), checkpoint_id=str(tmp), no_dist=not _distributed())
    _barrier()
    if _rank() == 0:
        files = {p.name: _sha256(p) for p in sorted(tmp.iterdir()) if p.is_file()}
        for name in files:
            with (tmp / name).open("rb+") as handle:
                os.fsync(handle.fileno())
        state = {"files": files, "payload": payload}
        with (tmp / STATE).open("w", encoding="utf-8") as handle:
            json.dump(state, handle)
            handle.flush()
            os.fsync(handle.fileno())
        if folder.exists():
            shutil.rmtree(folder)
        tmp.rename(folder)
        _fsync_dir(folder.parent)
    _barrier()
    return folder


def load_sharded(folder: Path, model: torch.nn.Module, optimizer) -> dict:
    """Every rank calls it: restores ``model`` and ``optimizer`` in place from ``folder``
    (written by any number of ranks) after verifying its checksums; returns the payload.
    A ``CheckpointError`` names a missing, truncated or corrupt file."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import set_state_dict

    folder = Path(folder)
    try:
        state = json.loads((folder / STATE).read_text(encoding="utf-8"))
        files, payload = state["files"], state["payload"]
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise CheckpointError(f"{folder / STATE} is missing, truncated or corrupt "
                              f"({err})") from None
    for name, digest in files.items():
        path = folder / name
        if not path.is_file() or _sha256(path) != digest:
            raise CheckpointError(f"{path} is missing, truncated or corrupt (its SHA-256 "
                                  f"does not match {folder / STATE})")
    target = _state(model, optimizer)
    with _one_process_is_meant():
        dcp.load(target, checkpoint_id=str(folder), no_dist=not _distributed())
    set_state_dict(model, optimizer, model_state_dict=target["model"],
                   optim_state_dict=target["optimizer"])
    return payload

