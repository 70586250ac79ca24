"""Fault injection for the crash-safety tests: ``SRPO_KILL_AT=point@step`` makes the
process SIGKILL itself at the first pass of ``point`` during training step ``step``
(0-based). Points: ``generation`` (between generation calls of a rollout),
``update`` (after the backward pass, before the optimizer step) and ``checkpoint``
(after the tensor file is written, before the checkpoint is complete). Unset, each
point costs one comparison."""

from __future__ import annotations

import os
import signal

_TARGET = os.environ.get("SRPO_KILL_AT", "")
step: int | None = None
"""The training step now running (set by the training loop; None outside it)."""
scope = ""
"""Prefix of this process's targets: ``"worker0:"`` in a Ray rollout worker, so that
``SRPO_KILL_AT=worker0:generation@1`` kills that worker alone."""


def at_step(value: int | None) -> None:
    global step
    step = value


def kill_point(name: str) -> None:
    if _TARGET and step is not None and _TARGET == f"{scope}{name}@{step}":
        os.kill(os.getpid(), signal.SIGKILL)
