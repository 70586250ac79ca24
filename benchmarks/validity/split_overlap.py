"""How many held-out problems also occur among training draws, per task family and level,
by wording and by computation, under today's splits and under the text-keyed splits that
came before issue 60.

For each generated family and level: the first 500 test-split tasks (all of them where a
level holds fewer) against 20,000 train-split tasks. Two overlaps: by text (a math
question's wording; a Countdown problem's sorted numbers and target, which is also its
computation) and by computation (a math problem's reference arithmetic,
``math_tasks.computation``: "3 + 4 = 7.", no names or items). Also the distinct
computations of each split (train: among the 20,000 draws; validation and test: up to
``CAP``). The search world's test questions against its train questions close the table.
Writes ``benchmarks/results/split_overlap.md``.

    python benchmarks/validity/split_overlap.py      # about 2 minutes on one core
"""

from __future__ import annotations

from pathlib import Path

from srpo_envs import countdown_tasks, math_tasks
from srpo_envs.envs.search_env import generated_world
from srpo_envs.splits import SMALL_SPLIT

TRAIN, TEST, CAP = 20_000, 500, 5_000
OUT = Path(__file__).resolve().parents[1] / "results" / "split_overlap.md"


def math_split(level: int, split_by: str = "computation"):
    """Math level ``level``'s (task, distinct) readers under ``split_by``: "text" is the
    split before issue 60 (the same draws; only the key that assigns a split differs)."""
    def task(index: int, split: str) -> tuple[str, str]:
        t = math_tasks.generate_task(index, (level,), 0, split, split_by)
        return t.question, math_tasks.computation(t.solution)

    return task, lambda limit, split: math_tasks.distinct_tasks(limit, (level,), 0, split,
                                                                split_by)


def countdown_now(level: int):
    def task(index: int, split: str) -> tuple[str, str]:
        t = countdown_tasks.generate_task(index, (level,), 0, split)
        key = countdown_tasks.canonical_problem(t.numbers, t.target)
        return key, key

    return task, lambda limit, split: countdown_tasks.distinct_tasks(limit, (level,), 0, split)


def row(name: str, task, distinct) -> dict:
    train = [task(i, "train") for i in range(TRAIN)]
    n = distinct(TEST, "test")
    test = [task(i, "test") for i in range(n)]
    train_text, train_comp = {t for t, _ in train}, {c for _, c in train}
    test_comp = {c for _, c in test}
    return {"family": name, "test tasks": n,
            "also train (text)": sum(t in train_text for t, _ in test),
            "test computations": len(test_comp),
            "also train (computation)": len(test_comp & train_comp),
            "train computations": len(train_comp),
            "validation computations": distinct(CAP, "validation"),
            "test computations (all)": distinct(CAP, "test")}


def main() -> None:
    rows = []
    for level in math_tasks.LEVELS:
        rows.append(row(f"math level {level}", *math_split(level)))
    for level in sorted(countdown_tasks.LEVELS):
        rows.append(row(f"Countdown level {level}", *countdown_now(level)))
    before = [row(f"math level {level} (by text, before)", *math_split(level, "text"))
              for level in math_tasks.LEVELS]
    columns = list(rows[0])
    cap = lambda v: f"{v:,}" if v < CAP else f">= {CAP:,}"  # noqa: E731
    lines = ["# Held-out problems that are also training problems, by text and by computation",
             "", f"`python benchmarks/validity/split_overlap.py`: the first {TEST} test-split "
             "tasks (all, "
             f"where a level holds fewer) against {TRAIN:,} train-split tasks. \"also train "
             "(text)\": test tasks whose wording is a training task's; \"(computation)\": "
             "distinct test computations (math: the reference arithmetic, e.g. `3 + 4 = 7.`; "
             "Countdown: the numbers and target) that a training task also asks for. The "
             f"last three columns count distinct computations per split (validation and test "
             f"up to {CAP:,}). A held-out split under {SMALL_SPLIT} is too small to split "
             "(`srpo_envs.splits.small_split`; a run evaluating on it logs a warning).", "",
             "## Today: splits keyed by computation (issue 60)", "",
             "| " + " | ".join(columns) + " |", "|---" + "|---:" * (len(columns) - 1) + "|"]
    for r in rows:
        lines.append("| " + " | ".join(str(r[c]) if c == "family" or "(all)" not in c
                                       and "validation" not in c else cap(r[c])
                                       for c in columns) + " |")
    kept = columns[:6]  # the held-out walks of the old splits counted texts, not computations
    lines += ["", "## Before: math keyed by question text (the split every math result before "
              "issue 60 used)", "", "| " + " | ".join(kept) + " |",
              "|---" + "|---:" * (len(kept) - 1) + "|"]
    for r in before:
        lines.append("| " + " | ".join(str(r[c]) for c in kept) + " |")
    lines += ["", "## Search: people disjoint by split", "",
              "| world | test questions | distinct | also train questions |",
              "|---|---:|---:|---:|"]
    for form in ("default", "compact"):
        world, _ = generated_world(0, form)
        train = {t.question for t in world.tasks["train"]}
        test = [t.question for t in world.tasks["test"]][:TEST]
        lines.append(f"| {form} | {len(test)} | {len(set(test))} | "
                     f"{len(set(test) & train)} |")
    OUT.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
