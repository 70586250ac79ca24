"""Progress on the console: a bar with an ETA in a terminal, a line now and then elsewhere.

tqdm's own ``disable=None`` hides the bar when stderr is not a terminal, which is right
for logs. But a pseudo-terminal that reports a size of 0 x 0 (``script``, some CI runners
and container shells) made tqdm hide the bar (it sits past the terminal's 0 lines): an
empty line per update and no ETA. ``bar`` falls back to ``COLUMNS``/``LINES`` or 100 x 20
there.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from collections.abc import Callable

from tqdm import tqdm


def is_terminal(stream=None) -> bool:
    stream = sys.stderr if stream is None else stream
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or replaced stream
        return False


def terminal_size() -> tuple[int, int]:
    """The terminal's (columns, lines); 100 columns and 20 lines where it reports none."""
    try:
        columns, lines = os.get_terminal_size(sys.stderr.fileno())
    except (AttributeError, ValueError, OSError):
        columns = lines = 0
    fallback = shutil.get_terminal_size((100, 20))
    return columns or fallback.columns or 100, lines or fallback.lines or 20


def bar(total: int | None = None, desc: str = "", unit: str = "it", initial: int = 0,
        iterable=None) -> tqdm:
    """A tqdm bar on stderr, shown only in a terminal, never 0 columns wide nor hidden
    below a terminal of 0 lines (tqdm hides a bar past the terminal's last line)."""
    shown = is_terminal()
    columns, lines = terminal_size() if shown else (None, None)
    return tqdm(iterable, total=total, desc=desc, unit=unit, initial=initial,
                disable=not shown, ncols=columns, nrows=lines, dynamic_ncols=False)


def duration(seconds: float) -> str:
    """``1h02m03s`` / ``02m03s``: the form of the ETAs in the logs."""
    left = int(round(max(seconds, 0.0)))
    hours, rest = divmod(left, 3600)
    return (f"{hours}h" if hours else "") + f"{rest // 60:02d}m{rest % 60:02d}s"


class Progress:
    """Counts work done against a total: a bar in a terminal, else a line to ``log`` at
    most every ``every`` seconds (and at the end), each with the time left at the pace
    so far; work done within ``every`` seconds prints nothing. ``update(n)`` after each
    piece of work."""

    def __init__(self, total: int, desc: str, unit: str, log: Callable[[str], None] | None = None,
                 every: float = 30.0):
        self.total, self.desc, self.unit, self.every = total, desc, unit, every
        self.log = log if log is not None else (lambda line: print(line, file=sys.stderr,
                                                                   flush=True))
        self.done = 0
        self.lines = 0
        self.started = self.last_line = time.monotonic()
        self.bar = bar(total, desc, unit) if is_terminal() else None

    def update(self, n: int = 1) -> None:
        self.done += n
        if self.bar is not None:
            self.bar.update(n)
            return
        now = time.monotonic()
        if now - self.last_line >= self.every or (self.done >= self.total and self.lines):
            self.last_line = now
            self.lines += 1
            self.log(self.line(now - self.started))

    def line(self, elapsed: float) -> str:
        left = elapsed / max(self.done, 1) * (self.total - self.done)
        return (f"{self.desc}: {self.done}/{self.total} {self.unit}s, {duration(elapsed)} "
                f"so far, ETA {duration(left)}")

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
