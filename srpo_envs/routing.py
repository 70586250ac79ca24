"""Mode switching: the router's decision, and the team's optional cost.

In a ``routed`` workflow a router (a role like any other) acts at each decision state;
its output is one singleton event. The env reads a *route* from it and then schedules
the chosen set: K = 1 (one specialist) or K = 2..K_max agents in parallel followed by an
aggregator, and in the math env whether a verifier checks the final answer.

Route grammar (case-insensitive): ``ROUTE: K`` with an optional ``+verify`` (``+v``),
for example ``ROUTE: 3+verify``. The last ``ROUTE:`` in the text counts; a text with no
``ROUTE:`` may give the bare form at its start (``3+v``), which short-prompted tiny
policies write. A reply that gives no K, or a K outside 1..K_max, gets the env's
documented default route and is counted in the transition's info
(``route_parsed=False``, ``route_failures``); never an error. ``+verify`` where the env
offers no verifier is ignored.

Cost (off by default): the team reward at the last event becomes
``task_reward - cost_per_token * team_tokens - cost_per_tool_call * tool_calls``, where
``team_tokens`` counts every consumed output of the episode (the router's included)
with the env's ``token_counter`` (default ``approx_tokens``: about 4 characters per
token; a learner passes its tokenizer's count) and ``tool_calls`` the retriever queries.
The last transition's info reports ``task_reward``, ``cost``, ``team_tokens`` and
``team_tool_calls`` apart, whether or not the cost is on.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass

_ROUTE = re.compile(r"route\s*:\s*(\d{1,4})\s*(\+\s*v(?:erify)?)?", re.IGNORECASE)
_BARE = re.compile(r"\s*(\d{1,4})\s*(\+\s*v(?:erify)?)?", re.IGNORECASE)


@dataclass(frozen=True)
class Route:
    """A router's decision: ``k`` agents (1 = one specialist) and whether a verifier
    checks the final answer."""

    k: int
    verify: bool = False

    def __str__(self) -> str:
        return f"ROUTE: {self.k}" + ("+verify" if self.verify else "")


def parse_route(text: str | None, k_max: int, can_verify: bool,
                default: Route) -> tuple[Route, bool]:
    """(the route, whether it was read from ``text``); the grammar is in the module doc."""
    text = text or ""
    matches = _ROUTE.findall(text)
    if matches:
        number, plus = matches[-1]
    else:
        bare = _BARE.match(text)
        if not bare:
            return default, False
        number, plus = bare.group(1), bare.group(2)
    k = int(number)
    if not 1 <= k <= k_max:
        return default, False
    return Route(k, bool(plus) and can_verify), True


def parse_default_route(spec: str, k_max: int, can_verify: bool, field: str) -> Route:
    """The ``default_route`` config field as a Route, or a clear error."""
    route, parsed = parse_route(spec, k_max, can_verify, Route(1))
    if not parsed or not isinstance(spec, str):
        raise ValueError(f"{field}={spec!r}: expected a route such as 'ROUTE: 1' or "
                         f"'ROUTE: 2+verify' with K in 1..{k_max}")
    return route


def approx_tokens(text: str) -> int:
    """About 4 characters per token, the usual rule of thumb for English BPE vocabularies."""
    return math.ceil(len(text) / 4)


TokenCounter = Callable[[str], int]


def check_cost(cost_per_token: float, cost_per_tool_call: float,
               token_counter: TokenCounter | None) -> None:
    for name, value in (("cost_per_token", cost_per_token),
                        ("cost_per_tool_call", cost_per_tool_call)):
        if isinstance(value, bool) or not isinstance(value, int | float) \
                or not math.isfinite(value) or value < 0:
            raise ValueError(f"{name}={value!r}: expected a finite number >= 0")
    if token_counter is not None and not callable(token_counter):
        raise TypeError(f"token_counter={token_counter!r}: expected a function text -> int "
                        f"or None")
