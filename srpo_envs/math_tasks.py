"""Math tasks: the embedded generator of arithmetic word problems and the loaders of
real data (a JSONL file with ``question``/``answer``, or a Hugging Face ``datasets`` name).

The generator is the embedded default: seeded, no download. Task ``i`` of a
(``task_seed``, levels, ``split``) stream is a pure function of those values, so every
rollout of a task, on any machine, sees the same problem. The splits ``train``,
``validation`` and ``test`` are disjoint by *computation*, not only by wording: a
problem's split is a hash of its computation (``computation``: the operands and
operations of its reference solution, "3 + 4 = 7."; no name or item enters it;
``srpo_envs.splits``), so no held-out problem asks for arithmetic a training problem
asked for under other names. The indices of a held-out split are distinct computations
while the level has them. Level 0 holds about 125 computations in all (34 of them
test): too small to split, and the env says so (``splits.small_split``) (issue 60: before, splits
hashed the question text, and all 122 computations of level 0's 500 test tasks were
training computations under other names).

Difficulty levels (answers are exact; levels 0-4 integers, level 5 fractions):
  0. one addition or subtraction with numbers 1-9 (a warm-up level that a 1M-parameter
     CPU policy can learn in minutes);
  1. one addition or subtraction with numbers 1-20;
  2. two additions/subtractions with numbers 1-50;
  3. a multiplication or exact division, then an addition or subtraction;
  4. three mixed steps with numbers up to 1000;
  5. fractions of a quantity and percentages, answers in lowest terms.

Every task carries a reference ``solution`` ending in ``\\boxed{answer}``: the
trajectory a warm start can imitate.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

from srpo_envs.jsonl import read_hf_dataset, read_jsonl
from srpo_envs.splits import SplitSource, check_split, split_source

LEVELS = (0, 1, 2, 3, 4, 5)


@dataclass(frozen=True)
class MathTask:
    """One problem: a stable id, the question, the exact gold answer and a reference."""

    task_id: str
    question: str
    answer: str
    solution: str = ""
    meta: dict[str, Any] = field(default_factory=dict, compare=False)


_NAMES = ("Ava", "Ben", "Chen", "Dara", "Eli", "Fatima", "Gus", "Hana", "Ivan", "Jo",
          "Kofi", "Lena", "Mia", "Noor", "Omar", "Pia", "Ravi", "Sara", "Tom", "Yuki")
_ITEMS = ("apples", "books", "coins", "stamps", "marbles", "pencils", "shells", "cards",
          "stickers", "beads", "cookies", "toy cars")


def _fmt(value: Fraction) -> str:
    return str(value.numerator) if value.denominator == 1 else f"{value.numerator}/{value.denominator}"


def _add_or_sub(rng: random.Random, total: int, hi: int) -> tuple[str, int, int]:
    """One step on ``total`` that keeps it non-negative: (verb phrase, operand, new total)."""
    if total > 1 and rng.random() < 0.5:
        b = rng.randint(1, min(hi, total))
        return rng.choice(("gives away {b}", "loses {b}", "uses {b}")).format(b=b), -b, total - b
    b = rng.randint(1, hi)
    return rng.choice(("gets {b} more", "buys {b} more", "finds {b} more")).format(b=b), b, total + b


def _step_line(before: int, delta: int) -> str:
    op = "+" if delta >= 0 else "-"
    return f"{before} {op} {abs(delta)} = {before + delta}."


def _level_add(rng: random.Random, steps: int, hi: int) -> tuple[str, list[str], Fraction]:
    name, item = rng.choice(_NAMES), rng.choice(_ITEMS)
    total = rng.randint(1, hi)
    sentences, lines = [f"{name} has {total} {item}."], []
    for _ in range(steps):
        phrase, delta, new = _add_or_sub(rng, total, hi)
        sentences.append(f"Then {name} {phrase}.")
        lines.append(_step_line(total, delta))
        total = new
    sentences.append(f"How many {item} does {name} have now?")
    return " ".join(sentences), lines, Fraction(total)


def _level_mul(rng: random.Random) -> tuple[str, list[str], Fraction]:
    name, item = rng.choice(_NAMES), rng.choice(_ITEMS)
    groups, per = rng.randint(2, 9), rng.randint(2, 12)
    if rng.random() < 0.5:
        question = f"{name} has {groups} boxes with {per} {item} in each box."
        lines = [f"{groups} * {per} = {groups * per}."]
        total = groups * per
    else:
        question = f"{name} shares {groups * per} {item} equally among {groups} friends."
        lines = [f"{groups * per} / {groups} = {per}."]
        total = per
        question += " Each friend gets a share."
    phrase, delta, new = _add_or_sub(rng, total, 20)
    lines.append(_step_line(total, delta))
    subject = name if "boxes" in question else "one friend"
    question += f" Then {subject} {phrase}. How many {item} does {subject} have now?"
    return question, lines, Fraction(new)


def _level_mixed(rng: random.Random) -> tuple[str, list[str], Fraction]:
    name, item = rng.choice(_NAMES), rng.choice(_ITEMS)
    price, count, fee = rng.randint(3, 40), rng.randint(2, 25), rng.randint(1, 50)
    spent = price * count
    budget = spent + fee + rng.randint(0, 300)
    question = (f"{name} has {budget} dollars and buys {count} {item} at {price} dollars each, "
                f"then pays a {fee} dollar fee. How many dollars does {name} have left?")
    left = budget - spent - fee
    lines = [f"{count} * {price} = {spent}.", f"{budget} - {spent} = {budget - spent}.",
             f"{budget - spent} - {fee} = {left}."]
    return question, lines, Fraction(left)


def _level_fraction(rng: random.Random) -> tuple[str, list[str], Fraction]:
    name, item = rng.choice(_NAMES), rng.choice(_ITEMS)
    if rng.random() < 0.5:
        pct, whole = rng.choice((10, 20, 25, 30, 40, 50, 60, 75)), rng.randint(2, 40) * 4
        value = Fraction(pct, 100) * whole
        question = f"{name} has {whole} {item} and gives away {pct}% of them. How many {item} are given away?"
        lines = [f"{pct}/100 * {whole} = {_fmt(value)}."]
        return question, lines, value
    num, den = rng.randint(1, 5), rng.randint(2, 9)
    whole = rng.randint(1, 12)
    value = Fraction(num, den) * whole
    question = (f"A recipe needs {num}/{den} cup of sugar per batch. {name} makes {whole} "
                f"batches. How many cups of sugar are needed? Give the answer as a fraction in "
                f"lowest terms or a whole number.")
    lines = [f"{num}/{den} * {whole} = {_fmt(value)}."]
    return question, lines, value


def _draw(rng: random.Random, levels: tuple[int, ...]) -> tuple[str, str, str, int]:
    """One problem: (question, answer, reference solution, level)."""
    level = rng.choice(levels)
    if level == 0:
        question, lines, value = _level_add(rng, 1, 9)
    elif level == 1:
        question, lines, value = _level_add(rng, 1, 20)
    elif level == 2:
        question, lines, value = _level_add(rng, 2, 50)
    elif level == 3:
        question, lines, value = _level_mul(rng)
    elif level == 4:
        question, lines, value = _level_mixed(rng)
    else:
        question, lines, value = _level_fraction(rng)
    answer = _fmt(value)
    return question, answer, " ".join(lines) + f" \\boxed{{{answer}}}", level


def computation(solution: str) -> str:
    """What identifies a generated problem for its split: the arithmetic of its reference
    solution (the lines before ``\\boxed``), e.g. "3 + 4 = 7.": its operands and
    operations, and nothing of its wording."""
    return solution.split("\\boxed", 1)[0].strip()


SPLIT_BY = ("computation", "text")
"""What a generated problem's split is keyed by: its ``computation`` (the default since
issue 60: no held-out problem asks for a training problem's arithmetic) or its question
``text`` (the splits before issue 60, kept so their runs can be repeated on the same
tasks: held out by wording only, a held-out problem's arithmetic is often a training
problem's under other names; ``benchmarks/results/split_overlap.md``)."""


def check_split_by(split_by: str) -> str:
    if split_by not in SPLIT_BY:
        raise ValueError(f"split_by={split_by!r}: expected one of {SPLIT_BY}")
    return split_by


def _source(levels: Sequence[int], task_seed: int, split: str,
            split_by: str = "computation") -> SplitSource:
    levels = check_levels(tuple(levels))
    if check_split_by(split_by) == "text":  # the stream's name and key before issue 60
        return split_source(f"srpo-math:{task_seed}:{levels}", split,
                            lambda rng: _draw(rng, levels), lambda problem: problem[0])
    # "by-computation": the stream's name changed with its canonical key, so a cached
    # source of the old, text-keyed splits can never be taken for it
    return split_source(f"srpo-math:by-computation:{task_seed}:{levels}", split,
                        lambda rng: _draw(rng, levels), lambda problem: computation(problem[2]))


def generate_task(index: int, levels: Sequence[int] = (1,), task_seed: int = 0,
                  split: str = "train", split_by: str = "computation") -> MathTask:
    """Task ``index`` of the (``task_seed``, levels, ``split``) stream; a pure function of
    its arguments (see the module docstring for how splits are kept apart; ``split_by``:
    ``SPLIT_BY``)."""
    question, answer, solution, level = _source(levels, task_seed, check_split(split),
                                                split_by).problem(index)
    return MathTask(task_id=f"gen-{split}-{task_seed}-{index}", question=question,
                    answer=answer, solution=solution, meta={"level": level})


def distinct_tasks(limit: int, levels: Sequence[int] = (1,), task_seed: int = 0,
                   split: str = "test", split_by: str = "computation") -> int:
    """Distinct questions of a split, counted up to ``limit`` (``srpo_envs.splits``)."""
    return _source(levels, task_seed, check_split(split), split_by).distinct(limit)


def check_levels(difficulty: int | Iterable[int]) -> tuple[int, ...]:
    levels = (difficulty,) if isinstance(difficulty, int) else tuple(difficulty)
    if not levels or any(not isinstance(v, int) or v not in LEVELS for v in levels):
        raise ValueError(f"difficulty={difficulty!r}: expected a level in {LEVELS} or a "
                         f"non-empty sequence of them")
    return levels


def _answer_text(value: Any) -> str | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return str(int(value)) if float(value).is_integer() else str(value)
    if isinstance(value, str) and value.strip():
        text = value.strip()
        # GSM8K's raw format ends the worked solution with "#### <answer>".
        return text.rsplit("####", 1)[1].strip() if "####" in text else text
    return None


def _task_from_record(record: Any, where: str, fallback_id: str) -> MathTask:
    if not isinstance(record, dict):
        raise ValueError(f"{where}: expected a JSON object, got {type(record).__name__}")
    question = record.get("question", record.get("problem"))
    if not isinstance(question, str) or not question.strip():
        raise ValueError(f"{where}: field 'question' = {question!r}; expected a non-empty string")
    raw = record.get("answer")
    answer = _answer_text(raw)
    if answer is None:
        raise ValueError(f"{where}: field 'answer' = {raw!r}; expected a non-empty string or number")
    task_id = str(record.get("id", fallback_id))
    solution = record.get("solution") or ""
    meta = {k: v for k, v in record.items() if k in ("level", "subject", "source")}
    return MathTask(task_id=task_id, question=question, answer=answer,
                    solution=solution if isinstance(solution, str) else "", meta=meta)


def load_jsonl_tasks(path: str | Path) -> list[MathTask]:
    """Read ``question``/``answer`` rows (``problem`` is accepted for ``question``)."""
    tasks = [_task_from_record(record, where, f"{Path(path).stem}-{row}")
             for record, where, row in read_jsonl(path)]
    if not tasks:
        raise ValueError(f"dataset={str(path)!r}: the file holds no tasks")
    ids = [t.task_id for t in tasks]
    if len(set(ids)) != len(ids):
        raise ValueError(f"dataset={str(path)!r}: task ids are not unique")
    return tasks


def load_hf_tasks(name: str, config: str | None = None, split: str = "test") -> list[MathTask]:
    """Load a Hugging Face dataset by name (needs the ``datasets`` package and a network)."""
    return [_task_from_record(record, where, fallback)
            for record, where, fallback in read_hf_dataset(name, config, split)]


def load_tasks(dataset: str | Path, config: str | None = None, split: str = "test") -> list[MathTask]:
    """A JSONL path (anything ending in .jsonl or an existing file) or a ``datasets`` name."""
    text = str(dataset)
    if text.endswith(".jsonl") or Path(text).is_file():
        return load_jsonl_tasks(text)
    return load_hf_tasks(text, config, split)
