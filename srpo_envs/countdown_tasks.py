"""Countdown tasks and their checker: reach a target from given numbers with + - * /.

Task ``i`` of a (``task_seed``, ``split``, levels) stream is a pure function of those
values (as the math generator's). The splits ``train``, ``validation`` and ``test`` are
disjoint by content: a problem's split is a hash of its sorted numbers and target
(``srpo_envs.splits``), and the indices of a held-out split are distinct problems while
the level has them. Level 0 holds only 138 distinct problems (about 35 of them test) and
level 1 about 2,250 (about 560 test): ``distinct_tasks`` says how many a split has. Each task is built from a random expression over its
numbers, so it always has a solution, kept as ``solution`` (a reference a warm start can
imitate). Levels:
  0. two numbers 1-9;
  1. three numbers 1-9;
  2. four numbers 1-20 (close to TinyZero's setting: 3-4 numbers, targets up to ~100).

The checker (``check_equation``) never evaluates model text as Python: a small tokenizer
and a recursive-descent parser over exact fractions read only integers, ``+ - * /`` and
parentheses, with bounds on length and nesting. An equation is right when it uses each
given number exactly once (as a multiset) and its value equals the target.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from dataclasses import dataclass
from fractions import Fraction

from srpo_envs.splits import SplitSource, check_split, split_source

LEVELS = {0: (2, 9), 1: (3, 9), 2: (4, 20)}  # level -> (count of numbers, largest)
MAX_EQUATION_CHARS = 200
MAX_DEPTH = 16
_OPS = "+-*/"


@dataclass(frozen=True)
class CountdownTask:
    task_id: str
    numbers: tuple[int, ...]
    target: int
    solution: str
    level: int = 0


def _combine(rng: random.Random, items: list[tuple[Fraction, str]]) -> tuple[Fraction, str]:
    """Join the (value, expression) items into one by random binary operations, keeping
    every intermediate value a non-negative integer (a reachable, readable target)."""
    while len(items) > 1:
        rng.shuffle(items)
        (a, left), (b, right) = items.pop(), items.pop()
        choices = ["+", "*"] + (["-"] if a >= b else []) + (
            ["/"] if b != 0 and a % b == 0 and b != 1 else [])
        op = rng.choice(choices)
        value = {"+": a + b, "-": a - b, "*": a * b, "/": a / b if b else a}[op]
        wrap = lambda e: e if e.isdigit() else f"({e})"  # noqa: E731
        items.append((value, f"{wrap(left)}{op}{wrap(right)}"))
    return items[0]


def _draw(rng: random.Random, levels: tuple[int, ...]) -> tuple[tuple[int, ...], int, str, int]:
    """One problem: (numbers, target, a solution, level)."""
    level = rng.choice(levels)
    count, largest = LEVELS[level]
    numbers = [rng.randint(1, largest) for _ in range(count)]
    value, expression = _combine(rng, [(Fraction(n), str(n)) for n in numbers])
    while value <= 0:  # a target of 0 (a - a) is dull: combine the same numbers again
        value, expression = _combine(rng, [(Fraction(n), str(n)) for n in numbers])
    return tuple(numbers), int(value), expression, level


def canonical_problem(numbers, target: int) -> str:
    """The text that identifies a problem: its numbers as a multiset and its target."""
    return f"{sorted(numbers)}->{target}"


def _source(levels: tuple[int, ...], task_seed: int, split: str) -> SplitSource:
    levels = tuple(levels)
    check_levels(levels)
    return split_source(f"countdown:{task_seed}:{levels}", check_split(split),
                        lambda rng: _draw(rng, levels),
                        lambda problem: canonical_problem(problem[0], problem[1]))


def generate_task(index: int, levels: tuple[int, ...] = (0,), task_seed: int = 0,
                  split: str = "train") -> CountdownTask:
    """Task ``index`` of the stream (``levels`` are drawn uniformly)."""
    numbers, target, expression, level = _source(levels, task_seed, split).problem(index)
    return CountdownTask(task_id=f"countdown-{split}-{task_seed}-{index}", numbers=numbers,
                         target=target, solution=expression, level=level)


def distinct_tasks(limit: int, levels: tuple[int, ...] = (0,), task_seed: int = 0,
                   split: str = "test") -> int:
    """Distinct problems of a split, counted up to ``limit`` (``srpo_envs.splits``)."""
    return _source(levels, task_seed, split).distinct(limit)


def check_levels(levels) -> None:
    levels = tuple(levels)
    if not levels or any(level not in LEVELS for level in levels):
        raise ValueError(f"levels={levels!r}: expected a non-empty tuple from {sorted(LEVELS)}")


_TOKEN = re.compile(r"\s*(?:(\d{1,9})|([-+*/()]))")


class _Parser:
    """expr := term (('+'|'-') term)*; term := atom (('*'|'/') atom)*;
    atom := INT | '(' expr ')'."""

    def __init__(self, text: str):
        self.tokens: list[str] = []
        pos = 0
        text = text.rstrip()
        while pos < len(text):
            match = _TOKEN.match(text, pos)
            if not match:
                raise ValueError(f"unexpected character {text[pos:pos + 1]!r} at {pos}")
            self.tokens.append(match.group(1) or match.group(2))
            pos = match.end()
        self.pos = 0
        self.numbers: list[int] = []

    def _peek(self) -> str | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def _take(self) -> str:
        token = self._peek()
        if token is None:
            raise ValueError("the equation ends too early")
        self.pos += 1
        return token

    def expr(self, depth: int) -> Fraction:
        value = self.term(depth)
        while self._peek() in ("+", "-"):
            value = value + self.term(depth) if self._take() == "+" else value - self.term(depth)
        return value

    def term(self, depth: int) -> Fraction:
        value = self.atom(depth)
        while self._peek() in ("*", "/"):
            op, right = self._take(), self.atom(depth)
            if op == "/" and right == 0:
                raise ValueError("division by zero")
            value = value * right if op == "*" else value / right
        return value

    def atom(self, depth: int) -> Fraction:
        token = self._take()
        if token == "(":
            if depth >= MAX_DEPTH:
                raise ValueError(f"parentheses nested deeper than {MAX_DEPTH}")
            value = self.expr(depth + 1)
            if self._peek() != ")":
                raise ValueError("a parenthesis is not closed")
            self.pos += 1
            return value
        if token.isdigit():
            self.numbers.append(int(token))
            return Fraction(int(token))
        raise ValueError(f"expected a number or '(', got {token!r}")


def extract_equation(text: str) -> str:
    """The equation a reply proposes: inside its last ``<answer>...</answer>`` if it has
    one, else its last non-empty line; a trailing ``= value`` is dropped."""
    text = text or ""
    tagged = re.findall(r"<answer>(.*?)</answer>", text, flags=re.DOTALL | re.IGNORECASE)
    if tagged:
        candidate = tagged[-1]
    else:
        lines = [line for line in text.splitlines() if line.strip()]
        candidate = lines[-1] if lines else ""
    return candidate.split("=", 1)[0].strip()


def evaluate_equation(equation: str) -> tuple[Fraction | None, list[int], str]:
    """(value, numbers used, "") of an equation, or (None, [], why) when it cannot be
    read. Only integers, + - * / and parentheses; bounded length and nesting."""
    if len(equation) > MAX_EQUATION_CHARS:
        return None, [], f"longer than {MAX_EQUATION_CHARS} characters"
    if not equation.strip():
        return None, [], "empty"
    try:
        parser = _Parser(equation)
        value = parser.expr(0)
        if parser._peek() is not None:
            raise ValueError(f"unexpected {parser._peek()!r} after the equation")
    except ValueError as err:
        return None, [], str(err)
    return value, parser.numbers, ""


def check_equation(text: str, numbers: tuple[int, ...], target: int) -> dict:
    """Grade a reply: ``correct`` (each number used exactly once and the value equals
    the target), ``valid`` (readable and using exactly the numbers), the ``equation``
    read, its ``value`` (a string, or None) and ``error``."""
    equation = extract_equation(text)
    value, used, error = evaluate_equation(equation)
    valid = value is not None and Counter(used) == Counter(numbers)
    if value is not None and not valid:
        error = f"uses {sorted(used)}; expected each of {sorted(numbers)} exactly once"
    return {"equation": equation, "value": None if value is None else str(value),
            "valid": valid, "correct": bool(valid and value == target), "error": error}
