"""Held-out means held-out: train, validation and test are disjoint by content.

Before ``srpo_envs.splits``, each split was its own seeded stream over the same finite
space: 117 of 499 level-0 math test questions and all 207 distinct Countdown level-0
test problems also occurred among 20,000 training draws.
"""

from __future__ import annotations

import pytest

from srpo_envs import countdown_tasks, math_tasks
from srpo_envs.envs.search_env import generated_world
from srpo_envs.splits import MISS_LIMIT, SplitSource, split_of

TRAIN_DRAWS, TEST_TASKS = 20_000, 500


def math_key(task) -> str:
    return task.question


def countdown_key(task) -> str:
    return countdown_tasks.canonical_problem(task.numbers, task.target)


FAMILIES = [("math", level, math_tasks, math_key) for level in math_tasks.LEVELS]
FAMILIES += [("countdown", level, countdown_tasks, countdown_key)
             for level in sorted(countdown_tasks.LEVELS)]


@pytest.mark.parametrize("family,level,module,key", FAMILIES,
                         ids=[f"{f}-{lv}" for f, lv, *_ in FAMILIES])
def test_no_test_problem_is_a_train_problem(family, level, module, key):
    levels = (level,)
    train = {key(module.generate_task(i, levels, 0, "train")) for i in range(TRAIN_DRAWS)}
    available = module.distinct_tasks(TEST_TASKS, levels, 0, "test")
    test = [key(module.generate_task(i, levels, 0, "test")) for i in range(available)]
    validation = [key(module.generate_task(i, levels, 0, "validation"))
                  for i in range(module.distinct_tasks(200, levels, 0, "validation"))]
    assert not set(test) & train, f"{family} level {level}: test problems among train ones"
    assert not set(validation) & train and not set(validation) & set(test)
    assert len(set(test)) == len(test), "test indices must map to distinct problems"
    assert len(set(validation)) == len(validation)
    if available < TEST_TASKS:  # a small level: every distinct test problem, then wrap
        assert key(module.generate_task(available, levels, 0, "test")) == test[0]


def test_small_levels_say_how_many_distinct_problems_they_hold():
    # Countdown level 0 has 138 problems in all; about a quarter of them are test ones.
    held = countdown_tasks.distinct_tasks(500, (0,), 0, "test")
    assert 20 <= held < 80
    assert countdown_tasks.distinct_tasks(500, (1,), 0, "test") == 500
    assert math_tasks.distinct_tasks(500, (0,), 0, "test") == 500


def test_the_split_is_a_function_of_content_alone():
    """Another task seed draws other problems, but never moves a problem across splits."""
    for seed in (0, 1, 7):
        for i in range(300):
            for split in ("train", "validation", "test"):
                task = math_tasks.generate_task(i, (0, 1), seed, split)
                assert split_of(task.question) == split
                cd = countdown_tasks.generate_task(i, (0, 1), seed, split)
                assert split_of(countdown_key(cd)) == split
    assert math_tasks.generate_task(3, (1,), 0, "test") == math_tasks.generate_task(3, (1,), 0, "test")


def test_an_exhausted_stream_stops_and_wraps():
    """A space of 40 problems: a held-out split finds each of its own once, stops after
    MISS_LIMIT draws without a new one, and wraps its indices."""
    source = SplitSource("toy-space", "test", lambda rng: rng.randrange(40), str)
    mine = sorted(p for p in range(40) if split_of(str(p)) == "test")
    assert source.distinct(1000) == len(mine) > 0
    found = [source.problem(i) for i in range(len(mine))]
    assert sorted(found) == mine
    assert source.problem(len(mine)) == found[0]
    assert source._next_draw >= MISS_LIMIT


def test_search_world_splits_use_disjoint_people():
    for form in ("default", "compact"):
        world, _ = generated_world(0, form)
        people = {split: {t.meta["path"][0] for t in world.tasks[split]}
                  for split in ("train", "validation", "test")}
        assert all(people.values())
        assert not people["train"] & people["test"]
        assert not people["train"] & people["validation"]
        assert not people["validation"] & people["test"]


def test_bad_split_names_the_field():
    with pytest.raises(ValueError, match="split='dev'"):
        math_tasks.generate_task(0, (0,), 0, "dev")
    with pytest.raises(ValueError, match="split='dev'"):
        countdown_tasks.generate_task(0, (0,), 0, "dev")


def test_evaluation_uses_each_distinct_test_problem_once(tmp_path):
    """A run on Countdown level 0 asks for 500 test tasks and gets the split's 40-odd,
    each once; the log says so."""
    from srpo_agents.config import TrainConfig
    from srpo_agents.running.train import held_out

    config = TrainConfig(env="SRPO-Countdown-v0", workflow="single", difficulty=(0,),
                         eval_tasks=500, out=str(tmp_path))
    lines: list[str] = []
    envs, indices = held_out(config, log=lines.append)
    held = countdown_tasks.distinct_tasks(500, (0,), 0, "test")
    assert indices == list(range(held))
    assert any(f"{held} distinct tasks (asked for 500)" in line for line in lines), lines
    problems = {countdown_key(envs[0].task(i)) for i in indices}
    assert len(problems) == held
