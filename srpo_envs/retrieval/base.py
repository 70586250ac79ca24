"""Types shared by every retrieval backend: ``Passage``, the ``Retriever`` protocol,
``RetrievalError`` and the argument rules of ``Retriever.search``.

Rules every backend follows, so the search env can treat them alike:

- ``search(queries, k)`` returns one list per query, in query order, each sorted best
  first and holding at most ``k`` passages (fewer when fewer passages match).
- A blank query (empty or whitespace only) returns ``[]`` without touching the index or
  the network: there is nothing to search for, and a remote server would otherwise be
  asked to rank the whole corpus against nothing.
- ``queries`` must be a sequence of strings; a bare ``str`` is rejected because
  iterating it would silently search for every character.
- ``k == 0`` returns empty lists; a negative or non-integer ``k`` is a ``ValueError``.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable


@dataclass(frozen=True)
class Passage:
    """One retrieved passage; ``score`` is the backend's relevance score (higher is better)."""

    id: str
    title: str
    text: str
    score: float


@runtime_checkable
class Retriever(Protocol):
    def search(self, queries: Sequence[str], k: int) -> list[list[Passage]]: ...


class RetrievalError(RuntimeError):
    """The retriever could not answer: a remote server down, too slow or malformed."""


def check_search_args(queries: Sequence[str], k: int) -> tuple[list[str], int]:
    """Validate ``search`` arguments; return the queries as a list and ``k`` as an int."""
    if isinstance(queries, (str, bytes)):
        raise TypeError("queries must be a sequence of strings, not a single string")
    queries = list(queries)
    for i, query in enumerate(queries):
        if not isinstance(query, str):
            raise TypeError(f"queries[{i}] must be str, got {type(query).__name__}")
    # operator.index admits numpy integers but not floats; bool is an int subclass and
    # search(qs, True) is almost certainly a bug.
    try:
        k_int = operator.index(k)
    except TypeError:
        k_int = -1
    if isinstance(k, bool) or k_int < 0:
        raise ValueError(f"k must be a non-negative int, got {k!r}")
    return queries, k_int


def is_blank(query: str) -> bool:
    return not query.strip()
