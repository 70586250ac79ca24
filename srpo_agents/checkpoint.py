"""Checkpoints: model, optimizer, every RNG state, step and config in one file, written
atomically (temporary file in the same folder, fsync, ``os.replace``) so a crash
mid-write leaves the previous checkpoint intact and ``--resume`` continues exactly.

The policy's weights and tokenizer are also saved with ``save_pretrained`` under
``policy/`` (``policy-<role>/`` for per-role policies) so that ``srpo eval --checkpoint`` and any Hugging Face tool can load them.
"""

from __future__ import annotations

import json
import random
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

from srpo_envs.retrieval.cache import atomic_write  # stdlib only: tmp, fsync, replace

CHECKPOINT_NAME = "checkpoint.pt"
SHARED = "shared"


def _atomic_torch_save(obj: Any, path: Path) -> None:
    atomic_write(path, lambda handle: torch.save(obj, handle))


def write_json_atomic(path: Path, payload: Any) -> None:
    """A JSON file that is either the old one or the complete new one, never half."""
    data = json.dumps(payload, indent=2).encode("utf-8")
    atomic_write(Path(path), lambda handle: handle.write(data))


def save_pretrained_atomic(model, tokenizer, directory: Path) -> None:
    """``save_pretrained`` into a temporary sibling folder, then swap it in."""
    directory.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=directory.parent, prefix=f".{directory.name}."))
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        old = directory.with_name(directory.name + ".old")
        if directory.exists():
            shutil.rmtree(old, ignore_errors=True)
            directory.rename(old)
        tmp.rename(directory)
        shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def rng_state(generators: dict[str, Any]) -> dict[str, Any]:
    """States of the global RNGs plus the named ``random.Random``/``torch.Generator``s."""
    state = {"python": random.getstate(), "numpy": np.random.get_state(),
             "torch": torch.get_rng_state()}
    for name, gen in generators.items():
        state[name] = gen.get_state() if isinstance(gen, torch.Generator) else gen.getstate()
    return state


def set_rng_state(state: dict[str, Any], generators: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    for name, gen in generators.items():
        if isinstance(gen, torch.Generator):
            gen.set_state(state[name])
        else:
            gen.setstate(state[name])


def policy_dir(run_dir: Path, name: str) -> Path:
    """Where a run's policy is saved: ``policy/`` when shared, ``policy-<role>/`` per role."""
    return Path(run_dir) / ("policy" if name == SHARED else f"policy-{name}")


def save_checkpoint(run_dir: Path, *, policies: dict[str, Any], optimizers: dict[str, Any],
                    step: int, config: dict, generators: dict[str, Any],
                    extra: dict | None = None) -> Path:
    """``policies``/``optimizers`` are keyed by ``SHARED`` or by role."""
    path = Path(run_dir) / CHECKPOINT_NAME
    payload = {"step": step, "config": config,
               "models": {name: p.model.state_dict() for name, p in policies.items()},
               "optimizers": {name: o.state_dict() for name, o in optimizers.items()},
               "rng": rng_state(generators), "extra": extra or {}}
    _atomic_torch_save(payload, path)
    for name, policy in policies.items():
        save_pretrained_atomic(policy.model, policy.tokenizer, policy_dir(run_dir, name))
    return path


def load_checkpoint(run_dir: Path, *, policies: dict[str, Any], optimizers: dict[str, Any],
                    generators: dict[str, Any]) -> dict:
    """Restore models, optimizers and RNGs in place; return the payload (step, extra...)."""
    path = Path(run_dir) / CHECKPOINT_NAME
    if not path.is_file():
        raise FileNotFoundError(f"--resume: no checkpoint at {path}")
    payload = torch.load(path, map_location="cpu", weights_only=False)
    if set(payload["models"]) != set(policies):
        raise ValueError(f"--resume: the checkpoint holds policies {sorted(payload['models'])}"
                         f" but this run has {sorted(policies)} (per_role_policies differs?)")
    for name, policy in policies.items():
        policy.model.load_state_dict(payload["models"][name])
        optimizers[name].load_state_dict(payload["optimizers"][name])
    set_rng_state(payload["rng"], generators)
    return payload
