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

from srpo_agents.files import file_sha256, fsync_dir, swap_in
from srpo_agents.models.adapters import save_role_adapters
from srpo_agents.running.checkpoint import (
    KEEP,
    SHARED,
    CheckpointError,
    checkpoint_dirs,
    load_checkpoint,
    policy_dir,
    read_state,
    save_checkpoint,
)

STATE = "state.json"
SHARDED = "checkpoints-sharded"
"""A sharded run's folder of DCP checkpoints, in rank 0's run folder (every rank's
``checkpoints/`` then holds only its own RNGs and extras)."""


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


def _options(**more):
    """The trainable parameters only: with role adapters the frozen base is not saved
    (it is reloaded by its name, as the one-process checkpoint does); without them every
    parameter trains, so this is the whole model. Loading then expects no frozen key."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(ignore_frozen_params=True, **more)


def _state(model: torch.nn.Module, optimizer) -> dict[str, Any]:
    from torch.distributed.checkpoint.state_dict import get_state_dict

    weights, moments = get_state_dict(model, optimizer, options=_options())
    # a frozen weight tied to another (the head to the embedding) escapes the option
    frozen = {name for name, p in model.named_parameters(remove_duplicate=False)
              if not p.requires_grad}
    return {"model": {k: v for k, v in weights.items() if k not in frozen},
            "optimizer": moments}


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
        files = {p.name: file_sha256(p) for p in sorted(tmp.iterdir()) if p.is_file()}
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
        fsync_dir(folder.parent)
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
        if not path.is_file() or file_sha256(path) != digest:
            raise CheckpointError(f"{path} is missing, truncated or corrupt (its SHA-256 "
                                  f"does not match {folder / STATE})")
    target = _state(model, optimizer)
    with _one_process_is_meant():
        dcp.load(target, checkpoint_id=str(folder), no_dist=not _distributed())
    # DCP has filled every trainable key (it raises on one the checkpoint lacks); the
    # frozen ones are absent by design, hence not strict
    set_state_dict(model, optimizer, model_state_dict=target["model"],
                   optim_state_dict=target["optimizer"], options=_options(strict=False))
    return payload



def _step_folder(root: Path, step: int) -> Path:
    return Path(root) / SHARDED / f"step-{step:08d}"


def _sharded_steps(root: Path) -> list[int]:
    folder = Path(root) / SHARDED
    if not folder.is_dir():
        return []
    return sorted((int(d.name.removeprefix("step-")) for d in folder.iterdir()
                   if d.name.startswith("step-") and (d / STATE).is_file()), reverse=True)


def save_full_policy(policy, directory: Path) -> None:
    """Every rank calls it: the sharded model's whole trainable weights gathered to rank
    0's host memory, which writes ``save_pretrained``'s folder (role adapters: one PEFT
    folder a role, from the adapters' weights alone), swapped in whole."""
    from torch.distributed.checkpoint.state_dict import get_model_state_dict

    state = get_model_state_dict(policy.model, options=_options(full_state_dict=True,
                                                                  cpu_offload=True))
    if _rank() == 0:
        # The gather copies tied weights apart (the head and the embedding): tied again,
        # save_pretrained writes one of them, as from the whole model.
        tied = getattr(policy.model, "get_expanded_tied_weights_keys", dict)()
        for target, source in tied.items():
            if target in state and source in state:
                state[target] = state[source]

        def write(tmp: Path) -> None:
            if policy.adapter_roles:
                save_role_adapters(policy, tmp, state)
                return
            policy.model.save_pretrained(tmp, state_dict=state)
            policy.tokenizer.save_pretrained(tmp)

        swap_in(Path(directory), write)
    _barrier()


def _own_steps(run_dir: Path) -> list[int]:
    """Steps of this rank's own checkpoints whose state verifies."""
    steps = []
    for folder in checkpoint_dirs(run_dir):
        try:
            steps.append(int(read_state(folder)[0]["step"]))
        except CheckpointError:
            continue
    return steps


class ShardedCheckpoints:
    """A sharded (FSDP2) run's checkpoints, with the interface of
    ``checkpoint.WholeCheckpoints``: every rank calls ``save`` and ``load``."""

    def __init__(self, root: Path, run_dir: Path, policy, optimizer, generators: dict):
        self.root, self.run_dir, self.policy = Path(root), Path(run_dir), policy
        self.optimizer, self.generators = optimizer, generators

    def save(self, step: int, config: dict, extra: dict) -> None:
        """At the end of step ``step``: the weights and AdamW state into
        ``root/checkpoints-sharded/step-N`` (shared, DCP), then this rank's own checkpoint
        in ``run_dir`` (its RNGs and ``extra``, no model tensors), then ``root/policy``
        from the gathered weights. A step is resumable once both its parts exist on every
        rank (``load``), so a kill between them falls back to the step before."""
        root = self.root
        save_sharded(_step_folder(root, step), self.policy.model, self.optimizer,
                     {"step": step})
        save_checkpoint(self.run_dir, policies={}, optimizers={}, step=step, config=config,
                        generators=self.generators, extra=extra)
        save_full_policy(self.policy, policy_dir(root, SHARED))
        if _rank() == 0:
            for old in _sharded_steps(root)[KEEP:]:
                shutil.rmtree(_step_folder(root, old), ignore_errors=True)
        _barrier()

    def load(self, log=print) -> dict | None:
        """Restore the newest step that every rank's own checkpoint and the shared sharded
        one hold (both verified), and return this rank's payload; None (on every rank)
        where no step is whole yet."""
        import torch.distributed as dist

        root, run_dir = self.root, self.run_dir
        mine = set(_own_steps(run_dir))
        if _distributed():
            every: list = [None] * dist.get_world_size()
            dist.all_gather_object(every, sorted(mine))
            common = set.intersection(*(set(steps) for steps in every))
        else:
            common = mine
        sharded = _sharded_steps(root)
        if common and not sharded:  # the same on every rank: all raise together
            raise CheckpointError(
                f"{run_dir}: checkpoints of steps {sorted(common)} hold whole weights on "
                f"every rank (srpo's data parallelism before FSDP2), and this srpo resumes "
                f"only sharded ones ({root / SHARDED}); start a new run folder, or "
                f"resume it with the srpo that wrote it")
        for step in sharded:
            if step not in common:
                continue
            try:
                load_sharded(_step_folder(root, step), self.policy.model, self.optimizer)
            except CheckpointError as err:  # every rank reads the same files: all skip it
                log(f"checkpoint skipped: {err}")
                continue
            payload = load_checkpoint(run_dir, policies={}, optimizers={},
                                      generators=self.generators, log=log, step=step)
            return {**payload, "folder": str(_step_folder(root, step))}
        return None
