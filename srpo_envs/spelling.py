"""The closest known name to a mistyped one, for "did you mean" in error messages.

``difflib.get_close_matches`` alone ranks a swap of two letters no better than two
wrong letters and breaks ties by the larger string ("runs/tyr" got "tty" before "try").
Here the candidates are ranked by the optimal-string-alignment edit distance (a swap of
neighbours costs 1), then by difflib's similarity, then by name.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def edit_distance(a: str, b: str) -> int:
    """Insertions, deletions, substitutions and swaps of neighbouring characters that
    turn ``a`` into ``b`` (each costs 1; optimal string alignment)."""
    previous2: list[int] = []
    previous = list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        current = [i] + [0] * len(b)
        for j in range(1, len(b) + 1):
            cost = a[i - 1] != b[j - 1]
            current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + cost)
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                current[j] = min(current[j], previous2[j - 2] + 1)
        previous2, previous = previous, current
    return previous[-1]


def closest_match(name: str, candidates: Iterable[str], cutoff: float = 0.5) -> str | None:
    """The candidate nearest to ``name``, or None when none is similar enough (difflib's
    ratio below ``cutoff``)."""
    similar = difflib.get_close_matches(name, list(candidates), n=10, cutoff=cutoff)
    if not similar:
        return None
    return min(similar, key=lambda c: (edit_distance(name, c),
                                       -difflib.SequenceMatcher(None, name, c).ratio(), c))
