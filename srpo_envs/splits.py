"""Train, validation and test splits of a generated task family, disjoint by content.

A generated problem's split is a function of its *content* alone: a hash of its
canonical form (a math question's text, a Countdown problem's sorted numbers and target)
puts it in ``test`` (25%), ``validation`` (10%) or ``train`` (the rest). No seed, level or
index enters that hash, so a problem can never be a training problem in one stream and a
held-out one in another. (Before, each split was its own seeded stream over the same
finite space, and up to 207 of 207 distinct test problems also occurred in training.)

Indices within a split:

- **validation and test**: index ``i`` is the ``i``-th *distinct* problem of the split,
  in the order a seeded stream of draws first reaches it. When the stream stops finding
  new ones (``MISS_LIMIT`` draws in a row without one: the level's space is used up),
  the split has ``distinct(...)`` problems and higher indices wrap around; an evaluation
  asks ``distinct(n)`` first and uses each problem once (``srpo_agents`` says how many).
- **train**: index ``i`` is an independent draw kept only if it falls in ``train``
  (tried again under a derived seed until it does). Training samples tasks with
  replacement anyway, and its indices range up to 2**31, so no distinct walk is made.

Each source is cached per process and keyed by its stream name, so a walk is made once.
"""

from __future__ import annotations

import hashlib
import random
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")

SPLITS = ("train", "validation", "test")
HELD_OUT = ("validation", "test")
# Upper bounds of each split's share of [0, 1) in the content hash, in this order.
SHARES = (("test", 0.25), ("validation", 0.35), ("train", 1.0))
MISS_LIMIT = 20_000
TRAIN_ATTEMPTS = 10_000


def check_split(split: str) -> str:
    if split not in SPLITS:
        raise ValueError(f"split={split!r}: expected one of {SPLITS}")
    return split


def split_of(canonical: str) -> str:
    """The split a problem belongs to, from its canonical text alone."""
    digest = hashlib.blake2b(canonical.encode("utf-8"), digest_size=8,
                             person=b"srpo-splits").digest()
    point = int.from_bytes(digest, "big") / 2**64
    return next(name for name, bound in SHARES if point < bound)


class SplitSource(Generic[T]):
    """The problems of one split of one stream (module docstring).

    ``draw(rng)`` makes a problem from a ``random.Random``; ``canonical(problem)`` is the
    text that identifies it (two problems with the same text are the same problem)."""

    def __init__(self, name: str, split: str, draw: Callable[[random.Random], T],
                 canonical: Callable[[T], str]):
        self.name, self.split = name, check_split(split)
        self._draw, self._canonical = draw, canonical
        self._found: list[T] = []
        self._seen: set[str] = set()
        self._next_draw = 0
        self._exhausted = False
        self._lock = threading.Lock()

    def problem(self, index: int) -> T:
        if not isinstance(index, int) or index < 0:
            raise ValueError(f"index={index!r}: expected an int >= 0")
        if self.split == "train":
            return self._train_problem(index)
        with self._lock:
            self._walk(index + 1)
            if not self._found:
                raise ValueError(f"{self.name}: the {self.split} split holds no problem")
            return self._found[index % len(self._found)]

    def distinct(self, limit: int) -> int:
        """How many distinct problems the split has, counted up to ``limit`` (train:
        ``limit``, since its draws are independent)."""
        if self.split == "train":
            return limit
        with self._lock:
            self._walk(limit)
            return min(limit, len(self._found))

    def _train_problem(self, index: int) -> T:
        for attempt in range(TRAIN_ATTEMPTS):
            rng = random.Random(f"{self.name}|train|{index}|{attempt}")
            problem = self._draw(rng)
            if split_of(self._canonical(problem)) == "train":
                return problem
        raise ValueError(f"{self.name}: no train problem in {TRAIN_ATTEMPTS} draws")

    def _walk(self, wanted: int) -> None:
        """Draw until ``wanted`` distinct problems of the split are found or the stream
        has gone ``MISS_LIMIT`` draws without a new one."""
        misses = 0
        while len(self._found) < wanted and not self._exhausted:
            problem = self._draw(random.Random(f"{self.name}|held-out|{self._next_draw}"))
            self._next_draw += 1
            key = self._canonical(problem)
            if key not in self._seen and split_of(key) == self.split:
                self._seen.add(key)
                self._found.append(problem)
                misses = 0
            else:
                misses += 1
                self._exhausted = misses >= MISS_LIMIT


SMALL_SPLIT = 100
"""A held-out split with fewer distinct problems than this is too small to split: a
held-out score on it measures a few dozen problems, most of them a step from training
ones (generated math level 0: about 30 test computations; Countdown level 0: about 35)."""


def small_split(family: str, levels, split: str, held: int) -> str | None:
    """The warning for a held-out ``split`` that holds ``held`` (< ``SMALL_SPLIT``)
    distinct problems, or None when it holds enough."""
    if split not in HELD_OUT or held >= SMALL_SPLIT:
        return None
    return (f"{family} levels {tuple(levels)}: the {split} split holds only {held} distinct "
            f"problems (fewer than {SMALL_SPLIT}): too small to split, so a held-out score "
            f"on it says little about a trained policy; choose a larger level or mix levels")


_SOURCES: dict[tuple[str, str], SplitSource] = {}
_SOURCES_LOCK = threading.Lock()


def split_source(name: str, split: str, draw: Callable[[random.Random], T],
                 canonical: Callable[[T], str]) -> SplitSource[T]:
    """The cached source of ``split`` of the stream ``name`` (one walk per process).
    ``name`` must identify ``draw`` (family, task seed, levels)."""
    key = (name, check_split(split))
    with _SOURCES_LOCK:
        if key not in _SOURCES:
            _SOURCES[key] = SplitSource(name, split, draw, canonical)
        return _SOURCES[key]
