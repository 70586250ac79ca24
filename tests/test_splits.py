"""Held-out means held-out: train, validation and test are disjoint by content, and for
generated math by the computation, not only the wording.

Before ``srpo_envs.splits``, each split was its own seeded stream over the same finite
space: 117 of 499 level-0 math test questions and all 207 distinct Countdown level-0
test problems also occurred among 20,000 training draws. Then math split by question
text (issue 60): all 122 computations of level 0's 500 test tasks, and 449 of level 3's
472, were training computations under other names and items.
"""

from __future__ import annotations

import pytest

from srpo_envs import countdown_tasks, math_tasks
from srpo_envs.envs.search_env import generated_world
from srpo_envs.splits import MISS_LIMIT, SMALL_SPLIT, SplitSource, split_of

TRAIN_DRAWS, TEST_TASKS = 20_000, 500


def math_key(task) -> str:
    """A math problem's computation: its reference arithmetic, no names or items."""
    return math_tasks.computation(task.solution)


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
    # math level 0: about 125 computations in all, a quarter of them test ones
    assert 20 <= math_tasks.distinct_tasks(500, (0,), 0, "test") < SMALL_SPLIT
    assert math_tasks.distinct_tasks(500, (2,), 0, "test") == 500


def test_the_split_is_a_function_of_content_alone():
    """Another task seed draws other problems, but never moves a problem across splits."""
    for seed in (0, 1, 7):
        for i in range(300):
            for split in ("train", "validation", "test"):
                task = math_tasks.generate_task(i, (0, 1), seed, split)
                assert split_of(math_key(task)) == split
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
    from srpo_agents.running.evaluate import held_out

    config = TrainConfig(env="SRPO-Countdown-v0", workflow="single", difficulty=(0,),
                         eval_tasks=500, out=str(tmp_path))
    lines: list[str] = []
    envs, indices = held_out(config, log=lines.append)
    held = countdown_tasks.distinct_tasks(500, (0,), 0, "test")
    assert indices == list(range(held))
    assert any(f"{held} distinct tasks (asked for 500)" in line for line in lines), lines
    problems = {countdown_key(envs[0].task(i)) for i in indices}
    assert len(problems) == held


def test_no_held_out_math_problem_asks_a_training_computation_in_other_words():
    """The same arithmetic under another name and item is the same problem: level 1's
    test computations never occur in training, while many of its training computations
    recur there under several wordings (so the key is not the text)."""
    train = [math_tasks.generate_task(i, (1,), 0, "train") for i in range(5000)]
    by_computation: dict[str, set[str]] = {}
    for task in train:
        by_computation.setdefault(math_key(task), set()).add(task.question)
    assert max(len(q) for q in by_computation.values()) > 3   # one sum, many wordings
    test = [math_tasks.generate_task(i, (1,), 0, "test")
            for i in range(math_tasks.distinct_tasks(500, (1,), 0, "test"))]
    assert test and not {math_key(t) for t in test} & set(by_computation)
    assert math_key(train[0]) in train[0].solution and "\\boxed" not in math_key(train[0])


@pytest.mark.parametrize("env_id,settings,small", [
    ("SRPO-Math-v0", {"difficulty": (0,)}, True),
    ("SRPO-Math-v0", {"difficulty": (2,)}, False),
    ("SRPO-Countdown-v0", {"difficulty": (0,)}, True),
    ("SRPO-Countdown-v0", {"difficulty": (1,)}, False),
])
def test_a_level_too_small_to_split_is_named_when_evaluated(tmp_path, env_id, settings, small):
    """Evaluating on a held-out split of fewer than SMALL_SPLIT problems logs a warning
    that names the levels and the count."""
    from srpo_agents.config import TrainConfig
    from srpo_agents.running.evaluate import held_out

    config = TrainConfig(env=env_id, workflow="single", eval_tasks=500, out=str(tmp_path),
                         **settings)
    lines: list[str] = []
    held_out(config, log=lines.append)
    warnings = [line for line in lines if line.startswith("warning:")]
    if small:
        assert warnings and "too small to split" in warnings[0], lines
        assert f"levels {settings['difficulty']}" in warnings[0]
    else:
        assert not warnings, warnings


# Level 0's test tasks 0, 7 and 499 under the splits before issue 60 (keyed by question
# text), read from the code of 7958bba^: split_by="text" must give these same tasks, so
# issue 50's runs can be repeated on them.
TEXT_KEYED_LEVEL_0_TEST = {
    0: ("Fatima has 9 cards. Then Fatima finds 4 more. How many cards does Fatima have now?", "13"),
    7: ("Gus has 4 shells. Then Gus finds 3 more. How many shells does Gus have now?", "7"),
    499: ("Eli has 9 toy cars. Then Eli uses 9. How many toy cars does Eli have now?", "0"),
}


def test_split_by_text_repeats_the_splits_before_issue_60():
    for index, (question, answer) in TEXT_KEYED_LEVEL_0_TEST.items():
        task = math_tasks.generate_task(index, (0,), 0, "test", split_by="text")
        assert (task.question, task.answer) == (question, answer)
    assert math_tasks.distinct_tasks(500, (0,), 0, "test", split_by="text") == 500
    # held out by wording only: level 0's text-keyed test split asks for training arithmetic
    train = {math_key(math_tasks.generate_task(i, (0,), 0, "train", split_by="text"))
             for i in range(2000)}
    test = [math_key(math_tasks.generate_task(i, (0,), 0, "test", split_by="text"))
            for i in range(100)]
    assert sum(key in train for key in test) > 50


def test_the_math_env_takes_split_by_and_warns_on_text():
    from srpo_envs.envs.math_env import MathEnv

    env = MathEnv(difficulty=0, split="test", split_by="text")
    assert env.task(0).question == TEXT_KEYED_LEVEL_0_TEST[0][0]
    assert "held out by wording only" in env.held_out_warning()
    assert MathEnv(difficulty=0, split="train", split_by="text").held_out_warning() is None
    assert "too small to split" in MathEnv(difficulty=0, split="test").held_out_warning()
    with pytest.raises(ValueError, match="split_by='wording'"):
        MathEnv(split_by="wording")
    with pytest.raises(ValueError, match="split_by='x'"):
        math_tasks.generate_task(0, (0,), 0, "test", split_by="x")
