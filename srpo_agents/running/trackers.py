"""Experiment trackers a run reports to (``srpo train --report-to``, TRL's spelling):
``tensorboard``, ``trackio``, ``wandb``, or ``none``. Each gets the run's config once and
every number of each ``metrics.jsonl`` row, under the same key, at step ``row["step"] +
1``; nested figures (``by_route_k``) as ``key/sub``. The held-out evaluations before and
after go under ``eval/`` (steps 0 and ``steps``).

- ``tensorboard``: event files in ``<out>/tensorboard`` (the ``tensorboard`` extra).
- ``trackio``: Hugging Face's local-first tracker (the ``trackio`` extra): a SQLite file
  in ``$TRACKIO_DIR`` (default ``~/.cache/huggingface/trackio``), project
  ``$TRACKIO_PROJECT`` or "srpo", run named after ``--out``; ``trackio show`` opens it.
- ``wandb``: Weights & Biases (the ``wandb`` extra), project ``$WANDB_PROJECT`` or
  "srpo", files under ``<out>/wandb``. It runs offline when ``WANDB_MODE=offline`` or
  when no login is found (no ``WANDB_API_KEY``, no api.wandb.ai entry in ``~/.netrc``),
  and says so; ``wandb sync <out>/wandb/offline-run-*`` uploads such a run later. A
  resumed run continues its W&B run (its id is kept in ``<out>/wandb_run_id``).

Each tracker's package is imported only when it is asked for. What a tracker prints
(trackio's banner) keeps its colours in a terminal and loses them elsewhere
(``plain_when_piped``), so a log file holds no raw escape codes.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import sys
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

TRACKERS = ("tensorboard", "trackio", "wandb")
EVAL_KEYS = ("avg_at_k", "pass_at_k", "tokens_per_task", "tool_calls_per_task")


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


def _need(package: str, tracker: str) -> Any:
    import importlib

    try:
        return importlib.import_module(package)
    except ImportError as err:
        raise ImportError(f"--report-to {tracker} needs the {package} package: pip install "
                          f"{package} (or the srpo extra '{tracker}')") from err


ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


@contextlib.contextmanager
def plain_when_piped():
    """Run a block whose prints may carry terminal colour codes: as they are in a
    terminal, with the codes taken out when stdout is a file or a pipe."""
    if sys.stdout.isatty():
        yield
        return
    captured = io.StringIO()
    try:
        with contextlib.redirect_stdout(captured):
            yield
    finally:
        sys.stdout.write(ANSI_ESCAPE.sub("", captured.getvalue()))


def step_numbers(row: Mapping[str, Any]) -> tuple[int, dict[str, float]]:
    return int(row["step"]) + 1, {k: v for k, v in scalars(row) if k != "step"}


def eval_numbers(result: Mapping[str, Any]) -> dict[str, float]:
    return {f"eval/{key}": float(result[key]) for key in EVAL_KEYS if key in result}


class TensorBoardLog:
    def __init__(self, log_dir: str | Path, config: Mapping[str, Any] | None = None):
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as err:
            raise ImportError("--report-to tensorboard needs the tensorboard package: pip "
                              "install tensorboard (or the srpo extra 'tensorboard')") from err
        self.writer = SummaryWriter(log_dir=str(log_dir))
        if config is not None:
            self.writer.add_text("config", json.dumps(dict(config), indent=1))

    def row(self, row: Mapping[str, Any]) -> None:
        step, numbers = step_numbers(row)
        for key, value in numbers.items():
            self.writer.add_scalar(key, value, step)
        self.writer.flush()

    def evaluation(self, tag: str, result: Mapping[str, Any], step: int) -> None:
        for key, value in eval_numbers(result).items():
            self.writer.add_scalar(key, value, step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class TrackioLog:
    def __init__(self, run_dir: Path, config: Mapping[str, Any], resume: bool):
        self.trackio = _need("trackio", "trackio")
        with plain_when_piped():
            self.trackio.init(project=os.environ.get("TRACKIO_PROJECT", "srpo"),
                              name=Path(run_dir).name, config=dict(config),
                              resume="allow" if resume else "never", embed=False,
                              auto_log_cpu=False, auto_log_gpu=False)

    def row(self, row: Mapping[str, Any]) -> None:
        step, numbers = step_numbers(row)
        self.trackio.log(numbers, step=step)

    def evaluation(self, tag: str, result: Mapping[str, Any], step: int) -> None:
        self.trackio.log(eval_numbers(result), step=step)

    def close(self) -> None:
        with plain_when_piped():
            self.trackio.finish()


def wandb_logged_in() -> bool:
    if os.environ.get("WANDB_API_KEY"):
        return True
    netrc = Path(os.environ.get("NETRC", Path.home() / ".netrc"))
    return netrc.is_file() and "api.wandb.ai" in netrc.read_text(errors="replace")


class WandbLog:
    def __init__(self, run_dir: Path, config: Mapping[str, Any], resume: bool, log=print):
        wandb = _need("wandb", "wandb")
        mode = os.environ.get("WANDB_MODE", "")
        if not mode and not wandb_logged_in():
            mode = "offline"
            log("wandb: no login found (WANDB_API_KEY, ~/.netrc): logging offline to "
                f"{run_dir / 'wandb'}; upload later with `wandb sync`")
        elif mode == "offline":
            log(f"wandb: WANDB_MODE=offline: logging offline to {run_dir / 'wandb'}")
        id_file = Path(run_dir) / "wandb_run_id"
        run_id = id_file.read_text().strip() if resume and id_file.is_file() else None
        run_id = run_id or uuid.uuid4().hex[:12]
        id_file.write_text(run_id)
        self.run = wandb.init(project=os.environ.get("WANDB_PROJECT", "srpo"),
                              name=Path(run_dir).name, id=run_id, resume="allow",
                              config=dict(config), dir=str(run_dir), mode=mode or None)

    def row(self, row: Mapping[str, Any]) -> None:
        step, numbers = step_numbers(row)
        self.run.log(numbers, step=step)

    def evaluation(self, tag: str, result: Mapping[str, Any], step: int) -> None:
        # W&B refuses a step below the last one logged: "after" lands on the last step
        self.run.log(eval_numbers(result), step=step)

    def close(self) -> None:
        self.run.finish()


class Trackers:
    """The trackers of ``names`` (checked: ``config.check_run``), as one."""

    def __init__(self, names: tuple[str, ...], run_dir: Path, config: Mapping[str, Any],
                 resume: bool = False, log=print):
        run_dir = Path(run_dir)
        self.trackers: list[Any] = []
        for name in names:
            if name == "tensorboard":
                self.trackers.append(TensorBoardLog(run_dir / "tensorboard", config))
            elif name == "trackio":
                self.trackers.append(TrackioLog(run_dir, config, resume))
            elif name == "wandb":
                self.trackers.append(WandbLog(run_dir, config, resume, log))

    def row(self, row: Mapping[str, Any]) -> None:
        for tracker in self.trackers:
            tracker.row(row)

    def evaluation(self, tag: str, result: Mapping[str, Any], step: int) -> None:
        for tracker in self.trackers:
            tracker.evaluation(tag, result, step)

    def close(self) -> None:
        for tracker in self.trackers:
            tracker.close()
