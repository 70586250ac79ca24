"""How many held-out problems also occur among training draws, per task family and level.

For each generated family and level: the first 500 test-split tasks (all of them where a
level holds fewer, ``distinct_tasks``) against 20,000 train-split tasks, by canonical
problem (a math question's text; a Countdown problem's sorted numbers and target), plus
the search world's test questions against its train questions. Writes
``benchmarks/results/split_overlap.md``.

    python benchmarks/split_overlap.py
"""

from __future__ import annotations

from pathlib import Path

from srpo_envs import countdown_tasks, math_tasks
from srpo_envs.envs.search_env import generated_world

TRAIN, TEST = 20_000, 500
OUT = Path(__file__).resolve().parent / "results" / "split_overlap.md"


def count(module, level, key) -> tuple[int, int, int]:
    levels = (level,)
    train = {key(module.generate_task(i, levels, 0, "train")) for i in range(TRAIN)}
    n = module.distinct_tasks(TEST, levels, 0, "test")
    test = [key(module.generate_task(i, levels, 0, "test")) for i in range(n)]
    return len(set(test) & train), len(set(test)), n


def main() -> None:
    rows = []
    for level in math_tasks.LEVELS:
        rows.append((f"math level {level}", *count(math_tasks, level, lambda t: t.question)))
    for level in sorted(countdown_tasks.LEVELS):
        rows.append((f"Countdown level {level}", *count(
            countdown_tasks, level,
            lambda t: countdown_tasks.canonical_problem(t.numbers, t.target))))
    for form in ("default", "compact"):
        world, _ = generated_world(0, form)
        train = {t.question for t in world.tasks["train"]}
        test = [t.question for t in world.tasks["test"]][:TEST]
        rows.append((f"search, {form} world", len(set(test) & train), len(set(test)),
                     len(test)))
    lines = ["# Held-out problems that are also training problems", "",
             f"`python benchmarks/split_overlap.py`: the first {TEST} test-split tasks (all, "
             f"where a level holds fewer) against {TRAIN:,} train-split tasks, by canonical "
             "problem (srpo_envs.splits).", "",
             "| family | test tasks | distinct | also train problems |", "|---|---:|---:|---:|"]
    lines += [f"| {name} | {n} | {distinct} | {overlap} |" for name, overlap, distinct, n in rows]
    OUT.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
