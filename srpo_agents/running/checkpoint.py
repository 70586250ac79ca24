"""Checkpoints that resume exactly, survive a kill at any point and never unpickle.

A checkpoint is a folder ``checkpoints/step-NNNNNNNN/`` of two files:

- ``tensors.safetensors``: every model weight, optimizer tensor and torch RNG state;
- ``state.json``: the step, config, optimizer hyper-parameters, Python and NumPy RNG
  states, extras, and the SHA-256 of the tensor file and of its own payload.

Neither format can run code when read: no pickle anywhere (``torch.load`` is never
called). A checkpoint is written into a temporary folder, fsynced and renamed into
place, so a kill mid-write leaves at most a ``.tmp-*`` folder that is ignored and swept.
The last ``KEEP`` checkpoints are kept. ``load_checkpoint`` takes the newest one whose
checksums verify; a truncated or corrupted one is reported by file name and skipped for
the previous good one. A ``checkpoint.pt`` of the old pickle format is refused with an
error that says why.

The policy's weights and tokenizer are also saved with ``save_pretrained`` under
``policy/`` (``policy-<role>/`` for per-role policies) so that ``srpo eval --checkpoint``
and any Hugging Face tool can load them.

A run saves and resumes through one interface, ``save(step, config, extra)`` and
``load(log)``: ``WholeCheckpoints`` below, or ``sharded_checkpoint.ShardedCheckpoints``
when the learner is sharded (FSDP2).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

from srpo_agents import faults
from srpo_agents.files import file_sha256, fsync_dir, swap_in
from srpo_agents.models.adapters import load_trainable_state, save_role_adapters, trainable_state

CHECKPOINTS = "checkpoints"
LEGACY_NAME = "checkpoint.pt"
FORMAT = 2
KEEP = 2
SHARED = "shared"


class CheckpointError(ValueError):
    """A checkpoint that cannot be used (corrupt, truncated, of another run or format)."""


def save_pretrained_atomic(model, tokenizer, directory: Path) -> None:
    """``save_pretrained`` into a temporary sibling folder, then swap it in."""
    def write(tmp: Path) -> None:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)

    swap_in(Path(directory), write)


def save_policy_atomic(policy, directory: Path) -> None:
    """A policy's folder, swapped in whole: ``save_pretrained`` of a plain model, or one
    PEFT folder per role for role adapters (``srpo_agents.models.adapters``)."""
    if policy.adapter_roles:
        swap_in(Path(directory), lambda tmp: save_role_adapters(policy, tmp))
    else:
        save_pretrained_atomic(policy.model, policy.tokenizer, directory)


def rng_state(generators: dict[str, Any]) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """The global RNGs' and the named ``random.Random``/``torch.Generator``s' states, as
    (JSON-able values, tensors)."""
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    plain: dict[str, Any] = {"python": _jsonable(random.getstate()),
                             "numpy": [kind, keys.tolist(), pos, has_gauss, cached]}
    tensors = {"rng/torch": torch.get_rng_state()}
    for name, gen in generators.items():
        if isinstance(gen, torch.Generator):
            tensors[f"rng/{name}"] = gen.get_state()
        else:
            plain[name] = _jsonable(gen.getstate())
    return plain, tensors


def set_rng_state(plain: dict[str, Any], tensors: dict[str, torch.Tensor],
                  generators: dict[str, Any]) -> None:
    random.setstate(_tuples(plain["python"]))
    kind, keys, pos, has_gauss, cached = plain["numpy"]
    np.random.set_state((kind, np.array(keys, dtype=np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(tensors["rng/torch"])
    for name, gen in generators.items():
        if isinstance(gen, torch.Generator):
            gen.set_state(tensors[f"rng/{name}"])
        else:
            gen.setstate(_tuples(plain[name]))


def _jsonable(value: Any) -> Any:
    return [_jsonable(v) for v in value] if isinstance(value, tuple | list) else value


def _tuples(value: Any) -> Any:
    return tuple(_tuples(v) for v in value) if isinstance(value, list) else value


def policy_dir(run_dir: Path, name: str) -> Path:
    """Where a run's policy is saved: ``policy/`` when shared, ``policy-<role>/`` per role."""
    return Path(run_dir) / ("policy" if name == SHARED else f"policy-{name}")


def _host_copy(value: torch.Tensor) -> torch.Tensor:
    """A tensor's own copy in host memory, made by one device-to-host copy (a clone on
    the GPU first would hold a second copy of the weights and AdamW state there). Always
    a copy: tied weights share storage, which safetensors refuses to write."""
    return value.detach().to("cpu", copy=True).contiguous()


def _optimizer_parts(name: str, optimizer) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    state = optimizer.state_dict()
    tensors, plain_state = {}, {}
    for pid, fields in state["state"].items():
        for key, value in fields.items():
            if isinstance(value, torch.Tensor):
                tensors[f"optimizer/{name}/{pid}/{key}"] = _host_copy(value)
            else:
                plain_state.setdefault(str(pid), {})[key] = value
    return {"state": plain_state, "param_groups": _jsonable(state["param_groups"])}, tensors


def optimizer_state(name: str, plain: dict[str, Any], tensors: dict[str, torch.Tensor]
                     ) -> dict[str, Any]:
    state: dict[int, dict[str, Any]] = {}
    prefix = f"optimizer/{name}/"
    for key, value in tensors.items():
        if key.startswith(prefix):
            pid, field = key[len(prefix):].split("/", 1)
            state.setdefault(int(pid), {})[field] = value
    for pid, fields in plain["state"].items():
        state.setdefault(int(pid), {}).update(fields)
    groups = [{k: tuple(v) if k == "betas" else v for k, v in group.items()}
              for group in plain["param_groups"]]
    return {"state": state, "param_groups": groups}


def _canonical(payload: Any) -> bytes:
    return json.dumps(payload, sort_keys=True, separators=(",", ":")).encode("utf-8")


def checkpoint_dirs(run_dir: Path) -> list[Path]:
    """The run's checkpoint folders, newest first (temporary ones excluded)."""
    root = Path(run_dir) / CHECKPOINTS
    if not root.is_dir():
        return []
    return sorted((d for d in root.iterdir() if d.is_dir() and d.name.startswith("step-")),
                  key=lambda d: d.name, reverse=True)


def has_checkpoint(run_dir: Path) -> bool:
    return bool(checkpoint_dirs(run_dir)) or (Path(run_dir) / LEGACY_NAME).exists()


def save_checkpoint(run_dir: Path, *, policies: dict[str, Any], optimizers: dict[str, Any],
                    step: int, config: dict, generators: dict[str, Any],
                    extra: dict | None = None) -> Path:
    """``policies``/``optimizers`` are keyed by ``SHARED`` or by role. Returns the folder."""
    from safetensors.torch import save_file

    root = Path(run_dir) / CHECKPOINTS
    root.mkdir(parents=True, exist_ok=True)
    for stale in root.glob(".tmp-*"):  # left by a kill mid-write
        shutil.rmtree(stale, ignore_errors=True)
    tensors: dict[str, torch.Tensor] = {}
    for name, policy in policies.items():
        # role adapters: the adapters only (the frozen base is reloaded by its name)
        state = (trainable_state(policy) if policy.adapter_roles
                 else policy.model.state_dict())
        for key, value in state.items():
            tensors[f"model/{name}/{key}"] = _host_copy(value)
    optim_plain = {}
    for name, optimizer in optimizers.items():
        optim_plain[name], optim_tensors = _optimizer_parts(name, optimizer)
        tensors.update(optim_tensors)
    rng_plain, rng_tensors = rng_state(generators)
    tensors.update(rng_tensors)
    payload = {"format": FORMAT, "step": step, "config": config,
               "policies": sorted(policies), "optimizers": optim_plain, "rng": rng_plain,
               "extra": extra or {}}
    tmp = Path(tempfile.mkdtemp(dir=root, prefix=f".tmp-step-{step:08d}-"))
    try:
        save_file(tensors, str(tmp / "tensors.safetensors"))
        with (tmp / "tensors.safetensors").open("rb+") as handle:
            os.fsync(handle.fileno())
        faults.kill_point("checkpoint")  # fault-injection tests: a kill mid-write
        state = {"format": FORMAT, "tensors_sha256": file_sha256(tmp / "tensors.safetensors"),
                 "payload_sha256": hashlib.sha256(_canonical(payload)).hexdigest(),
                 "payload": payload}
        with (tmp / "state.json").open("w", encoding="utf-8") as handle:
            json.dump(state, handle)
            handle.flush()
            os.fsync(handle.fileno())
        final = root / f"step-{step:08d}"
        if final.exists():
            shutil.rmtree(final)
        tmp.rename(final)
        fsync_dir(root)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    for old in checkpoint_dirs(run_dir)[KEEP:]:
        shutil.rmtree(old, ignore_errors=True)
    for name, policy in policies.items():
        save_policy_atomic(policy, policy_dir(run_dir, name))
    return final


def read_state(folder: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """(payload, the whole state.json) of one checkpoint folder after verifying the
    payload's checksum and the format, without reading the tensors (what a command that
    only needs the run's settings reads); a ``CheckpointError`` naming the file otherwise."""
    state_path = folder / "state.json"
    try:
        state = json.loads(state_path.read_text(encoding="utf-8"))
        payload, expected = state["payload"], state["payload_sha256"]
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise CheckpointError(f"{state_path} is missing, truncated or corrupt ({err})") from None
    if hashlib.sha256(_canonical(payload)).hexdigest() != expected:
        raise CheckpointError(f"{state_path}: its payload does not match its checksum")
    if state.get("format") != FORMAT:
        raise CheckpointError(f"{state_path}: format {state.get('format')!r}, expected {FORMAT}")
    return payload, state


def read_checkpoint(folder: Path) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """(payload, tensors) of one checkpoint folder after verifying both checksums; a
    ``CheckpointError`` naming the bad file otherwise."""
    from safetensors.torch import load_file

    state_path, tensor_path = folder / "state.json", folder / "tensors.safetensors"
    payload, state = read_state(folder)
    if not tensor_path.is_file() or file_sha256(tensor_path) != state["tensors_sha256"]:
        raise CheckpointError(f"{tensor_path} is missing, truncated or corrupt (its SHA-256 "
                              f"does not match {state_path})")
    return payload, load_file(str(tensor_path))


def load_checkpoint(run_dir: Path, *, policies: dict[str, Any], optimizers: dict[str, Any],
                    generators: dict[str, Any], log=print, step: int | None = None) -> dict:
    """Restore models, optimizers and RNGs in place from the newest good checkpoint (of
    step ``step`` only, when given); return its payload (step, extra...)."""
    run_dir = Path(run_dir)
    if (run_dir / LEGACY_NAME).exists() and not checkpoint_dirs(run_dir):
        raise CheckpointError(
            f"--resume: {run_dir / LEGACY_NAME} is a checkpoint of the old pickle format, "
            f"which srpo no longer loads: unpickling a file can run arbitrary code. Resume "
            f"is possible from checkpoints written by this version (checkpoints/step-*/)")
    folders = [f for f in checkpoint_dirs(run_dir)
               if step is None or f.name == f"step-{step:08d}"]
    if not folders:
        raise FileNotFoundError(f"--resume: no checkpoint in {run_dir / CHECKPOINTS}"
                                + (f" of step {step}" if step is not None else ""))
    problems = []
    for folder in folders:
        try:
            payload, tensors = read_checkpoint(folder)
        except CheckpointError as err:
            problems.append(str(err))
            log(f"checkpoint skipped: {err}")
            continue
        if set(payload["policies"]) != set(policies):
            raise CheckpointError(
                f"--resume: {folder} holds policies {payload['policies']} but this run has "
                f"{sorted(policies)} (per_role_policies differs?)")
        for name, policy in policies.items():
            prefix = f"model/{name}/"
            state = {k[len(prefix):]: v for k, v in tensors.items() if k.startswith(prefix)}
            if policy.adapter_roles:
                try:
                    load_trainable_state(policy, state, str(folder))
                except ValueError as err:
                    raise CheckpointError(f"--resume: {err}") from None
            else:
                policy.model.load_state_dict(state)
            optimizers[name].load_state_dict(
                optimizer_state(name, payload["optimizers"][name], tensors))
        set_rng_state(payload["rng"], tensors, generators)
        return {**payload, "folder": str(folder)}
    raise CheckpointError("--resume: no usable checkpoint; " + "; ".join(problems))


class WholeCheckpoints:
    """A run's checkpoints holding whole weights (one process, or a rank with its own
    copy). ``save`` and ``load`` are the interface a run checkpoints through; the FSDP2
    learner's is ``sharded_checkpoint.ShardedCheckpoints``."""

    def __init__(self, run_dir: Path, policies: dict[str, Any], optimizers: dict[str, Any],
                 generators: dict[str, Any]):
        self.run_dir, self.policies = Path(run_dir), policies
        self.optimizers, self.generators = optimizers, generators

    def save(self, step: int, config: dict, extra: dict) -> None:
        save_checkpoint(self.run_dir, policies=self.policies, optimizers=self.optimizers,
                        step=step, config=config, generators=self.generators, extra=extra)

    def load(self, log=print) -> dict | None:
        """Restore the newest good checkpoint in place and return its payload; None when
        the run has none yet."""
        if not has_checkpoint(self.run_dir):
            return None
        return load_checkpoint(self.run_dir, policies=self.policies,
                               optimizers=self.optimizers, generators=self.generators,
                               log=log)
